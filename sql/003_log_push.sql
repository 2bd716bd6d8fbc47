-- 003_log_push.sql - push_v1 (the allocator and the authoritative dedup probe) and
-- segment_at_v1 (read segments back by offset).
--
-- Does: provision missing queues and partitions, lock every involved partition
-- row in ascending id, probe log_txns for duplicates BEFORE allocating, allocate
-- offset ranges, insert the segment and its hash sidecar row.
-- Does not: hash, compress or look inside blobs (the broker does), or dedup
-- inside one segment (the caller guarantees its hashes are distinct).
--
-- Invariants kept (see 001_log_schema.sql for the model):
--   1. Probe then allocate under the partition row lock: no concurrent pusher can
--      commit rows into the probed span while the lock is held, so the verdict
--      is race-free across brokers.
--   2. A duplicate writes nothing (no allocator bump, no segment, no sidecar), so
--      no savepoint is needed and the bundle's other segments commit untouched.
--   3. created_at = clock_timestamp() taken after every lock of the call is held,
--      so it is monotone per partition in commit order.
--   4. log_txns is written for every queued segment whatever the dedup window:
--      ack by transaction id resolves through it.
--   5. oldest_live_at / oldest_txn_at are only filled when NULL (COALESCE) and
--      last_write_at only moves when more than a second old, so the allocator
--      UPDATE of a partition that already holds data stays HOT.
--
-- "SET jit = off" on this and the other procedures whose statements can be
-- estimated expensive (large windows, many partitions): JIT code is compiled
-- again at every execution, tens of milliseconds on a call that otherwise takes
-- one. The clause costs well under a microsecond per call.

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

-- push_v1: see sql/API.md. r_ord is the zero-based input position.
--
-- Elements naming the same partition are applied in input order. They are
-- processed in "rounds": round k holds the k-th element of every partition, so
-- inside a round every partition appears at most once and the probe and the
-- writes of a round are one statement each; a later round's probe sees the
-- earlier rounds' sidecar rows. The common bundle (one segment per partition) is
-- a single round: lock, probe (only when the broker cannot vouch), write.

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
SET jit = off
AS $$
DECLARE
    v_n       INT := coalesce(cardinality(p_queues), 0);
    v_parts   TEXT[];
    v_pid     UUID[];
    v_win     INT4[];
    v_pw      INT4[];    -- the window the probe covers (v_win, or 900 s resolving)
    v_last    INT8[];    -- partition's last_offset when the element is processed
    v_txs     INT8[];    -- partition's txns_start
    v_round   INT4[];
    v_prev    INT4[];    -- previous element (same partition), NULL for the first
    v_from    INT8[];    -- probe lower bound (exclusive)
    v_probe   BOOL[];    -- probe this element in the current round
    v_base    INT8[];    -- allocated base; NULL = duplicate
    v_wbase   INT8[];    -- bases written in the current round, NULL elsewhere
    v_dord    INT8[] := '{}';
    v_didx    INT4[] := '{}';
    v_doff    INT8[] := '{}';
    v_isdup   BOOL[];
    v_all     BYTEA[];   -- every incoming hash of the elements probed this round
    v_rounds  INT := 0;
    v_found   INT;
    v_lastpid UUID;
    v_lastord INT;
    v_any     BOOL;
    v_now     TIMESTAMPTZ;
    r         RECORD;
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

    -- Resolve and lock. One statement locks every involved partition row in
    -- ascending id (the global lock order shared with acks and retention) and
    -- reads the allocator state under the lock. FOR NO KEY UPDATE serializes
    -- writers exactly like FOR UPDATE but does not block the FOR KEY SHARE that
    -- foreign-key checks take, so a pop creating a consumer row for this
    -- partition does not wait for our commit. Provisioning runs only on a miss,
    -- then the lock statement runs again (locking an already held row is a no-op).
    FOR v_try IN 1 .. 2 LOOP
        v_pid   := array_fill(NULL::UUID, ARRAY[v_n]);
        v_win   := array_fill(NULL::INT4, ARRAY[v_n]);
        v_last  := array_fill(NULL::INT8, ARRAY[v_n]);
        v_txs   := array_fill(NULL::INT8, ARRAY[v_n]);
        v_round := array_fill(NULL::INT4, ARRAY[v_n]);
        v_prev  := array_fill(NULL::INT4, ARRAY[v_n]);
        v_found := 0;
        v_lastpid := NULL;
        FOR r IN
            SELECT u.ord::INT AS ord, p.id, q.dedup_window_seconds AS win,
                   p.last_offset, p.txns_start
            FROM unnest(p_queues, v_parts) WITH ORDINALITY AS u(qn, pn, ord)
            JOIN queen.queues q ON q.tenant_id = p_tenant AND q.name = u.qn
            JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = u.pn
            ORDER BY p.id, u.ord
            FOR NO KEY UPDATE OF p
        LOOP
            v_found := v_found + 1;
            v_pid[r.ord]  := r.id;
            v_win[r.ord]  := r.win;
            v_last[r.ord] := r.last_offset;
            v_txs[r.ord]  := r.txns_start;
            IF r.id = v_lastpid THEN
                v_prev[r.ord]  := v_lastord;
                v_round[r.ord] := v_round[v_lastord] + 1;
            ELSE
                v_round[r.ord] := 1;
            END IF;
            v_rounds  := greatest(v_rounds, v_round[r.ord]);
            v_lastpid := r.id;
            v_lastord := r.ord;
        END LOOP;
        EXIT WHEN v_found = v_n;
        IF v_try = 2 THEN
            RAISE EXCEPTION 'QPUSH unknown queue or partition';
        END IF;
        -- Inserts in unique-key order, so concurrent provisioners cannot deadlock
        -- on each other's speculative insertions.
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
        v_rounds := 0;
    END LOOP;

    -- The stamp, after every lock is held (invariant 3).
    v_now   := clock_timestamp();
    v_base  := array_fill(NULL::INT8, ARRAY[v_n]);
    v_from  := array_fill(NULL::INT8, ARRAY[v_n]);
    v_pw    := array_fill(0, ARRAY[v_n]);
    v_isdup := array_fill(false, ARRAY[v_n]);

    FOR v_r IN 1 .. v_rounds LOOP
        v_probe := array_fill(false, ARRAY[v_n]);
        v_any := false;
        FOR i IN 1 .. v_n LOOP
            CONTINUE WHEN v_round[i] <> v_r;
            IF v_prev[i] IS NOT NULL THEN
                v_last[i] := coalesce(v_base[v_prev[i]] + p_counts[v_prev[i]] - 1,
                                      v_last[v_prev[i]]);
            END IF;
            -- Two lower bounds: the sidecar purge watermark (nothing below it to
            -- compare against, so an older transaction id is accepted as new) and
            -- the broker's vouched watermark p_verified.
            v_from[i] := greatest(
                CASE WHEN coalesce(p_resolve, false) THEN -1
                     WHEN p_cache_windows IS NOT NULL
                          AND coalesce(p_cache_windows[i], 0) < v_win[i] THEN -1
                     WHEN p_cache_pids IS NOT NULL AND p_cache_pids[i] IS NOT NULL
                          AND p_cache_pids[i] <> v_pid[i] THEN -1
                     ELSE coalesce(p_verified[i], -1) END,
                v_txs[i] - 1);
            v_pw[i] := CASE WHEN v_win[i] > 0 THEN v_win[i]
                            WHEN coalesce(p_resolve, false) THEN 900 ELSE 0 END;
            IF v_pw[i] > 0 AND v_last[i] > v_from[i] THEN
                v_probe[i] := true;
                v_any := true;
            END IF;
        END LOOP;

        IF v_any THEN
            -- The probe, bounded through the primary key: it starts at the sidecar
            -- row covering v_from + 1 (one backward step), so its cost follows the
            -- unverified span, not the window (measured.md weak point 1). Per
            -- incoming index, MIN picks the original occurrence.
            --
            -- Stored frames are filtered by "h = ANY(every incoming hash)". Run
            -- through EXECUTE the array is a constant of a one-shot plan, which
            -- PostgreSQL (>= 14) evaluates with a hash table: one lookup per
            -- stored frame, no join for the planner to get wrong. (A cached
            -- plan would see a parameter and scan the array linearly; a join
            -- re-exploded the incoming side per stored row, or sorted the whole
            -- window, depending on row estimates.) The few candidates are mapped
            -- back to their incoming index with hash_index. The planning cost is
            -- paid only when the broker cannot vouch for the span.
            SELECT array_agg(ih.h) INTO v_all
            FROM unnest(p_hashes, v_probe) AS e(hashes, probe)
            CROSS JOIN LATERAL qn.log_unnest_hashes(e.hashes) ih
            WHERE e.probe;
            FOR r IN EXECUTE
                'SELECT x.ord, x.idx, min(x.off) AS off
                 FROM (SELECT e.ord::INT AS ord, qn.hash_index(e.hashes, th.h) AS idx,
                              t.base_offset + th.idx AS off
                       FROM unnest($1::UUID[], $2::INT8[], $3::INT4[], $4::BOOL[], $5::BYTEA[])
                                WITH ORDINALITY AS e(pid, vfrom, win, probe, hashes, ord)
                       CROSS JOIN LATERAL (
                           SELECT t.base_offset, t.hashes
                           FROM queen.log_txns t
                           WHERE t.partition_id = e.pid
                             AND t.base_offset >= coalesce(
                                     (SELECT max(t2.base_offset) FROM queen.log_txns t2
                                      WHERE t2.partition_id = e.pid
                                        AND t2.base_offset <= e.vfrom + 1),
                                     e.vfrom + 1)
                             AND t.end_offset > e.vfrom
                             AND t.created_at >= $6 - make_interval(secs => e.win)) t
                       CROSS JOIN LATERAL qn.log_unnest_hashes(t.hashes) th
                       WHERE e.probe AND t.base_offset + th.idx > e.vfrom
                         AND th.h = ANY ($7)) x
                 WHERE x.idx IS NOT NULL
                 GROUP BY x.ord, x.idx
                 ORDER BY x.ord, x.idx'
                USING v_pid, v_from, v_pw, v_probe, p_hashes, v_now, v_all
            LOOP
                IF p_strict THEN
                    RAISE EXCEPTION 'QDUP duplicate transaction id in segment %', r.ord - 1
                        USING ERRCODE = 'unique_violation';
                END IF;
                v_isdup[r.ord] := true;
                v_dord := v_dord || r.ord;
                v_didx := v_didx || r.idx;
                v_doff := v_doff || r.off;
            END LOOP;
        END IF;

        v_wbase := array_fill(NULL::INT8, ARRAY[v_n]);
        v_any := false;
        FOR i IN 1 .. v_n LOOP
            CONTINUE WHEN v_round[i] <> v_r OR v_isdup[i];
            v_base[i]  := v_last[i] + 1;
            v_wbase[i] := v_base[i];
            v_any := true;
        END LOOP;

        IF v_any THEN
            -- Allocate and write in one statement. The bases were computed from
            -- last_offset read under the lock we still hold, so setting it
            -- absolutely is the same as adding the count.
            WITH w AS (
                SELECT u.pid, u.base, u.cnt, u.blob, u.hashes
                FROM unnest(v_pid, v_wbase, p_counts, p_blobs, p_hashes)
                         AS u(pid, base, cnt, blob, hashes)
                WHERE u.base IS NOT NULL
            ), s AS (
                INSERT INTO queen.log_segments (partition_id, base_offset, end_offset, created_at, blob)
                SELECT w.pid, w.base, w.base + w.cnt - 1, v_now, w.blob FROM w
            ), t AS (
                INSERT INTO queen.log_txns (partition_id, base_offset, end_offset, created_at, hashes)
                SELECT w.pid, w.base, w.base + w.cnt - 1, v_now, w.hashes FROM w
            )
            UPDATE queen.log_partitions p
            SET last_offset    = w.base + w.cnt - 1,
                oldest_live_at = coalesce(p.oldest_live_at, v_now),
                oldest_txn_at  = coalesce(p.oldest_txn_at, v_now),
                last_write_at  = CASE WHEN p.last_write_at < v_now - interval '1 second'
                                      THEN v_now ELSE p.last_write_at END
            FROM w
            WHERE p.id = w.pid;
        END IF;
    END LOOP;

    RETURN QUERY
    SELECT (e.ord - 1)::INT4, e.pid, e.win,
           CASE WHEN e.base IS NULL THEN 1 ELSE 0 END::INT2,
           e.base,
           CASE WHEN e.base IS NULL THEN NULL ELSE v_now END,
           d.idx, d.off
    FROM unnest(v_pid, v_win, v_base) WITH ORDINALITY AS e(pid, win, base, ord)
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
LANGUAGE sql STABLE
AS $$
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
    ORDER BY s.base_offset
$$;
