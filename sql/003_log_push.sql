-- 003_log_push.sql - push_one_v1 (one segment into one partition by id: the hot
-- path), push_v1 (by names: first contact; the allocator and the authoritative
-- dedup probe either way) and segment_at_v1 (read segments back by offset).
--
-- Does: provision missing queues and partitions, lock every involved partition
-- row in ascending id (one statement per partition, never several), probe
-- log_txns for duplicates BEFORE allocating, allocate offset ranges, insert the
-- segment and its hash sidecar row.
-- Does not: hash, compress or look inside blobs (the broker does), or dedup
-- inside one segment (the caller guarantees its hashes are distinct).
--
-- Invariants kept (see 001_log_schema.sql for the model):
--   1. Probe then allocate under the partition row lock: no concurrent pusher can
--      commit rows into the probed span while the lock is held, so the verdict
--      is race-free across brokers.
--   2. A duplicate writes nothing (no allocator bump, no segment, no sidecar), so
--      no savepoint is needed and the bundle's other segments commit untouched.
--   3. created_at = clock_timestamp() taken after the partition's row lock is held,
--      so it is monotone per partition in commit order.
--   4. log_txns is written for every queued segment whatever the dedup window:
--      ack by transaction id resolves through it.
--   5. oldest_live_at / oldest_txn_at are only filled when NULL (COALESCE) and
--      last_write_at only moves when more than a second old, so the allocator
--      UPDATE of a partition that already holds data stays HOT.
--
-- JIT: its code is compiled again at every execution, tens of milliseconds on a
-- call that otherwise takes one. The other files put "SET jit = off" on the
-- procedures whose statements can be estimated expensive (large windows, many
-- partitions). Here only the one-shot probe can be, so push_one_v1 turns JIT off
-- with set_config(..., true) just before it, and the common vouched call pays
-- nothing (a SET clause saves and restores the setting at every call).

-- The zero-based index of hash p_h in the 16-byte-stride set p_set, or NULL.
-- Only 16-aligned matches count (a match straddling two hashes is skipped).
CREATE OR REPLACE FUNCTION qn.hash_index(p_set BYTEA, p_h BYTEA)
RETURNS INT4
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    v_from INT := 0;
    v_pos  INT;
BEGIN
    LOOP
        v_pos := position(p_h IN substring(p_set FROM v_from + 1));
        IF v_pos = 0 THEN
            RETURN NULL;
        END IF;
        v_pos := v_from + v_pos - 1;          -- zero-based byte offset
        IF v_pos % 16 = 0 THEN
            RETURN v_pos / 16;
        END IF;
        v_from := v_pos + 1;
    END LOOP;
END;
$$;

-- The id of partition (p_queue, p_partition) of tenant p_tenant, creating the
-- queue (namespace and task from its dotted name) and the partition when
-- missing. Takes no row lock. Internal to the push procedures: the name-keyed
-- first contact.
CREATE OR REPLACE FUNCTION qn.partition_provision(p_tenant UUID, p_queue TEXT, p_partition TEXT)
RETURNS UUID
LANGUAGE plpgsql
AS $$
DECLARE
    v_pid UUID;
BEGIN
    FOR v_try IN 1 .. 2 LOOP
        SELECT p.id INTO v_pid
        FROM queen.queues q
        JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = p_partition
        WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        IF FOUND THEN
            RETURN v_pid;
        END IF;
        EXIT WHEN v_try = 2;
        INSERT INTO queen.queues (tenant_id, name, namespace, task)
        VALUES (p_tenant, p_queue, qn.name_namespace(p_queue), qn.name_task(p_queue))
        ON CONFLICT (tenant_id, name) DO NOTHING;
        INSERT INTO queen.log_partitions (queue_id, name)
        SELECT q.id, p_partition FROM queen.queues q
        WHERE q.tenant_id = p_tenant AND q.name = p_queue
        ON CONFLICT (queue_id, name) DO NOTHING;
    END LOOP;
    RAISE EXCEPTION 'QPUSH unknown queue or partition';
END;
$$;

-- push_one_v1: one segment into one partition, addressed by its id: the hot
-- path, one call per partition (a bundle is several calls in one transaction,
-- sent by the broker in ascending partition id). See sql/API.md.
--
-- Four statements when the broker vouches (lock, segment, sidecar, allocator),
-- each a primary-key probe or insert with a cached generic plan, and no array
-- handling. The probe (only when the broker cannot vouch) is a one-shot
-- statement, as in push_v1.
-- p_pid NULL or unknown (the partition was deleted since the broker learnt
-- its id, or never met, or it is a partition of another tenant than p_tenant:
-- an id never reaches past its tenant): the partition is found by name in
-- p_tenant, created if missing,
-- when p_queue is given; p_verified is then ignored (it was vouched for another
-- partition). Without p_queue an unknown p_pid raises QPUSH unknown partition.
CREATE OR REPLACE FUNCTION qn.push_one_v1(
    p_pid          UUID,
    p_count        INT4,
    p_hashes       BYTEA,
    p_verified     INT8,
    p_blob         BYTEA,
    p_strict       BOOL DEFAULT false,
    p_cache_window INT4 DEFAULT NULL,
    p_resolve      BOOL DEFAULT false,
    p_queue        TEXT DEFAULT NULL,
    p_partition    TEXT DEFAULT NULL,
    p_tenant       UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    OUT r_pid        UUID,
    OUT r_window     INT4,
    OUT r_status     INT2,
    OUT r_base       INT8,
    OUT r_created_at TIMESTAMPTZ,
    OUT r_dup_idx    INT4[],
    OUT r_dup_off    INT8[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_last  INT8;
    v_txs   INT8;
    v_from  INT8 := coalesce(p_verified, -1);
    v_pw    INT4;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR octet_length(p_hashes) IS DISTINCT FROM 16 * p_count
       OR p_blob IS NULL THEN
        RAISE EXCEPTION 'QPUSH bad segment';
    END IF;
    -- Lock the partition row and read the allocator state under the lock.
    -- FOR NO KEY UPDATE serializes writers exactly like FOR UPDATE but does not
    -- block the FOR KEY SHARE that foreign-key checks take, so a pop creating a
    -- consumer row for this partition does not wait for our commit.
    SELECT p.id, p.last_offset, p.txns_start, q.dedup_window_seconds
    INTO r_pid, v_last, v_txs, r_window
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_pid AND q.tenant_id = p_tenant   -- another tenant's id: unknown (011_auth.sql)
    FOR NO KEY UPDATE OF p;
    IF NOT FOUND THEN
        IF p_queue IS NULL OR octet_length(p_queue) NOT BETWEEN 1 AND 255
           OR octet_length(coalesce(nullif(p_partition, ''), 'Default')) > 255 THEN
            RAISE EXCEPTION 'QPUSH unknown partition %', p_pid USING ERRCODE = 'no_data_found';
        END IF;
        r_pid := qn.partition_provision(p_tenant, p_queue,
                                        coalesce(nullif(p_partition, ''), 'Default'));
        SELECT p.last_offset, p.txns_start, q.dedup_window_seconds
        INTO v_last, v_txs, r_window
        FROM queen.log_partitions p
        JOIN queen.queues q ON q.id = p.queue_id
        WHERE p.id = r_pid
        FOR NO KEY UPDATE OF p;
        IF NOT FOUND THEN              -- deleted again in between
            RAISE EXCEPTION 'QPUSH unknown queue or partition';
        END IF;
        v_from := -1;                  -- the watermark was not vouched for this partition
    END IF;
    -- The stamp, after the lock (invariant 3).
    r_created_at := clock_timestamp();

    -- Two lower bounds for the probe: the sidecar purge watermark (nothing below
    -- it to compare against) and the broker's vouched watermark, which counts
    -- only if vouched under a window at least as wide as the queue's.
    IF p_resolve OR p_cache_window < r_window THEN
        v_from := -1;
    END IF;
    v_from := greatest(v_from, v_txs - 1);
    v_pw := CASE WHEN r_window > 0 THEN r_window WHEN p_resolve THEN 900 ELSE 0 END;
    IF v_pw > 0 AND v_last > v_from THEN
        -- The probe, bounded through the primary key: it starts at the sidecar
        -- row covering v_from + 1, so its cost follows the unverified span, not
        -- the window (measured.md weak point 1). Per incoming index MIN picks the
        -- original occurrence. Stored frames are filtered by "h = ANY(incoming
        -- hashes)": through EXECUTE the array is a constant of a one-shot plan,
        -- which PostgreSQL evaluates with a hash table (a cached plan would scan
        -- the array linearly per stored frame). JIT off: the estimate of a wide
        -- window can pass jit_above_cost, and JIT compiles again every time.
        PERFORM set_config('jit', 'off', true);
        EXECUTE
            'SELECT array_agg(x.idx ORDER BY x.idx), array_agg(x.off ORDER BY x.idx)
             FROM (SELECT qn.hash_index($1, th.h) AS idx, min(t.base_offset + th.idx) AS off
                   FROM queen.log_txns t
                   CROSS JOIN LATERAL qn.log_unnest_hashes(t.hashes) th
                   WHERE t.partition_id = $2
                     AND t.base_offset >= coalesce(
                             (SELECT max(t2.base_offset) FROM queen.log_txns t2
                              WHERE t2.partition_id = $2 AND t2.base_offset <= $3 + 1),
                             $3 + 1)
                     AND t.end_offset > $3
                     AND t.created_at >= $4 - make_interval(secs => $5)
                     AND t.base_offset + th.idx > $3
                     AND th.h = ANY ($6)
                   GROUP BY 1) x
             WHERE x.idx IS NOT NULL'
            INTO r_dup_idx, r_dup_off
            USING p_hashes, r_pid, v_from, r_created_at, v_pw,
                  ARRAY(SELECT ih.h FROM qn.log_unnest_hashes(p_hashes) ih);
        IF r_dup_idx IS NOT NULL THEN
            IF p_strict THEN
                RAISE EXCEPTION 'QDUP duplicate transaction id in segment'
                    USING ERRCODE = 'unique_violation';
            END IF;
            r_status := 1;             -- a duplicate writes nothing (invariant 2)
            r_created_at := NULL;
            RETURN;
        END IF;
    END IF;

    -- Allocate and write: one statement (each statement a PL/pgSQL function
    -- runs costs its executor start-up and shutdown, more than these inserts).
    r_status := 0;
    r_base := v_last + 1;
    WITH s AS (
        INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
        VALUES (r_pid, r_base, v_last + p_count, r_created_at, p_blob)
    ), t AS (
        INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
        VALUES (r_pid, r_base, v_last + p_count, r_created_at, p_hashes)
    ), u AS (
        UPDATE queen.log_partitions
        SET last_offset    = v_last + p_count,
            oldest_live_at = coalesce(oldest_live_at, r_created_at),
            oldest_txn_at  = coalesce(oldest_txn_at, r_created_at),
            last_write_at  = CASE WHEN last_write_at < r_created_at - interval '1 second'
                                  THEN r_created_at ELSE last_write_at END
        WHERE id = r_pid
        RETURNING queue_id
    )
    -- the partition has data: into pop_v1's index (qn.partition_pending)
    INSERT INTO qn.partition_pending (queue_id, partition_id)
    SELECT u.queue_id, r_pid FROM u
    ON CONFLICT DO NOTHING;
END;
$$;

-- push_v1: see sql/API.md. r_ord is the zero-based input position. The
-- name-keyed path: a broker's first contact with a partition, transactions,
-- and callers that do not keep partition ids.
--
-- Resolves every (queue, partition) to its id in one statement (no lock),
-- creating what is missing, then pushes element by element through
-- push_one_v1 in ascending (partition id, input position): each partition is
-- locked by a statement of its own, in the global lock order, and elements
-- naming the same partition are applied in input order (a later one's probe
-- sees the earlier ones' sidecar rows).
-- p_cache_windows[i]: the dedup window (seconds) under which the broker computed
-- p_verified[i]. A watermark vouched under a smaller window than the queue's
-- current one is ignored (a /configure that widened the window is not yet known
-- to that broker's cache, which may miss older hashes). NULL array: trust
-- p_verified as given.
-- p_cache_pids[i]: the partition id the watermark was computed for. A watermark
-- of another partition (the queue was deleted and created again, with offsets
-- starting over) is ignored. NULL element or array: not checked.
-- p_resolve: the call resolves a push whose outcome was in doubt (its connection
-- was lost after it was sent): the whole sidecar is probed whatever p_verified
-- says, and also for a queue whose dedup window is 0, over the last 900 s (the
-- sidecar is never purged younger), so a push that did commit is answered
-- duplicate-of-itself instead of being stored twice.
CREATE OR REPLACE FUNCTION qn.push_v1(
    p_queues     TEXT[],
    p_partitions TEXT[],
    p_counts     INT4[],
    p_hashes     BYTEA[],
    p_verified   INT8[],
    p_blobs      BYTEA[],
    p_strict     BOOL DEFAULT false,
    p_tenant     UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_cache_windows INT4[] DEFAULT NULL,
    p_cache_pids UUID[] DEFAULT NULL,
    p_resolve    BOOL DEFAULT false)
RETURNS TABLE (r_ord INT4, r_pid UUID, r_window INT4, r_status INT2, r_base INT8,
               r_created_at TIMESTAMPTZ, r_dup_idx INT4, r_dup_off INT8)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n     INT := coalesce(cardinality(p_queues), 0);
    v_parts TEXT[];
    v_pid   UUID[];
    v_rpid  UUID[];
    v_rwin  INT4[];
    v_rst   INT2[];
    v_rbase INT8[];
    v_rat   TIMESTAMPTZ[];
    v_dord  INT4[] := '{}';
    v_didx  INT4[] := '{}';
    v_doff  INT8[] := '{}';
    v_x     RECORD;
    v_e     RECORD;
BEGIN
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(p_counts), 0) <> v_n
       OR coalesce(cardinality(p_hashes), 0) <> v_n
       OR coalesce(cardinality(p_blobs), 0) <> v_n
       OR (p_partitions IS NOT NULL AND cardinality(p_partitions) <> v_n)
       OR (p_verified IS NOT NULL AND cardinality(p_verified) <> v_n)
       OR (p_cache_windows IS NOT NULL AND cardinality(p_cache_windows) <> v_n)
       OR (p_cache_pids IS NOT NULL AND cardinality(p_cache_pids) <> v_n) THEN
        RAISE EXCEPTION 'QPUSH misaligned arrays';
    END IF;

    v_parts := array_fill(NULL::TEXT, ARRAY[v_n]);
    FOR i IN 1 .. v_n LOOP
        IF p_counts[i] IS NULL OR p_counts[i] < 1 OR p_hashes[i] IS NULL
           OR octet_length(p_hashes[i]) <> 16 * p_counts[i] OR p_blobs[i] IS NULL THEN
            RAISE EXCEPTION 'QPUSH bad segment %', i - 1;
        END IF;
        IF p_queues[i] IS NULL OR octet_length(p_queues[i]) NOT BETWEEN 1 AND 255 THEN
            RAISE EXCEPTION 'QPUSH bad queue name in segment %', i - 1;
        END IF;
        v_parts[i] := coalesce(nullif(p_partitions[i], ''), 'Default');
        IF octet_length(v_parts[i]) > 255 THEN
            RAISE EXCEPTION 'QPUSH bad partition name in segment %', i - 1;
        END IF;
    END LOOP;

    -- Resolve every name to its partition id (no lock). Provisioning runs only
    -- on a miss, inserting in unique-key order so that concurrent provisioners
    -- cannot deadlock on each other's speculative insertions.
    FOR v_try IN 1 .. 2 LOOP
        SELECT array_agg(p.id ORDER BY u.ord) INTO v_pid
        FROM unnest(p_queues, v_parts) WITH ORDINALITY AS u(qn, pn, ord)
        LEFT JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = u.qn
        LEFT JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = u.pn;
        EXIT WHEN array_position(v_pid, NULL) IS NULL;
        IF v_try = 2 THEN
            RAISE EXCEPTION 'QPUSH unknown queue or partition';
        END IF;
        INSERT INTO queen.queues (tenant_id, name, namespace, task)
        SELECT p_tenant, x.qn, qn.name_namespace(x.qn), qn.name_task(x.qn)
        FROM (SELECT DISTINCT qn FROM unnest(p_queues) AS qn) x
        WHERE NOT EXISTS (SELECT 1 FROM queen.queues q
                          WHERE q.tenant_id = p_tenant AND q.name = x.qn)
        ORDER BY x.qn
        ON CONFLICT (tenant_id, name) DO NOTHING;
        INSERT INTO queen.log_partitions (queue_id, name)
        SELECT q.id, x.pn
        FROM (SELECT DISTINCT u.qn, u.pn FROM unnest(p_queues, v_parts) AS u(qn, pn)) x
        JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = x.qn
        WHERE NOT EXISTS (SELECT 1 FROM queen.log_partitions p
                          WHERE p.queue_id = q.id AND p.name = x.pn)
        ORDER BY q.id, x.pn
        ON CONFLICT (queue_id, name) DO NOTHING;
    END LOOP;

    -- One partition at a time, in the global lock order.
    v_rpid := array_fill(NULL::UUID, ARRAY[v_n]);
    v_rwin := array_fill(NULL::INT4, ARRAY[v_n]);
    v_rst := array_fill(NULL::INT2, ARRAY[v_n]);
    v_rbase := array_fill(NULL::INT8, ARRAY[v_n]);
    v_rat := array_fill(NULL::TIMESTAMPTZ, ARRAY[v_n]);
    FOR v_e IN
        SELECT u.pid, u.ord::INT AS ord
        FROM unnest(v_pid) WITH ORDINALITY AS u(pid, ord)
        ORDER BY u.pid, u.ord
    LOOP
        SELECT * INTO v_x
        FROM qn.push_one_v1(
            v_e.pid, p_counts[v_e.ord], p_hashes[v_e.ord],
            CASE WHEN p_cache_pids IS NOT NULL AND p_cache_pids[v_e.ord] IS NOT NULL
                      AND p_cache_pids[v_e.ord] <> v_e.pid THEN -1
                 ELSE coalesce(p_verified[v_e.ord], -1) END,
            p_blobs[v_e.ord], false,
            CASE WHEN p_cache_windows IS NOT NULL THEN coalesce(p_cache_windows[v_e.ord], 0) END,
            coalesce(p_resolve, false), p_tenant => p_tenant);  -- the id path checks it
        IF v_x.r_status = 1 THEN
            IF p_strict THEN
                RAISE EXCEPTION 'QDUP duplicate transaction id in segment %', v_e.ord - 1
                    USING ERRCODE = 'unique_violation';
            END IF;
            v_dord := v_dord || array_fill(v_e.ord, ARRAY[cardinality(v_x.r_dup_idx)]);
            v_didx := v_didx || v_x.r_dup_idx;
            v_doff := v_doff || v_x.r_dup_off;
        END IF;
        v_rpid[v_e.ord] := v_x.r_pid;
        v_rwin[v_e.ord] := v_x.r_window;
        v_rst[v_e.ord] := v_x.r_status;
        v_rbase[v_e.ord] := v_x.r_base;
        v_rat[v_e.ord] := v_x.r_created_at;
    END LOOP;

    RETURN QUERY
    SELECT (e.ord - 1)::INT4, e.pid, e.win, e.st, e.base, e.at, d.idx, d.off
    FROM unnest(v_rpid, v_rwin, v_rst, v_rbase, v_rat) WITH ORDINALITY
             AS e(pid, win, st, base, at, ord)
    LEFT JOIN unnest(v_dord, v_didx, v_doff) AS d(ord, idx, off) ON d.ord = e.ord
    ORDER BY e.ord, d.idx;
END;
$$;

-- segment_at_v1: the distinct segments covering the given offsets, ascending.
-- One backward primary-key step per offset; an offset in a retention gap or past
-- the end finds a segment that does not cover it and yields nothing. Used to
-- resolve a duplicate's original message id and to snapshot dead letters.
CREATE OR REPLACE FUNCTION qn.segment_at_v1(p_pid UUID, p_offsets INT8[])
RETURNS TABLE (r_base INT8, r_end INT8, r_created_at TIMESTAMPTZ, r_blob BYTEA)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN QUERY
        SELECT s.base_offset, s.end_offset, s.created_at, s.blob
        FROM (SELECT DISTINCT h.base_offset
              FROM unnest(p_offsets) AS o(off)
              CROSS JOIN LATERAL (
                  SELECT x.base_offset, x.end_offset
                  FROM queen.log_segments x
                  WHERE x.partition_id = p_pid AND x.base_offset <= o.off
                  ORDER BY x.base_offset DESC
                  LIMIT 1) h
              WHERE h.end_offset >= o.off) b
        JOIN queen.log_segments s ON s.partition_id = p_pid AND s.base_offset = b.base_offset
        ORDER BY s.base_offset;
END;
$$;
