-- 009_admin.sql - administration: partitions of a queue, delete queue, consumer
-- groups (list, seek, delete), dead letters (list, get, delete), stats, the dedup
-- cache's two reads, and the cross-broker wake-up.
--
-- None of these is on the message hot path; they favour exact answers over
-- cached ones, and every cost is stated where it is not O(partitions).
-- Lock order is the global one: log_partitions rows in ascending id, then
-- log_consumers rows in ascending (partition_id, consumer_group).
-- (SET jit = off on the heavier procedures: see 003_log_push.sql.)

-- queue_partitions_v1: one row per partition, by name. depth = messages retained
-- and not yet consumed by the group (committed -1 when it has no row).
CREATE OR REPLACE FUNCTION qn.queue_partitions_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_partition TEXT, r_pid UUID, r_last_offset INT8, r_log_start INT8,
               r_committed INT8, r_depth INT8, r_leased BOOL, r_last_write_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT p.name, p.id, p.last_offset, p.log_start, coalesce(c.committed, -1),
           greatest(p.last_offset - greatest(coalesce(c.committed, -1), p.log_start - 1), 0),
           coalesce(c.batch_end IS NOT NULL AND c.lease_expires_at > now(), false),
           p.last_write_at
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    LEFT JOIN queen.log_consumers c
           ON c.partition_id = p.id
          AND c.consumer_group = coalesce(nullif(p_group, ''), '__QUEUE_MODE__')
    WHERE q.tenant_id = p_tenant AND q.name = p_queue
    ORDER BY p.name
$$;

-- delete_queue_v1: idempotent; returns whether the queue existed. log_txns,
-- log_dlq and qn.partition_pending have no foreign key, so their rows are
-- deleted here first (a sidecar
-- row orphaned by a partition delete would be unreachable forever), and the
-- queue's audit rows with them; the queue row's delete cascades to partitions,
-- segments, cursors, watermarks and subscriptions. The queue row is locked first
-- so no push can provision a new partition of it meanwhile, then its partitions
-- in ascending id (the pushers' order).
CREATE OR REPLACE FUNCTION qn.delete_queue_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS BOOL
LANGUAGE plpgsql
AS $$
DECLARE
    v_qid  UUID;
    v_pids UUID[];
BEGIN
    SELECT q.id INTO v_qid FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT array_agg(x.id) INTO v_pids
    FROM (SELECT p.id FROM queen.log_partitions p WHERE p.queue_id = v_qid
          ORDER BY p.id FOR UPDATE) x;
    IF v_pids IS NOT NULL THEN
        DELETE FROM queen.log_txns WHERE partition_id = ANY (v_pids);
        DELETE FROM queen.log_dlq WHERE partition_id = ANY (v_pids);
        DELETE FROM queen.retention_history WHERE partition_id = ANY (v_pids);
    END IF;
    DELETE FROM qn.partition_pending WHERE queue_id = v_qid;
    DELETE FROM queen.queues WHERE id = v_qid;
    RETURN true;
END;
$$;

-- list_consumer_groups_v1: one row per (group, partition) cursor; an empty or
-- NULL queue / group matches all. lag = retained messages past the cursor; time
-- lag = age in seconds of the oldest unconsumed segment (two primary-key probes),
-- 0 when nothing is pending.
CREATE OR REPLACE FUNCTION qn.list_consumer_groups_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_group TEXT, r_queue TEXT, r_sub_mode TEXT, r_sub_from TIMESTAMPTZ,
               r_partition TEXT, r_pid UUID, r_committed INT8, r_last_offset INT8, r_lag INT8,
               r_time_lag_seconds INT8, r_leased BOOL, r_worker TEXT, r_total_consumed INT8,
               r_retry_count INT4, r_attempt_count INT4)
LANGUAGE sql STABLE
SET jit = off
AS $$
    SELECT x.consumer_group, x.qname, x.subscription_mode, x.subscription_timestamp,
           x.pname, x.pid, x.committed, x.last_offset, x.lag,
           CASE WHEN x.lag > 0 THEN coalesce(
               (SELECT greatest(floor(extract(epoch FROM now() - s.created_at)), 0)::INT8
                FROM queen.log_segments s
                WHERE s.partition_id = x.pid
                  AND s.base_offset >= coalesce(
                          (SELECT max(y.base_offset) FROM queen.log_segments y
                           WHERE y.partition_id = x.pid AND y.base_offset <= x.committed + 1),
                          x.committed + 1)
                  AND s.end_offset > x.committed
                ORDER BY s.base_offset LIMIT 1), 0)
           ELSE 0 END,
           x.leased, CASE WHEN x.leased THEN x.worker_id END, x.total_consumed,
           x.batch_retry_count, x.attempt_count
    FROM (SELECT c.consumer_group, q.name::TEXT AS qname, m.subscription_mode,
                 m.subscription_timestamp, p.name AS pname, p.id AS pid, c.committed,
                 p.last_offset,
                 greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0) AS lag,
                 (c.batch_end IS NOT NULL AND c.lease_expires_at > now()) AS leased,
                 c.worker_id, c.total_consumed, c.batch_retry_count, c.attempt_count
          FROM queen.queues q
          JOIN queen.log_partitions p ON p.queue_id = q.id
          JOIN queen.log_consumers c ON c.partition_id = p.id
          LEFT JOIN queen.consumer_groups_metadata m
                 ON m.tenant_id = q.tenant_id AND m.consumer_group = c.consumer_group
                AND m.queue_id = q.id AND m.partition_name = '' AND m.namespace = ''
                AND m.task = ''
          WHERE q.tenant_id = p_tenant
            AND (coalesce(p_queue, '') = '' OR q.name = p_queue)
            AND (coalesce(p_group, '') = '' OR c.consumer_group = p_group)) x
    ORDER BY x.consumer_group, x.qname, x.pname
$$;

-- seek_consumer_group_step_v1: one step of a seek: moves the group's cursor
-- on at most p_limit partitions of the queue (or the named one), those after
-- p_after by name (NULL: from the first), to the tail (p_to_end) or to just
-- before the first segment created at or after p_ts (the tail when none is),
-- clearing the lease, the retry budget and the attempt counters; deletes the
-- group's empty-scan floor and sweep position (at every step, so a sweep pass
-- that ran between two steps cannot hide a cursor a later step moves back);
-- to the end, drops from pop_v1's index of partitions with data those of the
-- window every group has now consumed. Returns the cursors written and the
-- last name of the window (NULL: the seek is complete). Each step is its own
-- transaction when called so: a seek of a million cursors in one statement
-- ran for minutes (12.3 s at 200,000).
CREATE OR REPLACE FUNCTION qn.seek_consumer_group_step_v1(
    p_group     TEXT,
    p_queue     TEXT,
    p_partition TEXT,
    p_to_end    BOOL,
    p_ts        TIMESTAMPTZ,
    p_after     TEXT,
    p_limit     INT4,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_updated INT4, r_next TEXT)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_group  TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_part   TEXT := nullif(p_partition, '');
    v_end    BOOL := coalesce(p_to_end, false);
    v_lim    INT4 := least(greatest(coalesce(p_limit, 0), 1), 100000);
    v_qid    UUID;
    v_n      INT4;
    v_cnt    INT4;
    v_last   TEXT;
    v_win    UUID[];
    v_ids    UUID[];
    v_lasts  INT8[];
    v_groups TEXT[];
BEGIN
    IF NOT v_end AND p_ts IS NULL THEN
        RAISE EXCEPTION 'QSEEK either to_end or a timestamp is required'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT q.id INTO v_qid FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'QNOTFOUND queue %', p_queue USING ERRCODE = 'no_data_found';
    END IF;
    IF v_part IS NOT NULL AND NOT EXISTS (SELECT 1 FROM queen.log_partitions p
                                          WHERE p.queue_id = v_qid AND p.name = v_part) THEN
        RAISE EXCEPTION 'QNOTFOUND partition %', v_part USING ERRCODE = 'no_data_found';
    END IF;
    -- the window: a range of log_partitions_queue_name_uk
    SELECT array_agg(w.id ORDER BY w.id), count(*), max(w.name) INTO v_win, v_cnt, v_last
    FROM (SELECT p.id, p.name FROM queen.log_partitions p
          WHERE p.queue_id = v_qid AND (v_part IS NULL OR p.name = v_part)
            AND (p_after IS NULL OR p.name > p_after)
          ORDER BY p.name LIMIT v_lim) w;
    v_n := 0;
    IF v_cnt > 0 THEN
        -- ascending partition id: the consumer-row lock order
        INSERT INTO queen.log_consumers AS c (partition_id, consumer_group, committed)
        SELECT p.id, v_group,
               CASE WHEN v_end THEN p.last_offset
                    ELSE coalesce(qn.first_base_since(p.id, p.log_start, p_ts) - 1,
                                  p.last_offset) END
        FROM queen.log_partitions p
        WHERE p.id = ANY (v_win)
        ORDER BY p.id
        ON CONFLICT (partition_id, consumer_group) DO UPDATE
        SET committed = EXCLUDED.committed, batch_end = NULL, worker_id = NULL,
            lease_expires_at = NULL, lease_acquired_at = NULL, batch_retry_count = 0,
            attempt_offset = NULL, attempt_count = 0, lease_conflated = false;
        GET DIAGNOSTICS v_n = ROW_COUNT;
    END IF;
    DELETE FROM queen.consumer_watermarks WHERE queue_id = v_qid AND consumer_group = v_group;
    DELETE FROM qn.scan_sweep WHERE queue_id = v_qid AND consumer_group = v_group;
    IF v_end AND v_cnt > 0 THEN
        -- Partitions of the window every group (this one included) has now
        -- consumed leave pop_v1's index of partitions with data at once, not
        -- one pop at a time: the same check as pending_clear, under each
        -- partition's row lock when it is free (a push holding it keeps its row).
        SELECT array_agg(x.id), array_agg(x.last_offset) INTO v_ids, v_lasts
        FROM (SELECT p.id, p.last_offset
              FROM queen.log_partitions p
              WHERE p.id = ANY (v_win)
              ORDER BY p.id
              FOR NO KEY UPDATE SKIP LOCKED) x;
        SELECT array_agg(g.consumer_group) INTO v_groups
        FROM (SELECT m.consumer_group FROM queen.consumer_groups_metadata m
              WHERE m.queue_id = v_qid
              UNION SELECT v_group) g;
        DELETE FROM qn.partition_pending pp
        USING unnest(coalesce(v_ids, '{}'), coalesce(v_lasts, '{}')) AS x(id, last_offset)
        WHERE pp.queue_id = v_qid AND pp.partition_id = x.id
          AND NOT EXISTS (SELECT 1 FROM unnest(v_groups) AS g(consumer_group)
                          WHERE NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                            WHERE c.partition_id = x.id
                                              AND c.consumer_group = g.consumer_group
                                              AND c.committed >= x.last_offset));
    END IF;
    RETURN QUERY SELECT v_n, CASE WHEN v_cnt < v_lim THEN NULL ELSE v_last END;
END;
$$;

-- seek_consumer_group_v1: the whole seek in one transaction (every step of
-- seek_consumer_group_step_v1, 10,000 partitions each). Returns partitions
-- updated. The broker runs the steps as separate calls instead.
CREATE OR REPLACE FUNCTION qn.seek_consumer_group_v1(
    p_group     TEXT,
    p_queue     TEXT,
    p_partition TEXT,
    p_to_end    BOOL,
    p_ts        TIMESTAMPTZ,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS INT4
LANGUAGE plpgsql
AS $$
DECLARE
    v_after TEXT;
    v_total INT4 := 0;
    r       RECORD;
BEGIN
    LOOP
        SELECT * INTO r FROM qn.seek_consumer_group_step_v1(p_group, p_queue, p_partition,
                                                               p_to_end, p_ts, v_after, 10000,
                                                               p_tenant);
        v_total := v_total + r.r_updated;
        EXIT WHEN r.r_next IS NULL;
        v_after := r.r_next;
    END LOOP;
    RETURN v_total;
END;
$$;

-- delete_consumer_group_v1: deletes the group's cursors on the queue (every
-- queue of the tenant when p_queue is empty) and its empty-scan floors; with
-- p_delete_metadata also its subscriptions, so the next pop subscribes afresh.
-- Without it the stored subscription seeds the new cursors. Returns cursors deleted.
CREATE OR REPLACE FUNCTION qn.delete_consumer_group_v1(
    p_group           TEXT,
    p_queue           TEXT,
    p_delete_metadata BOOL,
    p_tenant          UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS INT4
LANGUAGE plpgsql
AS $$
DECLARE
    v_group TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_all   BOOL := coalesce(p_queue, '') = '';
    v_qids  UUID[];
    v_n     INT4;
BEGIN
    SELECT array_agg(q.id ORDER BY q.id) INTO v_qids
    FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND (v_all OR q.name = p_queue);
    WITH l AS (
        SELECT c.partition_id, c.consumer_group
        FROM queen.log_consumers c
        JOIN queen.log_partitions p ON p.id = c.partition_id
        WHERE p.queue_id = ANY (coalesce(v_qids, '{}')) AND c.consumer_group = v_group
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE OF c
    )
    DELETE FROM queen.log_consumers c USING l
    WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    DELETE FROM queen.consumer_watermarks
    WHERE queue_id = ANY (coalesce(v_qids, '{}')) AND consumer_group = v_group;
    DELETE FROM qn.scan_sweep
    WHERE queue_id = ANY (coalesce(v_qids, '{}')) AND consumer_group = v_group;
    IF coalesce(p_delete_metadata, false) THEN
        DELETE FROM queen.consumer_groups_metadata m
        WHERE m.tenant_id = p_tenant AND m.consumer_group = v_group
          AND (m.queue_id = ANY (coalesce(v_qids, '{}')) OR (v_all AND m.queue_id IS NULL));
    END IF;
    RETURN v_n;
END;
$$;

-- A dead letter's payload as bytes, whichever shape queen.log_dlq has: ours
-- (BYTEA, the bytes as filed) or Queen MQ's (JSONB: the JSON text, as
-- PostgreSQL prints it - key order and spacing normalized). The overload is
-- chosen by the column's type when the functions below are created.
CREATE OR REPLACE FUNCTION qn.dlq_payload_bytes(p BYTEA) RETURNS BYTEA
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT p $$;

CREATE OR REPLACE FUNCTION qn.dlq_payload_bytes(p JSONB) RETURNS BYTEA
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT convert_to(p::TEXT, 'UTF8') $$;

-- list_dlq_v1: newest first; empty or NULL filters match all; p_limit <= 0
-- means 100. Scans idx_log_dlq_partition_failed_at per partition.
-- p_allow_exact / p_allow_prefix (both NULL: all) keep the queues the caller may
-- see, before paging.
DROP FUNCTION IF EXISTS qn.list_dlq_v1(TEXT, TEXT, TEXT, INT4, INT4, UUID);
CREATE OR REPLACE FUNCTION qn.list_dlq_v1(
    p_queue        TEXT,
    p_group        TEXT,
    p_partition    TEXT,
    p_limit        INT4,
    p_offset       INT4,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_allow_exact  TEXT[] DEFAULT NULL,
    p_allow_prefix TEXT[] DEFAULT NULL)
RETURNS TABLE (r_id UUID, r_queue TEXT, r_partition TEXT, r_pid UUID, r_group TEXT,
               r_offset INT8, r_message_id UUID, r_txn TEXT, r_payload BYTEA, r_error TEXT,
               r_retry_count INT4, r_failed_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT d.id, q.name::TEXT, p.name, p.id, d.consumer_group, d."offset", d.message_id,
           d.transaction_id, qn.dlq_payload_bytes(d.payload), d.error,
           coalesce(d.retry_count, 0), d.failed_at
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    JOIN queen.log_dlq d ON d.partition_id = p.id
    WHERE q.tenant_id = p_tenant
      AND (coalesce(p_queue, '') = '' OR q.name = p_queue)
      AND (coalesce(p_partition, '') = '' OR p.name = p_partition)
      AND (coalesce(p_group, '') = '' OR d.consumer_group = p_group)
      AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
           OR q.name = ANY (p_allow_exact)
           OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                      WHERE starts_with(q.name, a.pre)))
    ORDER BY d.failed_at DESC, d.id
    LIMIT CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 100 END
    OFFSET greatest(coalesce(p_offset, 0), 0)
$$;

-- get_dlq_v1: one dead letter by id; no row when missing.
CREATE OR REPLACE FUNCTION qn.get_dlq_v1(p_id UUID)
RETURNS TABLE (r_id UUID, r_queue TEXT, r_partition TEXT, r_pid UUID, r_group TEXT,
               r_offset INT8, r_message_id UUID, r_txn TEXT, r_payload BYTEA, r_error TEXT,
               r_retry_count INT4, r_failed_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT d.id, q.name::TEXT, p.name, d.partition_id, d.consumer_group, d."offset",
           d.message_id, d.transaction_id, qn.dlq_payload_bytes(d.payload), d.error,
           coalesce(d.retry_count, 0), d.failed_at
    FROM queen.log_dlq d
    LEFT JOIN queen.log_partitions p ON p.id = d.partition_id
    LEFT JOIN queen.queues q ON q.id = p.queue_id
    WHERE d.id = p_id
$$;

-- delete_dlq_v1: by id when p_id is given, else every group's row at
-- (p_pid, p_txn). Returns rows deleted.
CREATE OR REPLACE FUNCTION qn.delete_dlq_v1(p_id UUID, p_pid UUID, p_txn TEXT)
RETURNS INT4
LANGUAGE sql
AS $$
    WITH d AS (
        DELETE FROM queen.log_dlq d
        WHERE (p_id IS NOT NULL AND d.id = p_id)
           OR (p_id IS NULL AND d.partition_id = p_pid AND d.transaction_id = p_txn)
        RETURNING 1)
    SELECT count(*)::INT4 FROM d
$$;

-- stats_v1: one row per queue (the named one, or all of the tenant's by name).
-- messages = retained; pending = retained and not yet consumed by the slowest
-- group of each partition (all retained when the partition has no cursor);
-- bytes = stored blob bytes (pg_column_size reads TOAST pointers, not values).
-- Cost: segments and bytes read every segment row of the queue.
CREATE OR REPLACE FUNCTION qn.stats_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_queue TEXT, r_partitions INT4, r_messages INT8, r_segments INT8,
               r_pending INT8, r_dead_letters INT8, r_groups INT4, r_bytes INT8)
LANGUAGE sql STABLE
SET jit = off
AS $$
    SELECT q.name::TEXT,
           coalesce(pa.parts, 0)::INT4,
           coalesce(pa.msgs, 0)::INT8,
           coalesce(sg.segs, 0)::INT8,
           coalesce(pa.pending, 0)::INT8,
           coalesce(dl.n, 0)::INT8,
           coalesce(gr.n, 0)::INT4,
           coalesce(sg.bytes, 0)::INT8
    FROM queen.queues q
    LEFT JOIN LATERAL (
        SELECT count(*) AS parts,
               sum(greatest(p.last_offset + 1 - p.log_start, 0)) AS msgs,
               sum(greatest(p.last_offset - greatest(
                       coalesce((SELECT min(c.committed) FROM queen.log_consumers c
                                 WHERE c.partition_id = p.id), -1),
                       p.log_start - 1), 0)) AS pending
        FROM queen.log_partitions p WHERE p.queue_id = q.id) pa ON true
    LEFT JOIN LATERAL (
        SELECT count(*) AS segs, sum(pg_column_size(s.blob)) AS bytes
        FROM queen.log_partitions p JOIN queen.log_segments s ON s.partition_id = p.id
        WHERE p.queue_id = q.id) sg ON true
    LEFT JOIN LATERAL (
        SELECT count(*) AS n
        FROM queen.log_partitions p JOIN queen.log_dlq d ON d.partition_id = p.id
        WHERE p.queue_id = q.id) dl ON true
    LEFT JOIN LATERAL (
        SELECT count(DISTINCT c.consumer_group) AS n
        FROM queen.log_partitions p JOIN queen.log_consumers c ON c.partition_id = p.id
        WHERE p.queue_id = q.id) gr ON true
    WHERE q.tenant_id = p_tenant AND (coalesce(p_queue, '') = '' OR q.name = p_queue)
    ORDER BY q.name
$$;

-- partition_meta_v1: what the broker's dedup cache memoises per partition.
CREATE OR REPLACE FUNCTION qn.partition_meta_v1(
    p_queue     TEXT,
    p_partition TEXT,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_pid UUID, r_window INT4, r_last_offset INT8, r_txns_start INT8)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT p.id, q.dedup_window_seconds, p.last_offset, p.txns_start
        FROM queen.queues q
        JOIN queen.log_partitions p
          ON p.queue_id = q.id AND p.name = coalesce(nullif(p_partition, ''), 'Default')
        WHERE q.tenant_id = p_tenant AND q.name = p_queue;
END;
$$;

-- txns_window_v1: the dedup cache's hydration, every sidecar row created within
-- p_seconds of now, ascending. created_at is monotone in base order, so the
-- qualifying rows are a suffix of the partition's (already purged) sidecar.
CREATE OR REPLACE FUNCTION qn.txns_window_v1(p_pid UUID, p_seconds INT4)
RETURNS TABLE (r_base INT8, r_end INT8, r_created_at TIMESTAMPTZ, r_hashes BYTEA)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT t.base_offset, t.end_offset, t.created_at, t.hashes
        FROM queen.log_txns t
        WHERE t.partition_id = p_pid
          AND t.created_at >= now() - make_interval(secs => greatest(coalesce(p_seconds, 0), 0))
        ORDER BY t.base_offset;
END;
$$;

-- txns_since_v1: the sidecar rows after offset p_after (end_offset > p_after),
-- ascending, found through the primary key from the row covering p_after + 1.
-- The dedup cache reads it to close a gap another broker left, instead of
-- hydrating the whole window again.
CREATE OR REPLACE FUNCTION qn.txns_since_v1(p_pid UUID, p_after INT8)
RETURNS TABLE (r_base INT8, r_end INT8, r_created_at TIMESTAMPTZ, r_hashes BYTEA)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT t.base_offset, t.end_offset, t.created_at, t.hashes
        FROM queen.log_txns t
        WHERE t.partition_id = p_pid
          AND t.base_offset >= coalesce(
                  (SELECT max(t2.base_offset) FROM queen.log_txns t2
                   WHERE t2.partition_id = p_pid AND t2.base_offset <= p_after + 1),
                  p_after + 1)
          AND t.end_offset > p_after
        ORDER BY t.base_offset;
END;
$$;

-- notify_push_v1: wakes long-polling pops on other brokers. Sent after the
-- pushes committed, outside their transaction; one notification per distinct
-- queue, payload "tenant/queue" (tenant as UUID text). PostgreSQL folds identical
-- notifications of one transaction, and delivers them at commit.
CREATE OR REPLACE FUNCTION qn.notify_push_v1(
    p_queues TEXT[],
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM count(pg_notify('queen_push', p_tenant::TEXT || '/' || x.q))
    FROM (SELECT DISTINCT q FROM unnest(p_queues) AS q WHERE q IS NOT NULL AND q <> '') x;
END;
$$;

-- ---------------------------------------------------------------- paged listings
-- The *_page_v1 procedures are keyset pages of the listings above (the
-- broker's page tokens carry the last key of the previous page). Each takes the
-- key of the last row already returned (all NULL: the first page) and p_limit
-- (<= 0 or NULL means 100; at most 1001 whatever the caller asks: the broker's
-- largest page, 1000, plus the one row that tells it another page follows), and
-- returns the rows strictly after that key in the listing's order. A row added
-- behind the key is never returned by a later page and a row added ahead of it
-- is returned once: no row is skipped or repeated because of inserts. Cost: one
-- index range scan from the key, O(page) rows.

-- list_queues_page_v1: list_queues_v1 by name after p_after.
CREATE OR REPLACE FUNCTION qn.list_queues_page_v1(
    p_namespace    TEXT,
    p_task         TEXT,
    p_after        TEXT,
    p_limit        INT4,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_allow_exact  TEXT[] DEFAULT NULL,
    p_allow_prefix TEXT[] DEFAULT NULL)
RETURNS TABLE (r_id UUID, r_name TEXT, r_namespace TEXT, r_task TEXT, r_created_at TIMESTAMPTZ,
               r_priority INT4, r_lease_time INT4, r_retry_limit INT4, r_retry_delay INT4,
               r_max_size INT4, r_ttl INT4, r_dead_letter_queue BOOL,
               r_dlq_after_max_retries BOOL, r_delayed_processing INT4, r_window_buffer INT4,
               r_retention_seconds INT4, r_completed_retention_seconds INT4,
               r_retention_enabled BOOL, r_encryption_enabled BOOL,
               r_max_wait_time_seconds INT4, r_min_pop_wait_time INT4,
               r_dedup_window_seconds INT4, r_partitions INT4, r_segments INT8,
               r_messages INT8)
LANGUAGE sql STABLE
AS $$
    SELECT x.* FROM qn.queue_rows(ARRAY(
        SELECT q.id FROM queen.queues q
        WHERE q.tenant_id = p_tenant
          AND (p_after IS NULL OR q.name > p_after)
          AND (coalesce(p_namespace, '') = '' OR q.namespace = p_namespace)
          AND (coalesce(p_task, '') = '' OR q.task = p_task)
          AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
               OR q.name = ANY (p_allow_exact)
               OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                          WHERE starts_with(q.name, a.pre)))
        ORDER BY q.name
        LIMIT least(CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 100 END, 1001))) x
$$;

-- queue_partitions_page_v1: queue_partitions_v1 by name after p_after, through
-- the (queue_id, name) unique index.
CREATE OR REPLACE FUNCTION qn.queue_partitions_page_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_after  TEXT,
    p_limit  INT4,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_partition TEXT, r_pid UUID, r_last_offset INT8, r_log_start INT8,
               r_committed INT8, r_depth INT8, r_leased BOOL, r_last_write_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT p.name, p.id, p.last_offset, p.log_start, coalesce(c.committed, -1),
           greatest(p.last_offset - greatest(coalesce(c.committed, -1), p.log_start - 1), 0),
           coalesce(c.batch_end IS NOT NULL AND c.lease_expires_at > now(), false),
           p.last_write_at
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    LEFT JOIN queen.log_consumers c
           ON c.partition_id = p.id
          AND c.consumer_group = coalesce(nullif(p_group, ''), '__QUEUE_MODE__')
    WHERE q.tenant_id = p_tenant AND q.name = p_queue
      AND (p_after IS NULL OR p.name > p_after)
    ORDER BY p.name
    LIMIT least(CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 100 END, 1001)
$$;

-- queue_depth_v1: the sum of queue_partitions_v1's depths over every partition
-- of the queue (what GetQueue reports beside a page). One aggregate over the
-- queue's partition rows and the group's cursors, no row leaves the server;
-- NULL when the queue does not exist.
CREATE OR REPLACE FUNCTION qn.queue_depth_v1(
    p_queue  TEXT,
    p_group  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS INT8
LANGUAGE sql STABLE
SET jit = off
AS $$
    SELECT coalesce(sum(greatest(p.last_offset
                                 - greatest(coalesce(c.committed, -1), p.log_start - 1), 0)), 0)::INT8
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    LEFT JOIN queen.log_consumers c
           ON c.partition_id = p.id
          AND c.consumer_group = coalesce(nullif(p_group, ''), '__QUEUE_MODE__')
    WHERE q.tenant_id = p_tenant AND q.name = p_queue
$$;

-- cursor_time_lag: age in seconds of the oldest segment past the cursor
-- (two primary-key probes); 0 when none is retained.
CREATE OR REPLACE FUNCTION qn.cursor_time_lag(p_pid UUID, p_committed INT8)
RETURNS INT8
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(
        (SELECT greatest(floor(extract(epoch FROM now() - s.created_at)), 0)::INT8
         FROM queen.log_segments s
         WHERE s.partition_id = p_pid
           AND s.base_offset >= coalesce(
                   (SELECT max(y.base_offset) FROM queen.log_segments y
                    WHERE y.partition_id = p_pid AND y.base_offset <= p_committed + 1),
                   p_committed + 1)
           AND s.end_offset > p_committed
         ORDER BY s.base_offset LIMIT 1), 0)
$$;

-- list_consumer_groups_page_v1: list_consumer_groups_v1's rows, ordered by
-- (group, queue, partition), after the key (p_after_group, p_after_queue,
-- p_after_partition). r_total_lag and r_max_time_lag are the whole (group,
-- queue)'s, not the page's: lag summed over every cursor of the group on the
-- queue, and the largest time lag among them (two primary-key probes per
-- lagging cursor; cursors without lag cost nothing). p_allow_exact /
-- p_allow_prefix (both NULL: all) keep the queues the caller may see, before
-- paging.
CREATE OR REPLACE FUNCTION qn.list_consumer_groups_page_v1(
    p_queue             TEXT,
    p_group             TEXT,
    p_after_group       TEXT,
    p_after_queue       TEXT,
    p_after_partition   TEXT,
    p_limit             INT4,
    p_tenant            UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_allow_exact       TEXT[] DEFAULT NULL,
    p_allow_prefix      TEXT[] DEFAULT NULL)
RETURNS TABLE (r_group TEXT, r_queue TEXT, r_sub_mode TEXT, r_sub_from TIMESTAMPTZ,
               r_partition TEXT, r_pid UUID, r_committed INT8, r_last_offset INT8, r_lag INT8,
               r_time_lag_seconds INT8, r_leased BOOL, r_worker TEXT, r_total_consumed INT8,
               r_retry_count INT4, r_attempt_count INT4, r_total_lag INT8, r_max_time_lag INT8)
LANGUAGE sql STABLE
SET jit = off
AS $$
    WITH page AS (
        SELECT c.consumer_group, q.id AS qid, q.name::TEXT AS qname, p.name AS pname,
               p.id AS pid, c.committed, p.last_offset,
               greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0) AS lag,
               (c.batch_end IS NOT NULL AND c.lease_expires_at > now()) AS leased,
               c.worker_id, c.total_consumed, c.batch_retry_count, c.attempt_count
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id
        JOIN queen.log_consumers c ON c.partition_id = p.id
        WHERE q.tenant_id = p_tenant
          AND (coalesce(p_queue, '') = '' OR q.name = p_queue)
          AND (coalesce(p_group, '') = '' OR c.consumer_group = p_group)
          AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
               OR q.name = ANY (p_allow_exact)
               OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                          WHERE starts_with(q.name, a.pre)))
          AND (p_after_group IS NULL
               OR (c.consumer_group, q.name::TEXT, p.name)
                  > (p_after_group, p_after_queue, p_after_partition))
        ORDER BY c.consumer_group, q.name::TEXT, p.name
        LIMIT least(CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 100 END, 1001)
    ),
    tot AS (
        SELECT g.consumer_group, g.qid,
               sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))::INT8
                   AS total_lag,
               coalesce(max(qn.cursor_time_lag(p.id, c.committed))
                        FILTER (WHERE p.last_offset > greatest(c.committed, p.log_start - 1)),
                        0)::INT8 AS max_time_lag
        FROM (SELECT DISTINCT consumer_group, qid FROM page) g
        JOIN queen.log_partitions p ON p.queue_id = g.qid
        JOIN queen.log_consumers c
          ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
        GROUP BY g.consumer_group, g.qid
    )
    SELECT x.consumer_group, x.qname, m.subscription_mode, m.subscription_timestamp,
           x.pname, x.pid, x.committed, x.last_offset, x.lag,
           CASE WHEN x.lag > 0 THEN qn.cursor_time_lag(x.pid, x.committed) ELSE 0 END,
           x.leased, CASE WHEN x.leased THEN x.worker_id END, x.total_consumed,
           x.batch_retry_count, x.attempt_count, t.total_lag, t.max_time_lag
    FROM page x
    JOIN tot t ON t.consumer_group = x.consumer_group AND t.qid = x.qid
    LEFT JOIN queen.queues q ON q.id = x.qid
    LEFT JOIN queen.consumer_groups_metadata m
           ON m.tenant_id = q.tenant_id AND m.consumer_group = x.consumer_group
          AND m.queue_id = x.qid AND m.partition_name = '' AND m.namespace = ''
          AND m.task = ''
    ORDER BY x.consumer_group, x.qname, x.pname
$$;

-- list_dlq_page_v1: list_dlq_v1, newest first ((failed_at DESC, id) order),
-- after the key (p_after_at, p_after_id). A dead letter filed while a client
-- pages is newer than every key it holds, so it is never returned by a later
-- page (it heads a new listing).
CREATE OR REPLACE FUNCTION qn.list_dlq_page_v1(
    p_queue        TEXT,
    p_group        TEXT,
    p_partition    TEXT,
    p_after_at     TIMESTAMPTZ,
    p_after_id     UUID,
    p_limit        INT4,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_allow_exact  TEXT[] DEFAULT NULL,
    p_allow_prefix TEXT[] DEFAULT NULL)
RETURNS TABLE (r_id UUID, r_queue TEXT, r_partition TEXT, r_pid UUID, r_group TEXT,
               r_offset INT8, r_message_id UUID, r_txn TEXT, r_payload BYTEA, r_error TEXT,
               r_retry_count INT4, r_failed_at TIMESTAMPTZ)
LANGUAGE sql STABLE
AS $$
    SELECT d.id, q.name::TEXT, p.name, p.id, d.consumer_group, d."offset", d.message_id,
           d.transaction_id, qn.dlq_payload_bytes(d.payload), d.error,
           coalesce(d.retry_count, 0), d.failed_at
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    JOIN queen.log_dlq d ON d.partition_id = p.id
    WHERE q.tenant_id = p_tenant
      AND (coalesce(p_queue, '') = '' OR q.name = p_queue)
      AND (coalesce(p_partition, '') = '' OR p.name = p_partition)
      AND (coalesce(p_group, '') = '' OR d.consumer_group = p_group)
      AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
           OR q.name = ANY (p_allow_exact)
           OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                      WHERE starts_with(q.name, a.pre)))
      AND (p_after_at IS NULL
           OR d.failed_at < p_after_at
           OR (d.failed_at = p_after_at AND d.id > p_after_id))
    ORDER BY d.failed_at DESC, d.id
    LIMIT least(CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 100 END, 1001)
$$;

-- group_lags_v1: one row per (group, queue) of the tenant, ordered so, with
-- the lag summed over the group's cursors on the queue: what the broker's
-- per-queue metrics need, without sending a row per cursor (a million
-- partitions would otherwise mean a million rows per refresh). The columns are
-- list_consumer_groups_v1's, partition columns NULL.
CREATE OR REPLACE FUNCTION qn.group_lags_v1(
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_group TEXT, r_queue TEXT, r_sub_mode TEXT, r_sub_from TIMESTAMPTZ,
               r_partition TEXT, r_pid UUID, r_committed INT8, r_last_offset INT8, r_lag INT8,
               r_time_lag_seconds INT8, r_leased BOOL, r_worker TEXT, r_total_consumed INT8,
               r_retry_count INT4, r_attempt_count INT4)
LANGUAGE sql STABLE
SET jit = off
AS $$
    SELECT c.consumer_group, q.name::TEXT, NULL::TEXT, NULL::TIMESTAMPTZ, NULL::TEXT, NULL::UUID,
           NULL::INT8, NULL::INT8,
           sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))::INT8,
           NULL::INT8, NULL::BOOL, NULL::TEXT, NULL::INT8, NULL::INT4, NULL::INT4
    FROM queen.queues q
    JOIN queen.log_partitions p ON p.queue_id = q.id
    JOIN queen.log_consumers c ON c.partition_id = p.id
    WHERE q.tenant_id = p_tenant
    GROUP BY c.consumer_group, q.name
    ORDER BY c.consumer_group, q.name::TEXT
$$;

-- stats_step_v1: one step of the per-queue figures' walk (qn.stats_sweep):
-- the next p_max_parts partitions by id after the stored position, their
-- partitions, retained messages, pending (stats_v1's: past the slowest
-- cursor), dead letters per queue and each group's lag per queue added into
-- qn.stats_acc. A window shorter than p_max_parts ends the pass: qn.stats_snap
-- becomes the accumulated figures (stamped with the pass's start) and the next
-- call begins a new pass. Returns the partitions read; -1 when another caller
-- holds the walk (whoever does not get the lock does nothing and never waits).
-- Cost: one primary-key range of the window, a probe of its cursors and dead
-- letters per partition, whatever the partition count.
CREATE OR REPLACE FUNCTION qn.stats_step_v1(p_max_parts INT4)
RETURNS INT4
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_n    INT4 := greatest(coalesce(p_max_parts, 0), 1);
    v_pos  UUID;
    v_pass TIMESTAMPTZ;
    v_last UUID;
    v_got  INT4;
BEGIN
    IF NOT pg_try_advisory_xact_lock(737003) THEN
        RETURN -1;
    END IF;
    SELECT s.pos, s.pass_at INTO v_pos, v_pass FROM qn.stats_sweep s;
    IF NOT FOUND THEN
        v_pass := now();
        INSERT INTO qn.stats_sweep (pos, pass_at) VALUES (NULL, v_pass);
        DELETE FROM qn.stats_acc;
    END IF;
    SELECT count(*), max(w.id::TEXT)::UUID INTO v_got, v_last
    FROM (SELECT p.id FROM queen.log_partitions p
          WHERE v_pos IS NULL OR p.id > v_pos
          ORDER BY p.id LIMIT v_n) w;
    IF v_got > 0 THEN
        INSERT INTO qn.stats_acc AS a (queue_id, consumer_group, parts, msgs, pending, dead, lag)
        SELECT p.queue_id, '', count(*), sum(greatest(p.last_offset + 1 - p.log_start, 0)),
               sum(greatest(p.last_offset - greatest(coalesce(mc.m, -1), p.log_start - 1), 0)),
               sum(dl.n), 0
        FROM queen.log_partitions p
        LEFT JOIN LATERAL (SELECT min(c.committed) AS m FROM queen.log_consumers c
                           WHERE c.partition_id = p.id) mc ON true
        LEFT JOIN LATERAL (SELECT count(*) AS n FROM queen.log_dlq d
                           WHERE d.partition_id = p.id) dl ON true
        WHERE (v_pos IS NULL OR p.id > v_pos) AND p.id <= v_last
        GROUP BY p.queue_id
        ON CONFLICT (queue_id, consumer_group) DO UPDATE
        SET parts = a.parts + EXCLUDED.parts, msgs = a.msgs + EXCLUDED.msgs,
            pending = a.pending + EXCLUDED.pending, dead = a.dead + EXCLUDED.dead;
        INSERT INTO qn.stats_acc AS a (queue_id, consumer_group, parts, msgs, pending, dead, lag)
        SELECT p.queue_id, c.consumer_group, 0, 0, 0, 0,
               sum(greatest(p.last_offset - greatest(c.committed, p.log_start - 1), 0))
        FROM queen.log_partitions p
        JOIN queen.log_consumers c ON c.partition_id = p.id
        WHERE (v_pos IS NULL OR p.id > v_pos) AND p.id <= v_last
        GROUP BY p.queue_id, c.consumer_group
        ON CONFLICT (queue_id, consumer_group) DO UPDATE SET lag = a.lag + EXCLUDED.lag;
    END IF;
    IF v_got < v_n THEN
        -- the pass is over: publish it, and the next call begins another
        DELETE FROM qn.stats_snap;
        INSERT INTO qn.stats_snap (queue_id, consumer_group, parts, msgs, pending, dead, lag,
                                   taken_at)
        SELECT a.queue_id, a.consumer_group, a.parts, a.msgs, a.pending, a.dead, a.lag, v_pass
        FROM qn.stats_acc a;
        DELETE FROM qn.stats_acc;
        DELETE FROM qn.stats_sweep;
    ELSE
        UPDATE qn.stats_sweep SET pos = v_last;
    END IF;
    RETURN v_got;
END;
$$;

-- stats_cached_v1: stats_v1's columns from the last whole pass of the walk
-- (qn.stats_snap), after one step of it (p_step partitions; 0 or NULL: none).
-- Only queues the pass met (a queue created since, or before the first pass
-- ends, is absent); r_segments and r_bytes are 0 (not counted: they read
-- every segment row). What the metrics refresh reads: one bounded step per
-- refresh, seconds at most at any size, off the hot path.
CREATE OR REPLACE FUNCTION qn.stats_cached_v1(
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_step   INT4 DEFAULT 0)
RETURNS TABLE (r_queue TEXT, r_partitions INT4, r_messages INT8, r_segments INT8,
               r_pending INT8, r_dead_letters INT8, r_groups INT4, r_bytes INT8)
LANGUAGE plpgsql
SET jit = off
AS $$
BEGIN
    IF coalesce(p_step, 0) > 0 THEN
        PERFORM qn.stats_step_v1(p_step);
    END IF;
    RETURN QUERY
        SELECT q.name::TEXT, s.parts::INT4, s.msgs, 0::INT8, s.pending, s.dead,
               (SELECT count(*) FROM qn.stats_snap g
                WHERE g.queue_id = q.id AND g.consumer_group <> '')::INT4,
               0::INT8
        FROM queen.queues q
        JOIN qn.stats_snap s ON s.queue_id = q.id AND s.consumer_group = ''
        WHERE q.tenant_id = p_tenant
        ORDER BY q.name;
END;
$$;

-- group_lags_cached_v1: group_lags_v1's rows from the last whole pass of the
-- walk (qn.stats_snap): one row per (group, queue) of the tenant.
CREATE OR REPLACE FUNCTION qn.group_lags_cached_v1(
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_group TEXT, r_queue TEXT, r_sub_mode TEXT, r_sub_from TIMESTAMPTZ,
               r_partition TEXT, r_pid UUID, r_committed INT8, r_last_offset INT8, r_lag INT8,
               r_time_lag_seconds INT8, r_leased BOOL, r_worker TEXT, r_total_consumed INT8,
               r_retry_count INT4, r_attempt_count INT4)
LANGUAGE sql STABLE
AS $$
    SELECT s.consumer_group, q.name::TEXT, NULL::TEXT, NULL::TIMESTAMPTZ, NULL::TEXT, NULL::UUID,
           NULL::INT8, NULL::INT8, s.lag, NULL::INT8, NULL::BOOL, NULL::TEXT, NULL::INT8,
           NULL::INT4, NULL::INT4
    FROM qn.stats_snap s
    JOIN queen.queues q ON q.id = s.queue_id
    WHERE q.tenant_id = p_tenant AND s.consumer_group <> ''
    ORDER BY s.consumer_group, q.name::TEXT
$$;

-- delete_queue_rows: deletes at most p_max_rows rows of dying queue p_qid
-- (qn.queue_deleting), a window of its partitions (by name) at a time:
-- segments, sidecar rows, dead letters, audit rows, cursors and index entries
-- of the window by ctid lists of at most the budget left, then the window's
-- partition rows once nothing hangs off them; the queue row (cascading to its
-- subscriptions, floors and sweep positions) and its qn.queue_deleting row
-- when no partition is left. Returns rows deleted, and o_done when the queue
-- is gone. Callers serialize per queue with the advisory lock (46, queue id).
CREATE OR REPLACE FUNCTION qn.delete_queue_rows(p_qid UUID, p_max_rows INT4,
                                                   OUT o_rows INT8, OUT o_done BOOL)
LANGUAGE plpgsql
AS $$
DECLARE
    v_left INT8 := greatest(coalesce(p_max_rows, 0), 1);
    v_ids  UUID[];
    v_n    INT8;
    v_tab  TEXT;
BEGIN
    o_rows := 0;
    o_done := false;
    LOOP
        v_ids := ARRAY(SELECT p.id FROM queen.log_partitions p WHERE p.queue_id = p_qid
                       ORDER BY p.queue_id, p.name LIMIT least(v_left, 1000));
        IF cardinality(v_ids) = 0 THEN
            DELETE FROM queen.queues WHERE id = p_qid;
            DELETE FROM qn.queue_deleting WHERE queue_id = p_qid;
            o_rows := o_rows + 1;
            o_done := true;
            RETURN;
        END IF;
        FOREACH v_tab IN ARRAY ARRAY['queen.log_segments', 'queen.log_txns', 'queen.log_dlq',
                                     'queen.retention_history', 'queen.log_consumers'] LOOP
            EXECUTE format('DELETE FROM %s WHERE ctid = ANY (ARRAY('
                           'SELECT x.ctid FROM %s x WHERE x.partition_id = ANY ($1) LIMIT $2))',
                           v_tab, v_tab)
                USING v_ids, v_left;
            GET DIAGNOSTICS v_n = ROW_COUNT;
            o_rows := o_rows + v_n;
            v_left := v_left - v_n;
            EXIT WHEN v_left <= 0;
        END LOOP;
        EXIT WHEN v_left <= 0;
        DELETE FROM qn.partition_pending WHERE queue_id = p_qid AND partition_id = ANY (v_ids);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        o_rows := o_rows + v_n;
        v_left := v_left - v_n;
        EXIT WHEN v_left < cardinality(v_ids);
        -- nothing hangs off the window any more: its rows, in id order
        DELETE FROM queen.log_partitions WHERE id = ANY (v_ids);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        o_rows := o_rows + v_n;
        v_left := v_left - v_n;
        EXIT WHEN v_left <= 0;
    END LOOP;
END;
$$;

-- delete_queue_step_v1: see sql/API.md. -1: no such queue, live or dying;
-- 0: deleted (nothing left); 1: more steps needed. p_first: the call's first
-- step, the only one that hides a live queue of the name (a queue a push made
-- under the name meanwhile is not the one being deleted).
CREATE OR REPLACE FUNCTION qn.delete_queue_step_v1(
    p_queue    TEXT,
    p_tenant   UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_max_rows INT4 DEFAULT 10000,
    p_first    BOOL DEFAULT true)
RETURNS INT4
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_qid  UUID;
    v_r    RECORD;
BEGIN
    -- the first step: out of sight of every name and of its tenant's ids
    SELECT q.id INTO v_qid FROM queen.queues q
    WHERE p_first AND q.tenant_id = p_tenant AND q.name = p_queue
    FOR UPDATE;
    IF FOUND THEN
        INSERT INTO qn.queue_deleting (queue_id, tenant_id, name)
        VALUES (v_qid, p_tenant, p_queue)
        ON CONFLICT (queue_id) DO NOTHING;
        UPDATE queen.queues
        SET tenant_id = '00000000-0000-0000-0000-00000000dead', name = id::TEXT
        WHERE id = v_qid;
        RETURN 1;
    END IF;
    SELECT d.queue_id INTO v_qid FROM qn.queue_deleting d
    WHERE d.tenant_id = p_tenant AND d.name = p_queue
    ORDER BY d.started_at LIMIT 1;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    -- one step at a time per queue (the maintenance cycle may be helping)
    PERFORM pg_advisory_xact_lock(hashtextextended(v_qid::TEXT, 46));
    SELECT * INTO v_r FROM qn.delete_queue_rows(v_qid, p_max_rows);
    IF v_r.o_done AND NOT EXISTS (SELECT 1 FROM qn.queue_deleting d
                                  WHERE d.tenant_id = p_tenant AND d.name = p_queue) THEN
        RETURN 0;
    END IF;
    RETURN 1;
END;
$$;

-- delete_queue_finish_v1: the maintenance cycle's share of step deletion: at
-- most p_max_rows rows of the oldest dying queue whose step lock is free (a
-- call deleting it right now keeps it). Returns rows deleted.
CREATE OR REPLACE FUNCTION qn.delete_queue_finish_v1(p_max_rows INT4)
RETURNS INT8
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    d RECORD;
    v_r RECORD;
BEGIN
    FOR d IN SELECT x.queue_id FROM qn.queue_deleting x ORDER BY x.started_at LIMIT 16 LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended(d.queue_id::TEXT, 46));
        SELECT * INTO v_r FROM qn.delete_queue_rows(d.queue_id, p_max_rows);
        RETURN v_r.o_rows;
    END LOOP;
    RETURN 0;
END;
$$;
