-- queen_fixture.sql - a database shaped as Queen MQ's own SQL lays it down
-- (shared/reference/queen-log-engine.md section 3, tables, indexes and storage
-- parameters exactly; section 2, the procedures whose names or signatures met
-- ours, with minimal bodies). Written for the `queen` SQL suite
-- (test_sql_queen.c) from the reference, not copied from Queen MQ.
--
-- Like Queen MQ's SQL it is idempotent and may be applied again at any time: the
-- suite applies it again after our migration, as a Queen MQ broker restarting
-- next to ours would, and that must still work.

CREATE SCHEMA IF NOT EXISTS queen;

-- ---------------------------------------------------------------- shared tables

CREATE TABLE IF NOT EXISTS queen.queues (
    id                              UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    name                            VARCHAR(255) NOT NULL,
    tenant_id                       UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    namespace                       VARCHAR(255),
    task                            VARCHAR(255),
    priority                        INTEGER DEFAULT 0,
    lease_time                      INTEGER DEFAULT 60,
    retry_limit                     INTEGER DEFAULT 3,
    retry_delay                     INTEGER DEFAULT 1000,
    ttl                             INTEGER DEFAULT 3600,
    dead_letter_queue               BOOLEAN DEFAULT true,
    dlq_after_max_retries           BOOLEAN DEFAULT true,
    delayed_processing              INTEGER DEFAULT 0,
    window_buffer                   INTEGER DEFAULT 0,
    retention_seconds               INTEGER DEFAULT 0,
    completed_retention_seconds     INTEGER DEFAULT 0,
    retention_enabled               BOOLEAN DEFAULT false,
    encryption_enabled              BOOLEAN DEFAULT false,
    max_wait_time_seconds           INTEGER DEFAULT 0,
    max_queue_size                  INTEGER DEFAULT 0,
    min_pop_wait_time               INTEGER DEFAULT 0,
    dedup_window_seconds            INTEGER NOT NULL DEFAULT 3600,
    created_at                      TIMESTAMPTZ DEFAULT now()
);
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS retention_sink_hold TEXT DEFAULT '';
ALTER TABLE queen.queues ADD COLUMN IF NOT EXISTS retention_sink_hold_max_seconds INTEGER
    DEFAULT 604800;
CREATE UNIQUE INDEX IF NOT EXISTS queues_tenant_name_uk ON queen.queues (tenant_id, name);
CREATE INDEX IF NOT EXISTS idx_queues_name ON queen.queues (name);

CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    id                     UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id              UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    consumer_group         TEXT NOT NULL,
    queue_id               UUID REFERENCES queen.queues (id) ON DELETE CASCADE,
    partition_name         TEXT NOT NULL DEFAULT '',
    namespace              TEXT NOT NULL DEFAULT '',
    task                   TEXT NOT NULL DEFAULT '',
    subscription_mode      TEXT NOT NULL,
    subscription_timestamp TIMESTAMPTZ NOT NULL,
    created_at             TIMESTAMPTZ DEFAULT now()
);
ALTER TABLE queen.consumer_groups_metadata ADD COLUMN IF NOT EXISTS conflation BOOLEAN
    DEFAULT false;
CREATE UNIQUE INDEX IF NOT EXISTS cgm_identity_uk ON queen.consumer_groups_metadata
    (tenant_id, consumer_group, queue_id, partition_name, namespace, task) NULLS NOT DISTINCT;
CREATE INDEX IF NOT EXISTS idx_cgm_queue ON queen.consumer_groups_metadata (queue_id);

CREATE TABLE IF NOT EXISTS queen.consumer_watermarks (
    queue_id           UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    consumer_group     VARCHAR(255) NOT NULL DEFAULT '__QUEUE_MODE__',
    last_empty_scan_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

CREATE TABLE IF NOT EXISTS queen.retention_history (
    id               BIGSERIAL PRIMARY KEY,
    partition_id     UUID NOT NULL,
    messages_deleted INTEGER DEFAULT 0,
    retention_type   VARCHAR(50),
    executed_at      TIMESTAMPTZ DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_retention_history_partition
    ON queen.retention_history (partition_id);
CREATE INDEX IF NOT EXISTS idx_retention_history_executed ON queen.retention_history (executed_at);
CREATE INDEX IF NOT EXISTS idx_retention_history_executed_desc
    ON queen.retention_history (executed_at DESC);

CREATE TABLE IF NOT EXISTS queen.system_state (
    key   TEXT PRIMARY KEY,
    value JSONB
);

-- ---------------------------------------------------------------- log tables

CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id            UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id      UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name          TEXT NOT NULL DEFAULT 'Default',
    last_offset   BIGINT NOT NULL DEFAULT -1,
    log_start     BIGINT NOT NULL DEFAULT 0,
    txns_start    BIGINT NOT NULL DEFAULT 0,
    last_write_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (queue_id, name)
);
ALTER TABLE queen.log_partitions ADD COLUMN IF NOT EXISTS oldest_live_at TIMESTAMPTZ;
ALTER TABLE queen.log_partitions ADD COLUMN IF NOT EXISTS oldest_txn_at TIMESTAMPTZ;
CREATE INDEX IF NOT EXISTS idx_log_partitions_queue_write
    ON queen.log_partitions (queue_id, last_write_at);
CREATE INDEX IF NOT EXISTS idx_log_partitions_queue_oldest
    ON queen.log_partitions (queue_id, oldest_live_at) WHERE oldest_live_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_log_partitions_queue_oldest_txn
    ON queen.log_partitions (queue_id, oldest_txn_at) WHERE oldest_txn_at IS NOT NULL;
ALTER TABLE queen.log_partitions SET (fillfactor = 70, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500, autovacuum_vacuum_cost_delay = 0, vacuum_truncate = off);

CREATE TABLE IF NOT EXISTS queen.log_segments (
    partition_id UUID NOT NULL REFERENCES queen.log_partitions (id) ON DELETE CASCADE,
    base_offset  BIGINT NOT NULL,
    end_offset   BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    blob         BYTEA NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE queen.log_segments ALTER COLUMN blob SET STORAGE EXTERNAL;
ALTER TABLE queen.log_segments SET (autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3, autovacuum_vacuum_cost_limit = 4000,
    autovacuum_vacuum_cost_delay = 0, toast.autovacuum_vacuum_scale_factor = 0.1,
    toast.autovacuum_vacuum_insert_scale_factor = 0.3, toast.autovacuum_vacuum_cost_limit = 4000,
    toast.autovacuum_vacuum_cost_delay = 0);

CREATE TABLE IF NOT EXISTS queen.log_txns (
    partition_id UUID NOT NULL,
    base_offset  BIGINT NOT NULL,
    end_offset   BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    hashes       BYTEA NOT NULL,
    PRIMARY KEY (partition_id, base_offset)
);
ALTER TABLE queen.log_txns SET (autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3, autovacuum_vacuum_cost_delay = 0);

CREATE TABLE IF NOT EXISTS queen.log_consumers (
    partition_id      UUID NOT NULL REFERENCES queen.log_partitions (id) ON DELETE CASCADE,
    consumer_group    TEXT NOT NULL DEFAULT '__QUEUE_MODE__',
    committed         BIGINT NOT NULL DEFAULT -1,
    batch_end         BIGINT,
    worker_id         TEXT,
    lease_expires_at  TIMESTAMPTZ,
    lease_acquired_at TIMESTAMPTZ,
    batch_retry_count INTEGER NOT NULL DEFAULT 0,
    attempt_offset    BIGINT,
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    total_consumed    BIGINT NOT NULL DEFAULT 0,
    lease_conflated   BOOLEAN NOT NULL DEFAULT false,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
ALTER TABLE queen.log_consumers SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500, autovacuum_vacuum_cost_delay = 0, vacuum_truncate = off);

CREATE TABLE IF NOT EXISTS queen.log_dlq (
    id             UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id   UUID NOT NULL,
    consumer_group TEXT NOT NULL,
    "offset"       BIGINT NOT NULL,
    message_id     UUID,
    transaction_id TEXT,
    payload        JSONB,
    error          TEXT,
    retry_count    INTEGER DEFAULT 0,
    failed_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS idx_log_dlq_partition_failed_at
    ON queen.log_dlq (partition_id, failed_at DESC);

CREATE TABLE IF NOT EXISTS queen.hotlist_repairs (
    tenant_id      UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    queue_name     TEXT NOT NULL,
    consumer_group TEXT NOT NULL,
    partition_name TEXT,
    repair_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    reason         TEXT,
    PRIMARY KEY (tenant_id, queue_name, consumer_group)
);
CREATE INDEX IF NOT EXISTS idx_hotlist_repairs_at ON queen.hotlist_repairs (repair_at);

-- ---------------------------------------------------------------- procedures

CREATE OR REPLACE FUNCTION queen.log_unnest_hashes(p BYTEA)
RETURNS TABLE (idx INT, h BYTEA)
LANGUAGE sql IMMUTABLE
AS $$
    SELECT g, substring(p FROM g * 16 + 1 FOR 16)
    FROM generate_series(0, octet_length(p) / 16 - 1) AS g
$$;

-- The one whose name and arguments our earlier delete_queue_v1 had, with
-- another result type: either side's CREATE OR REPLACE failed on the other's.
CREATE OR REPLACE FUNCTION queen.delete_queue_v1(p_queue_name TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS JSONB
LANGUAGE plpgsql
AS $$
DECLARE
    v_qid UUID;
BEGIN
    SELECT id INTO v_qid FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue_name;
    IF v_qid IS NOT NULL THEN
        DELETE FROM queen.log_txns WHERE partition_id IN
            (SELECT id FROM queen.log_partitions WHERE queue_id = v_qid);
        DELETE FROM queen.log_dlq WHERE partition_id IN
            (SELECT id FROM queen.log_partitions WHERE queue_id = v_qid);
        DELETE FROM queen.queues WHERE id = v_qid;
    END IF;
    RETURN jsonb_build_object('deleted', true, 'queue', p_queue_name, 'existed', v_qid IS NOT NULL);
END;
$$;

-- Same name as our earlier configure_queue_v1(text, jsonb, bool, uuid): a call
-- with three arguments could be ambiguous between the two.
CREATE OR REPLACE FUNCTION queen.configure_queue_v1(p_queue_name TEXT, p_options JSONB,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT jsonb_build_object('queue', p_queue_name, 'options', coalesce(p_options, '{}')) $$;

CREATE OR REPLACE FUNCTION queen.log_push_one_v1(p_queue TEXT, p_partition TEXT,
    p_msg_count INT, p_hashes BYTEA, p_verified BIGINT, p_blob BYTEA, p_pid UUID DEFAULT NULL,
    p_window INT DEFAULT NULL, p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"status":"fixture"}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_push_multi_v1(p_queues TEXT[], p_partitions TEXT[],
    p_msg_counts INT[], p_hashes BYTEA[], p_verified INT8[], p_blobs BYTEA[],
    p_tenants UUID[] DEFAULT NULL)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '[]'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_segment_at_v1(p_pid UUID, p_off BIGINT)
RETURNS TABLE (r_base BIGINT, r_end BIGINT, r_created TIMESTAMPTZ, r_blob BYTEA)
LANGUAGE sql STABLE
AS $$
    SELECT s.base_offset, s.end_offset, s.created_at, s.blob FROM queen.log_segments s
    WHERE s.partition_id = p_pid AND s.base_offset <= p_off AND s.end_offset >= p_off
$$;

CREATE OR REPLACE FUNCTION queen.log_pop_v1(p_queue TEXT, p_partition TEXT, p_group TEXT,
    p_budget INT, p_lease_seconds INT, p_worker TEXT, p_auto_ack BOOL DEFAULT false,
    p_sub_mode TEXT DEFAULT 'all', p_sub_from TEXT DEFAULT '',
    p_skip_window_debounce BOOL DEFAULT false,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001', p_conflate BOOL DEFAULT false)
RETURNS TABLE (r_base BIGINT, r_start_idx INT, r_take INT, r_msg_count INT,
               r_created_at TIMESTAMPTZ, r_blob BYTEA)
LANGUAGE sql
AS $$ SELECT NULL::BIGINT, NULL::INT, NULL::INT, NULL::INT, NULL::TIMESTAMPTZ, NULL::BYTEA WHERE false $$;

CREATE OR REPLACE FUNCTION queen.log_ack_v1(p_queue TEXT, p_partition TEXT, p_group TEXT,
    p_worker TEXT, p_upto BIGINT, p_ok BOOL DEFAULT true, p_acked_count INT DEFAULT 0,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":true,"acked":0}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_ack_at_v1(p_partition_id UUID, p_group TEXT,
    p_worker TEXT, p_upto BIGINT, p_ok BOOL, p_count INT)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":true,"acked":0}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_ack_multi_v1(p_pids TEXT[], p_groups TEXT[],
    p_ends BIGINT[], p_workers TEXT[], p_counts INT[])
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":true,"results":[]}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_ack_by_hash_v1(p_partition_id UUID, p_group TEXT,
    p_worker TEXT, p_hashes BYTEA[], p_statuses TEXT[])
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":true,"acked":0}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_renew_lease_v1(p_worker TEXT, p_seconds INT)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"renewed":0,"expiresAt":null}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_dlq_head_v1(p_partition_id UUID, p_group TEXT,
    p_worker TEXT, p_off BIGINT, p_message_id UUID, p_txn TEXT, p_payload JSONB, p_error TEXT)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":false}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_transaction_wire_v1(p JSONB)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"ok":true,"pushes":[],"acks":[]}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_retention_step_v1(p_pid UUID, p_all_cutoff TIMESTAMPTZ,
    p_completed_cutoff TIMESTAMPTZ, p_max_rows INT, p_history_type TEXT DEFAULT NULL)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"deleted":0,"new_log_start":null,"done":true}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_txns_purge_step_v1(p_pid UUID, p_cutoff TIMESTAMPTZ,
    p_max_rows INT)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"deleted":0,"new_txns_start":null,"done":true}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_evict_max_wait_step_v1(p_pid UUID, p_cutoff TIMESTAMPTZ,
    p_max_rows INT)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"deleted":0,"new_log_start":null,"done":true}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_partition_dead_v1(p_pid UUID, p_cutoff TIMESTAMPTZ)
RETURNS BOOL
LANGUAGE sql STABLE
AS $$ SELECT NULL::BOOL $$;

CREATE OR REPLACE FUNCTION queen.log_partition_cleanup_step_v1(p_cutoff TIMESTAMPTZ,
    p_max_rows INT DEFAULT 1000)
RETURNS JSONB
LANGUAGE sql
AS $$ SELECT '{"deleted":0,"done":true}'::JSONB $$;

CREATE OR REPLACE FUNCTION queen.log_fetch_bin_v1(p_queues TEXT[], p_partitions TEXT[],
    p_offsets INT8[], p_max_bytes INT4[], p_budget BIGINT DEFAULT 67108864,
    p_max_records INT DEFAULT 10000,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (meta JSONB, blobs BYTEA[])
LANGUAGE sql STABLE
AS $$ SELECT '[]'::JSONB, ARRAY[]::BYTEA[] $$;
