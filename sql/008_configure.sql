-- 008_configure.sql - configure_queue_v1, get_queue_v1, queue_encrypted_v1,
-- list_queues_v1.
--
-- configure merges by default: an option absent from p_options keeps its stored
-- value. With p_replace, for a queue that did not exist, or for an option sent as
-- JSON null, the option takes its default. (The reference's /configure was a full
-- replace, and "omitting dedupWindowSeconds silently turned a deliberately
-- disabled dedup back on" was its most surprising edge.) The defaults are the
-- column defaults of queen.queues: one truth, shared with implicit creation.
-- Invalid input raises QCONF ... with SQLSTATE 22023 and changes nothing.
-- (SET jit = off on the heavier procedures: see 003_log_push.sql.)

-- Every column of a queue row as the admin functions return it, in the order of
-- p_ids. r_messages counts retained messages (watermark arithmetic);
-- r_segments counts segment rows (an index-only count per partition).
CREATE OR REPLACE FUNCTION qn.queue_rows(p_ids UUID[])
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
SET jit = off
AS $$
    SELECT q.id, q.name::TEXT, q.namespace::TEXT, q.task::TEXT, q.created_at,
           q.priority, q.lease_time, q.retry_limit, q.retry_delay, q.max_queue_size, q.ttl,
           q.dead_letter_queue, q.dlq_after_max_retries, q.delayed_processing,
           q.window_buffer, q.retention_seconds, q.completed_retention_seconds,
           q.retention_enabled, q.encryption_enabled, q.max_wait_time_seconds,
           q.min_pop_wait_time, q.dedup_window_seconds,
           coalesce(ps.parts, 0)::INT4,
           coalesce((SELECT count(*) FROM queen.log_partitions p
                     JOIN queen.log_segments s ON s.partition_id = p.id
                     WHERE p.queue_id = q.id), 0)::INT8,
           coalesce(ps.msgs, 0)::INT8
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, ord)
    JOIN queen.queues q ON q.id = u.id
    LEFT JOIN LATERAL (SELECT count(*) AS parts,
                              sum(greatest(p.last_offset + 1 - p.log_start, 0)) AS msgs
                       FROM queen.log_partitions p WHERE p.queue_id = q.id) ps ON true
    ORDER BY u.ord
$$;

-- One integer option: absent -> p_keep, JSON null -> p_def, else a JSON integer
-- in [p_min, p_max].
CREATE OR REPLACE FUNCTION qn.conf_int(p_opts JSONB, p_key TEXT, p_keep INT4, p_def INT4,
                                          p_min INT8, p_max INT8)
RETURNS INT4
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v JSONB;
    n NUMERIC;
BEGIN
    IF NOT p_opts ? p_key THEN
        RETURN p_keep;
    END IF;
    v := p_opts -> p_key;
    IF jsonb_typeof(v) = 'null' THEN
        RETURN p_def;
    END IF;
    IF jsonb_typeof(v) <> 'number' THEN
        RAISE EXCEPTION 'QCONF invalid %: not a number', p_key USING ERRCODE = 'invalid_parameter_value';
    END IF;
    n := (v #>> '{}')::NUMERIC;
    IF n <> trunc(n) THEN
        RAISE EXCEPTION 'QCONF invalid %: not an integer', p_key USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n < p_min OR n > p_max THEN
        RAISE EXCEPTION 'QCONF invalid %: must be between % and %', p_key, p_min, p_max
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN n::INT4;
END;
$$;

CREATE OR REPLACE FUNCTION qn.conf_bool(p_opts JSONB, p_key TEXT, p_keep BOOL, p_def BOOL)
RETURNS BOOL
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF NOT p_opts ? p_key THEN
        RETURN p_keep;
    END IF;
    CASE jsonb_typeof(p_opts -> p_key)
        WHEN 'null' THEN RETURN p_def;
        WHEN 'boolean' THEN RETURN (p_opts ->> p_key)::BOOL;
        ELSE RAISE EXCEPTION 'QCONF invalid %: not a boolean', p_key
                 USING ERRCODE = 'invalid_parameter_value';
    END CASE;
END;
$$;

CREATE OR REPLACE FUNCTION qn.conf_text(p_opts JSONB, p_key TEXT, p_keep TEXT, p_def TEXT)
RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v TEXT;
BEGIN
    IF NOT p_opts ? p_key THEN
        RETURN p_keep;
    END IF;
    CASE jsonb_typeof(p_opts -> p_key)
        WHEN 'null' THEN RETURN p_def;
        WHEN 'string' THEN v := p_opts ->> p_key;
        ELSE RAISE EXCEPTION 'QCONF invalid %: not a string', p_key
                 USING ERRCODE = 'invalid_parameter_value';
    END CASE;
    IF octet_length(v) > 255 OR v ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'QCONF invalid %: at most 255 bytes, no control characters', p_key
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END;
$$;

-- configure_queue_v1: see sql/API.md. Upserts the queue (never creates a
-- partition) and returns the effective row with r_created = it did not exist.
-- The existing row is locked FOR NO KEY UPDATE: concurrent configures serialize,
-- while pushes creating partitions (whose foreign-key check takes FOR KEY SHARE
-- on this row) are not blocked.
CREATE OR REPLACE FUNCTION qn.configure_queue_v1(
    p_queue   TEXT,
    p_options JSONB,
    p_replace BOOL,
    p_tenant  UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_created BOOL, r_id UUID, r_name TEXT, r_namespace TEXT, r_task TEXT,
               r_created_at TIMESTAMPTZ, r_priority INT4, r_lease_time INT4,
               r_retry_limit INT4, r_retry_delay INT4, r_max_size INT4, r_ttl INT4,
               r_dead_letter_queue BOOL, r_dlq_after_max_retries BOOL,
               r_delayed_processing INT4, r_window_buffer INT4, r_retention_seconds INT4,
               r_completed_retention_seconds INT4, r_retention_enabled BOOL,
               r_encryption_enabled BOOL, r_max_wait_time_seconds INT4,
               r_min_pop_wait_time INT4, r_dedup_window_seconds INT4, r_partitions INT4,
               r_segments INT8, r_messages INT8)
LANGUAGE plpgsql
AS $$
DECLARE
    o        JSONB := coalesce(p_options, '{}'::JSONB);
    k        TEXT;
    d        queen.queues;   -- defaults
    c        queen.queues;   -- current (or defaults)
    n        queen.queues;   -- new values
    v_exists BOOL;
    v_id     UUID;
    I32      CONSTANT INT8 := 2147483647;
BEGIN
    IF p_queue IS NULL OR octet_length(p_queue) NOT BETWEEN 1 AND 255 OR p_queue ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'QCONF invalid queue: 1 to 255 bytes, no control characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF jsonb_typeof(o) <> 'object' THEN
        RAISE EXCEPTION 'QCONF invalid options: not an object' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR k IN SELECT jsonb_object_keys(o) LOOP
        IF k NOT IN ('lease_time', 'retry_limit', 'retry_delay', 'max_size', 'ttl',
                     'dead_letter_queue', 'dlq_after_max_retries', 'delayed_processing',
                     'window_buffer', 'retention_seconds', 'completed_retention_seconds',
                     'retention_enabled', 'encryption_enabled', 'max_wait_time_seconds',
                     'min_pop_wait_time', 'dedup_window_seconds', 'priority', 'namespace',
                     'task') THEN
            RAISE EXCEPTION 'QCONF invalid %: unknown option', k USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;

    -- The defaults: the column defaults of queen.queues. Namespace and task
    -- default to '' (their documented default, proto QueueOptions): only a queue
    -- a push creates takes them from its dotted name; one ConfigureQueue creates,
    -- or replaces, has what it was given, else ''.
    d.tenant_id := p_tenant;
    d.name := p_queue;
    d.namespace := '';
    d.task := '';
    d.priority := 0;
    d.lease_time := 60;
    d.retry_limit := 3;
    d.retry_delay := 1000;
    d.ttl := 3600;
    d.dead_letter_queue := true;
    d.dlq_after_max_retries := true;
    d.delayed_processing := 0;
    d.window_buffer := 0;
    d.retention_seconds := 0;
    d.completed_retention_seconds := 0;
    d.retention_enabled := false;
    d.encryption_enabled := false;
    d.max_wait_time_seconds := 0;
    d.max_queue_size := 0;
    d.min_pop_wait_time := 0;
    d.dedup_window_seconds := 3600;

    LOOP
        SELECT * INTO c FROM queen.queues q
        WHERE q.tenant_id = p_tenant AND q.name = p_queue
        FOR NO KEY UPDATE;
        v_exists := FOUND;
        IF NOT v_exists OR coalesce(p_replace, false) THEN
            v_id := c.id;
            c := d;
            c.id := v_id;
        END IF;
        n := c;
        n.namespace := qn.conf_text(o, 'namespace', c.namespace, d.namespace);
        n.task := qn.conf_text(o, 'task', c.task, d.task);
        n.priority := qn.conf_int(o, 'priority', c.priority, d.priority, -I32 - 1, I32);
        n.lease_time := qn.conf_int(o, 'lease_time', c.lease_time, d.lease_time, 1, 86400);
        n.retry_limit := qn.conf_int(o, 'retry_limit', c.retry_limit, d.retry_limit, 0, 1000000);
        n.retry_delay := qn.conf_int(o, 'retry_delay', c.retry_delay, d.retry_delay, 0, I32);
        n.max_queue_size := qn.conf_int(o, 'max_size', c.max_queue_size, d.max_queue_size, 0, I32);
        n.ttl := qn.conf_int(o, 'ttl', c.ttl, d.ttl, 0, I32);
        n.dead_letter_queue := qn.conf_bool(o, 'dead_letter_queue', c.dead_letter_queue,
                                               d.dead_letter_queue);
        n.dlq_after_max_retries := qn.conf_bool(o, 'dlq_after_max_retries',
                                                   c.dlq_after_max_retries, d.dlq_after_max_retries);
        n.delayed_processing := qn.conf_int(o, 'delayed_processing', c.delayed_processing,
                                               d.delayed_processing, 0, I32);
        n.window_buffer := qn.conf_int(o, 'window_buffer', c.window_buffer, d.window_buffer, 0, I32);
        n.retention_seconds := qn.conf_int(o, 'retention_seconds', c.retention_seconds,
                                              d.retention_seconds, 0, I32);
        n.completed_retention_seconds := qn.conf_int(o, 'completed_retention_seconds',
                                                        c.completed_retention_seconds,
                                                        d.completed_retention_seconds, 0, I32);
        n.retention_enabled := qn.conf_bool(o, 'retention_enabled', c.retention_enabled,
                                               d.retention_enabled);
        n.encryption_enabled := qn.conf_bool(o, 'encryption_enabled', c.encryption_enabled,
                                                d.encryption_enabled);
        n.max_wait_time_seconds := qn.conf_int(o, 'max_wait_time_seconds',
                                                  c.max_wait_time_seconds,
                                                  d.max_wait_time_seconds, 0, I32);
        n.min_pop_wait_time := qn.conf_int(o, 'min_pop_wait_time', c.min_pop_wait_time,
                                              d.min_pop_wait_time, 0, 60000);
        n.dedup_window_seconds := qn.conf_int(o, 'dedup_window_seconds', c.dedup_window_seconds,
                                                 d.dedup_window_seconds, 0, I32);
        IF v_exists THEN
            UPDATE queen.queues q
            SET namespace = n.namespace, task = n.task, priority = n.priority,
                lease_time = n.lease_time, retry_limit = n.retry_limit,
                retry_delay = n.retry_delay, max_queue_size = n.max_queue_size, ttl = n.ttl,
                dead_letter_queue = n.dead_letter_queue,
                dlq_after_max_retries = n.dlq_after_max_retries,
                delayed_processing = n.delayed_processing, window_buffer = n.window_buffer,
                retention_seconds = n.retention_seconds,
                completed_retention_seconds = n.completed_retention_seconds,
                retention_enabled = n.retention_enabled,
                encryption_enabled = n.encryption_enabled,
                max_wait_time_seconds = n.max_wait_time_seconds,
                min_pop_wait_time = n.min_pop_wait_time,
                dedup_window_seconds = n.dedup_window_seconds
            WHERE q.id = n.id;
            v_id := n.id;
            EXIT;
        END IF;
        INSERT INTO queen.queues (tenant_id, name, namespace, task, priority, lease_time,
                                  retry_limit, retry_delay, max_queue_size, ttl,
                                  dead_letter_queue, dlq_after_max_retries, delayed_processing,
                                  window_buffer, retention_seconds, completed_retention_seconds,
                                  retention_enabled, encryption_enabled, max_wait_time_seconds,
                                  min_pop_wait_time, dedup_window_seconds)
        VALUES (p_tenant, p_queue, n.namespace, n.task, n.priority, n.lease_time,
                n.retry_limit, n.retry_delay, n.max_queue_size, n.ttl, n.dead_letter_queue,
                n.dlq_after_max_retries, n.delayed_processing, n.window_buffer,
                n.retention_seconds, n.completed_retention_seconds, n.retention_enabled,
                n.encryption_enabled, n.max_wait_time_seconds, n.min_pop_wait_time,
                n.dedup_window_seconds)
        ON CONFLICT (tenant_id, name) DO NOTHING
        RETURNING id INTO v_id;
        EXIT WHEN v_id IS NOT NULL;
        -- lost a creation race: merge into the winner's row
    END LOOP;

    RETURN QUERY SELECT NOT v_exists, x.* FROM qn.queue_rows(ARRAY[v_id]) x;
END;
$$;

-- get_queue_v1: no row when missing.
CREATE OR REPLACE FUNCTION qn.get_queue_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
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
        SELECT q.id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue)) x
$$;

-- queue_encrypted_v1: the queue's encryption_enabled flag alone (false when the
-- queue does not exist). What the broker asks before it
-- seals a push; get_queue_v1 also counts the queue's partitions and segments,
-- which at a million partitions took a second of the server for every lookup.
CREATE OR REPLACE FUNCTION qn.queue_encrypted_v1(
    p_queue  TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS BOOL
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT q.encryption_enabled FROM queen.queues q
                     WHERE q.tenant_id = p_tenant AND q.name = p_queue), false)
$$;

-- list_queues_v1: ordered by name; an empty or NULL namespace / task matches all;
-- p_limit <= 0 means no limit. p_allow_exact / p_allow_prefix (both NULL: all)
-- keep the queues the caller may see (a name in p_allow_exact, or starting with
-- an element of p_allow_prefix), before paging.
DROP FUNCTION IF EXISTS qn.list_queues_v1(TEXT, TEXT, INT4, INT4, UUID);
CREATE OR REPLACE FUNCTION qn.list_queues_v1(
    p_namespace    TEXT,
    p_task         TEXT,
    p_limit        INT4,
    p_offset       INT4,
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
          AND (coalesce(p_namespace, '') = '' OR q.namespace = p_namespace)
          AND (coalesce(p_task, '') = '' OR q.task = p_task)
          AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
               OR q.name = ANY (p_allow_exact)
               OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                          WHERE starts_with(q.name, a.pre)))
        ORDER BY q.name
        LIMIT CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit END
        OFFSET greatest(coalesce(p_offset, 0), 0))) x
$$;
