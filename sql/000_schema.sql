-- 000_schema.sql - the shared tables: queue identity and configuration, consumer
-- group subscriptions, the wildcard pop's empty-scan floor, the retention audit.
--
-- Applied at every start by qn_migrate (storage/src/migrate.c) in one transaction,
-- skipped when unchanged. Every statement is idempotent: IF NOT EXISTS for
-- tables, the guarded ensure_* helpers below for indexes, columns and storage,
-- storage parameters re-applied with ALTER ... SET (which rewrites nothing and
-- does not block reads or writes).
--
-- Deliberately not here: the log tables (001_log_schema.sql) and any procedure.
--
-- Two schemas. The tables live in schema queen, where the storage model puts
-- them: a database Queen MQ's own SQL laid down holds the same tables, and both
-- brokers serve its data. Every function of ours lives in schema qn, which is
-- ours alone: Queen MQ defines its procedures in schema queen (some with names
-- we once used there, e.g. queen.delete_queue_v1(text, uuid) returning JSONB),
-- re-applies them at every boot, and neither side may break the other's.
-- Migration bookkeeping is qn.schema_files (storage/src/migrate.c).
--
-- On a database laid down by Queen MQ, CREATE TABLE IF NOT EXISTS finds its
-- tables and changes nothing; the guarded helpers only add what is missing (an
-- index of ours, a column Queen MQ's older versions lacked) and never rewrite a
-- row.

CREATE SCHEMA IF NOT EXISTS queen;
CREATE SCHEMA IF NOT EXISTS qn;

-- Guarded DDL for the schema files. A file is re-applied whole when it changes,
-- on a live database. "CREATE INDEX IF NOT EXISTS" takes its SHARE lock on the
-- table before it looks for the index, "ADD COLUMN IF NOT EXISTS" and "SET
-- STORAGE" take ACCESS EXCLUSIVE: held to the end of the file's transaction,
-- they would stop every push for the whole migration. These run the statement
-- only when there is something to do, so a re-apply takes no such lock.
CREATE OR REPLACE FUNCTION qn.ensure_index(p_name TEXT, p_ddl TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF to_regclass('queen.' || quote_ident(p_name)) IS NULL THEN
        EXECUTE p_ddl;
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION qn.ensure_column(p_table TEXT, p_column TEXT, p_type TEXT)
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = ('queen.' || quote_ident(p_table))::regclass
                     AND attname = p_column AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE queen.%I ADD COLUMN %I %s', p_table, p_column, p_type);
    END IF;
END;
$$;

-- p_storage: 'e' external, 'm' main, 'x' extended, 'p' plain (pg_attribute.attstorage)
CREATE OR REPLACE FUNCTION qn.ensure_storage(p_table TEXT, p_column TEXT, p_storage "char")
RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = ('queen.' || quote_ident(p_table))::regclass
                 AND attname = p_column AND attstorage <> p_storage) THEN
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN %I SET STORAGE %s', p_table, p_column,
                       CASE p_storage WHEN 'e' THEN 'EXTERNAL' WHEN 'm' THEN 'MAIN'
                                      WHEN 'x' THEN 'EXTENDED' ELSE 'PLAIN' END);
    END IF;
END;
$$;

-- One row per queue: its identity (tenant_id, name) and its whole configuration.
-- There is no separate engine-side queue table and no engine selector: one
-- engine. A queue that was never configured exists anyway, provisioned with these
-- defaults by the first push or by an early subscription (pop).
--
-- lease_time has ONE default, 60, used by implicit creation and by
-- configure_queue_v1 alike (the reference had 60 here and 300 in /configure, so
-- what the configuration showed was not the lease actually granted).
--
-- namespace and task are NOT NULL '' (the reference allowed NULL): discovery
-- compares them with '' meaning "any", and a NULL would need COALESCE everywhere.
CREATE TABLE IF NOT EXISTS queen.queues (
    id                          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id                   UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    name                        VARCHAR(255) NOT NULL,
    namespace                   VARCHAR(255) NOT NULL DEFAULT '',
    task                        VARCHAR(255) NOT NULL DEFAULT '',
    priority                    INTEGER NOT NULL DEFAULT 0,
    lease_time                  INTEGER NOT NULL DEFAULT 60,
    retry_limit                 INTEGER NOT NULL DEFAULT 3,
    retry_delay                 INTEGER NOT NULL DEFAULT 1000,
    ttl                         INTEGER NOT NULL DEFAULT 3600,
    dead_letter_queue           BOOLEAN NOT NULL DEFAULT true,
    dlq_after_max_retries       BOOLEAN NOT NULL DEFAULT true,
    delayed_processing          INTEGER NOT NULL DEFAULT 0,
    window_buffer               INTEGER NOT NULL DEFAULT 0,
    retention_seconds           INTEGER NOT NULL DEFAULT 0,
    completed_retention_seconds INTEGER NOT NULL DEFAULT 0,
    retention_enabled           BOOLEAN NOT NULL DEFAULT false,
    encryption_enabled          BOOLEAN NOT NULL DEFAULT false,
    max_wait_time_seconds       INTEGER NOT NULL DEFAULT 0,
    max_queue_size              INTEGER NOT NULL DEFAULT 0,
    min_pop_wait_time           INTEGER NOT NULL DEFAULT 0,
    -- Deduplication is on by default; only an explicit 0 disables the probe.
    dedup_window_seconds        INTEGER NOT NULL DEFAULT 3600,
    created_at                  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Two columns Queen MQ's schema has and ours did not (its S3 sink): while
-- retention_sink_hold names a consumer group, retention deletes only what that
-- group has consumed, or what is older than retention_sink_hold_max_seconds
-- (so a dead sink cannot pin the data forever). See retention_step_v1. Added
-- the way Queen MQ adds them (nullable, with its defaults); already there on a
-- database Queen MQ laid down.
SELECT qn.ensure_column('queues', 'retention_sink_hold', 'TEXT DEFAULT ''''');
SELECT qn.ensure_column('queues', 'retention_sink_hold_max_seconds', 'INTEGER DEFAULT 604800');

-- On the wire a queue is (tenant, name): two tenants may hold the same name.
SELECT qn.ensure_index('queues_tenant_name_uk', $ddl$
    CREATE UNIQUE INDEX queues_tenant_name_uk
    ON queen.queues (tenant_id, name)$ddl$);
SELECT qn.ensure_index('idx_queues_name', $ddl$
    CREATE INDEX idx_queues_name
    ON queen.queues (name)$ddl$);
-- Discovery pops (namespace/task) select queues of one tenant by these.
SELECT qn.ensure_index('idx_queues_tenant_ns_task', $ddl$
    CREATE INDEX idx_queues_tenant_ns_task
    ON queen.queues (tenant_id, namespace, task)$ddl$);

-- A consumer group's durable subscription, one row per (tenant, group, queue) for
-- queue pops, or per (tenant, group, namespace, task) with queue_id NULL for
-- discovery pops. The first insertion is the "group seeded" marker: the pop that
-- wins it bulk-seeds a cursor for every existing partition, and partitions created
-- later seed from subscription_timestamp (epoch for 'all').
CREATE TABLE IF NOT EXISTS queen.consumer_groups_metadata (
    id                     UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id              UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
    consumer_group         TEXT NOT NULL,
    queue_id               UUID REFERENCES queen.queues (id) ON DELETE CASCADE,
    partition_name         TEXT NOT NULL DEFAULT '',
    namespace              TEXT NOT NULL DEFAULT '',
    task                   TEXT NOT NULL DEFAULT '',
    subscription_mode      TEXT NOT NULL CHECK (subscription_mode IN ('all', 'new', 'timestamp')),
    subscription_timestamp TIMESTAMPTZ NOT NULL,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- Queen MQ marks a group it consumes by conflation (last value only) here. This
-- broker does not conflate, so its pops refuse such a group (SQLSTATE 55000)
-- rather than serve it as an ordinary one. Nullable, as Queen MQ adds it.
SELECT qn.ensure_column('consumer_groups_metadata', 'conflation', 'BOOLEAN DEFAULT false');
-- NULLS NOT DISTINCT (PostgreSQL 15): discovery rows have queue_id NULL and must
-- still be unique per (tenant, group, namespace, task).
SELECT qn.ensure_index('cgm_identity_uk', $ddl$
    CREATE UNIQUE INDEX cgm_identity_uk
    ON queen.consumer_groups_metadata
       (tenant_id, consumer_group, queue_id, partition_name, namespace, task)
    NULLS NOT DISTINCT$ddl$);
SELECT qn.ensure_index('idx_cgm_queue', $ddl$
    CREATE INDEX idx_cgm_queue
    ON queen.consumer_groups_metadata (queue_id)$ddl$);

-- The wildcard pop's empty-scan floor per (queue, group): when a scan found
-- nothing pending (leased or not), partitions not written since then cannot hold
-- anything for the group, so the next candidate scan starts at
-- last_empty_scan_at - 2 minutes on idx_log_partitions_queue_write. updated_at
-- rate-limits the full re-check to once per 30 s.
CREATE TABLE IF NOT EXISTS queen.consumer_watermarks (
    queue_id           UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    consumer_group     VARCHAR(255) NOT NULL DEFAULT '__QUEUE_MODE__',
    last_empty_scan_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch',
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_id, consumer_group)
);

-- The audit row each deleting maintenance step writes. messages_deleted counts
-- frames, not segment rows. No foreign key: it records partitions that may be gone
-- (partition cleanup audits its own deletions here). Aged out by metrics_purge_v1.
CREATE TABLE IF NOT EXISTS queen.retention_history (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    partition_id     UUID NOT NULL,
    messages_deleted INTEGER NOT NULL DEFAULT 0,
    retention_type   VARCHAR(50) NOT NULL,
    executed_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
SELECT qn.ensure_index('idx_retention_history_partition', $ddl$
    CREATE INDEX idx_retention_history_partition
    ON queen.retention_history (partition_id)$ddl$);
SELECT qn.ensure_index('idx_retention_history_executed', $ddl$
    CREATE INDEX idx_retention_history_executed
    ON queen.retention_history (executed_at)$ddl$);
