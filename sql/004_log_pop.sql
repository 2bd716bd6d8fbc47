-- 004_log_pop.sql - pop_v1, pop_one_v1, pop_bundle_v1, pop_discover_v1, has_pending_v1 and their helpers.
--
-- Does: subscriptions (first contact of a group with a queue, bulk cursor seed),
-- the candidate scan of a wildcard pop, the claim of a (partition, group) cursor
-- row with SKIP LOCKED, the leased batch, auto-ack, the empty-scan floor.
-- Does not: decompress or slice blobs. A pop returns whole segment rows plus
-- slicing bounds (r_start_idx, r_take); the broker walks the frames.
--
-- Invariants kept:
--   1. One leased batch per (partition, group): the row is claimed only when its
--      lease is free or expired, under FOR UPDATE SKIP LOCKED (pops never wait).
--   2. Lease expiry is passive: a row whose lease_expires_at has passed is free;
--      the next pop redelivers from committed + 1 and, because the batch starts at
--      attempt_offset again, increments attempt_count. The retry budget
--      (batch_retry_count) is never touched by a pop.
--   3. Gap tolerance: when the segment covering committed + 1 is gone, the batch
--      starts at the next segment whose base is greater.
--   4. The cursor is sealed (committed = last_offset) only when the partition has
--      no segment at all, never when segments exist but are merely deferred.
--   5. Existing cursors are never re-seeded by a subscription mode.
--   6. Lock order: consumer rows only (pops take no partition row lock), one at a
--      time, never waiting.
--   7. A group Queen MQ marked conflating (consumer_groups_metadata.conflation)
--      is refused with SQLSTATE 55000, never served as an ordinary group.
--   8. Queue options Queen MQ's schema leaves nullable read as their defaults
--      when NULL (lease_time 60, delays 0).
-- (SET jit = off on the heavier procedures: see 003_log_push.sql.)

-- The first segment (base >= p_from) created at or after p_ts, by binary search
-- over the offset range: created_at is monotone per partition (storage model
-- invariant 2), so O(log range) primary-key steps instead of a forward walk over
-- every older segment. NULL when no such segment exists.
CREATE OR REPLACE FUNCTION qn.first_base_since(p_pid UUID, p_from INT8, p_ts TIMESTAMPTZ)
RETURNS INT8
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_lo   INT8;
    v_hi   INT8;
    v_mid  INT8;
    v_base INT8;
    v_end  INT8;
    v_at   TIMESTAMPTZ;
BEGIN
    SELECT s.base_offset, s.created_at INTO v_base, v_at
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid AND s.base_offset >= p_from
    ORDER BY s.base_offset LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF v_at >= p_ts THEN
        RETURN v_base;              -- the common case ('all' subscriptions: epoch)
    END IF;
    v_lo := v_base;
    SELECT s.base_offset, s.end_offset, s.created_at INTO v_base, v_end, v_at
    FROM queen.log_segments s
    WHERE s.partition_id = p_pid
    ORDER BY s.base_offset DESC LIMIT 1;
    IF v_at < p_ts THEN
        RETURN NULL;                -- nothing that recent
    END IF;
    v_hi := v_base;
    -- Invariant: the answer is a base in (v_lo, v_hi]; the segment at v_lo is
    -- older than p_ts, the one at v_hi is not.
    WHILE TRUE LOOP
        SELECT s.base_offset, s.end_offset, s.created_at INTO v_base, v_end, v_at
        FROM queen.log_segments s
        WHERE s.partition_id = p_pid AND s.base_offset <= v_lo + (v_hi - v_lo) / 2
        ORDER BY s.base_offset DESC LIMIT 1;
        IF v_at >= p_ts THEN
            v_hi := v_base;
        ELSE
            EXIT WHEN v_end + 1 >= v_hi;   -- the next segment starts at v_hi
            v_lo := v_end + 1;
            -- v_lo is itself a base (ranges are contiguous above log_start);
            -- check it so the invariant "segment at v_lo is older" holds.
            SELECT s.created_at INTO v_at FROM queen.log_segments s
            WHERE s.partition_id = p_pid AND s.base_offset = v_lo;
            IF v_at >= p_ts THEN
                RETURN v_lo;
            END IF;
        END IF;
    END LOOP;
    RETURN v_hi;
END;
$$;

-- The cursor a group starts from in a partition it meets for the first time:
-- 'new' at the tail, otherwise just before the first segment created at or after
-- the subscription timestamp (epoch for 'all'), or at the tail when none is.
CREATE OR REPLACE FUNCTION qn.seed_cursor(p_pid UUID, p_mode TEXT, p_ts TIMESTAMPTZ,
                                             p_log_start INT8, p_last INT8)
RETURNS INT8
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_mode = 'new' THEN p_last
        -- log_start is the first live segment's base (or last + 1 when empty)
        WHEN p_mode = 'all' THEN p_log_start - 1
        ELSE coalesce(qn.first_base_since(p_pid, p_log_start, p_ts) - 1, p_last)
    END
$$;

-- Canonical subscription mode; NULL for an unknown one. The broker normalizes the
-- wire's aliases, this accepts the common ones too (a 'new-only' that reached SQL
-- unnormalized once replayed everything in the reference).
CREATE OR REPLACE FUNCTION qn.sub_mode_canonical(p_mode TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE lower(coalesce(p_mode, ''))
        WHEN '' THEN 'all'
        WHEN 'all' THEN 'all'
        WHEN 'new' THEN 'new'
        WHEN 'new-only' THEN 'new'
        WHEN 'new_only' THEN 'new'
        WHEN 'newonly' THEN 'new'
        WHEN 'now' THEN 'new'
        WHEN 'timestamp' THEN 'timestamp'
        ELSE NULL
    END
$$;

-- Registers (group, queue) on first contact and bulk-seeds the cursors of at most
-- 1000 partitions with data (qn.partition_pending), in one statement: a lazy insert per
-- partition convoyed under many concurrent consumers, and seeding every
-- partition of a large queue made first contact cost O(partitions) (1.3 s at
-- 100,000). Every other partition gets its cursor lazily from pop_partition,
-- seeded from the same subscription. Returns the durable subscription: the
-- stored one when another pop won the registration.
-- p_mode: 'all' | 'new' | 'timestamp' (canonical); p_ts: the subscription
-- timestamp (epoch for 'all', now for 'new').
-- The advisory lock key of a group's first contact with a queue.
CREATE OR REPLACE FUNCTION qn.group_lock_key(p_tenant UUID, p_group TEXT, p_qid UUID)
RETURNS INT8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT hashtextextended(p_tenant::TEXT || '/' || p_group || '/' || p_qid::TEXT, 43) $$;

CREATE OR REPLACE FUNCTION qn.register_group(p_qid UUID, p_tenant UUID, p_group TEXT,
                                                p_mode TEXT, p_ts TIMESTAMPTZ,
                                                OUT o_mode TEXT, OUT o_ts TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
BEGIN
    -- Never waits here: a concurrent first contact of the same (group, queue)
    -- would make our insert wait for its transaction. Whoever does not get this
    -- lock returns NULL; pop_v1 then waits for the lock and calls again,
    -- discovery returns nothing this time.
    IF NOT pg_try_advisory_xact_lock(qn.group_lock_key(p_tenant, p_group, p_qid)) THEN
        RETURN;
    END IF;
    INSERT INTO queen.consumer_groups_metadata
        (tenant_id, consumer_group, queue_id, subscription_mode, subscription_timestamp)
    VALUES (p_tenant, p_group, p_qid, p_mode, p_ts)
    ON CONFLICT DO NOTHING
    RETURNING subscription_mode, subscription_timestamp INTO o_mode, o_ts;
    IF FOUND THEN
        -- ascending partition id: the consumer-row lock order
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT p.id, p_group,
               CASE WHEN p_mode = 'new' AND p_ts >= now() - interval '1 second'
                    -- registered just now: "new" is the current tail
                    THEN p.last_offset
                    -- registered earlier (discovery): segments since then are new
                    ELSE qn.seed_cursor(p.id, CASE WHEN p_mode = 'new' THEN 'timestamp'
                                                      ELSE p_mode END,
                                           p_ts, p.log_start, p.last_offset)
               END
        -- the first 1000 index entries by partition id (its primary key's order),
        -- taken behind a fence before the join: ordered by p.id with the LIMIT
        -- outside, the planner walked log_partitions' primary key probing the
        -- index for each row, every partition of every queue when few have data
        -- (a first contact after a seek to the end ran for minutes at 1,000,000)
        FROM (SELECT x.partition_id FROM qn.partition_pending x
              WHERE x.queue_id = p_qid
              ORDER BY x.queue_id, x.partition_id
              LIMIT 1000 OFFSET 0) pp
        JOIN queen.log_partitions p ON p.id = pp.partition_id
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
        RETURN;
    END IF;
    SELECT m.subscription_mode, m.subscription_timestamp INTO o_mode, o_ts
    FROM queen.consumer_groups_metadata m
    WHERE m.tenant_id = p_tenant AND m.consumer_group = p_group AND m.queue_id = p_qid
      AND m.partition_name = '' AND m.namespace = '' AND m.task = '';
END;
$$;

-- Claims one (partition, group) and returns its batch. Internal to the pops.
--   p_bytes_left  NULL = no byte budget
--   p_first       no segment was emitted earlier in this call (so the first one
--                 here is always taken, partially when over the byte budget)
--   p_max_bytes   the call's byte budget (for the partial take)
-- o_cost is what the caller subtracts from its byte budget.
CREATE OR REPLACE FUNCTION qn.pop_partition(
    p_pid UUID, p_group TEXT, p_worker TEXT, p_auto_ack BOOL, p_lease_seconds INT4,
    p_delayed INT4, p_window_buffer INT4, p_sub_mode TEXT, p_sub_ts TIMESTAMPTZ,
    p_budget INT4, p_bytes_left INT8, p_first BOOL, p_max_bytes INT8,
    p_overhead INT4, p_max_msg INT4)
RETURNS TABLE (o_base INT8, o_start_idx INT4, o_take INT4, o_created_at TIMESTAMPTZ,
               o_blob BYTEA, o_lease_expires_at TIMESTAMPTZ, o_cost INT8)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now       TIMESTAMPTZ := now();
    v_committed INT8;
    v_wanted    INT8;
    v_deadline  TIMESTAMPTZ;
    v_newest    TIMESTAMPTZ;
    v_exp       TIMESTAMPTZ;
    v_left      INT4 := p_budget;
    v_bytes     INT8 := p_bytes_left;
    v_taken     INT4 := 0;
    v_start     INT8;
    v_lastoff   INT8;
    v_si        INT8;
    v_avail     INT8;
    v_take      INT8;
    v_size      INT8;
    v_fit       INT8;
    v_one       INT8;
    v_cost      INT8;
    v_partial   BOOL;
    s           RECORD;
BEGIN
    -- window_buffer: deliver nothing while the newest segment is younger than N
    -- seconds (lets a burst settle). One backward primary-key step.
    IF p_window_buffer > 0 THEN
        SELECT x.created_at INTO v_newest
        FROM queen.log_segments x
        WHERE x.partition_id = p_pid
        ORDER BY x.base_offset DESC LIMIT 1;
        IF FOUND AND v_newest > v_now - make_interval(secs => p_window_buffer) THEN
            RETURN;
        END IF;
    END IF;

    SELECT c.committed INTO v_committed
    FROM queen.log_consumers c
    WHERE c.partition_id = p_pid AND c.consumer_group = p_group
      AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= v_now)
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        PERFORM 1 FROM queen.log_consumers c
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group;
        IF FOUND THEN
            RETURN;             -- leased, or being popped right now
        END IF;
        -- First contact of this (partition, group). Another pop creating the same
        -- row would make our insert wait on its transaction (and a third wait on
        -- us...): whoever does not get the advisory lock just returns nothing.
        IF NOT pg_try_advisory_xact_lock(hashtextextended(p_pid::TEXT || '/' || p_group, 42)) THEN
            RETURN;
        END IF;
        INSERT INTO queen.log_consumers (partition_id, consumer_group, committed)
        SELECT p.id, p_group,
               qn.seed_cursor(p.id, CASE WHEN p_sub_mode = 'new' THEN 'timestamp'
                                            ELSE p_sub_mode END,
                                 p_sub_ts, p.log_start, p.last_offset)
        FROM queen.log_partitions p
        WHERE p.id = p_pid
        ON CONFLICT DO NOTHING;
        SELECT c.committed INTO v_committed
        FROM queen.log_consumers c
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group
          AND (c.lease_expires_at IS NULL OR c.lease_expires_at <= v_now)
        FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;

    v_wanted := v_committed + 1;
    IF p_delayed > 0 THEN
        -- created_at is monotone, so the deferred segments are a suffix
        v_deadline := v_now - make_interval(secs => p_delayed);
    END IF;
    IF NOT p_auto_ack THEN
        v_exp := v_now + make_interval(secs => greatest(p_lease_seconds, 1));
    END IF;

    -- Head probe (the segment covering wanted: one backward step, or wanted
    -- itself when it sits in a retention gap) and forward walk, one statement.
    FOR s IN
        SELECT x.base_offset, x.end_offset, x.created_at, x.blob
        FROM queen.log_segments x
        WHERE x.partition_id = p_pid
          AND x.base_offset >= coalesce(
                  (SELECT max(y.base_offset) FROM queen.log_segments y
                   WHERE y.partition_id = p_pid AND y.base_offset <= v_wanted),
                  v_wanted)
          AND (v_deadline IS NULL OR x.created_at <= v_deadline)
        ORDER BY x.base_offset
        LIMIT p_budget
    LOOP
        v_si := greatest(v_wanted - s.base_offset, 0);
        v_avail := s.end_offset - s.base_offset + 1 - v_si;
        CONTINUE WHEN v_avail <= 0;        -- wanted is past this segment's end
        v_take := least(v_avail, v_left);
        v_cost := 0;
        v_partial := false;
        IF v_bytes IS NOT NULL THEN
            v_size := qn.zstd_content_size(s.blob);
            v_cost := v_size + p_overhead::INT8 * v_take;
            IF v_size IS NULL OR v_cost > v_bytes THEN
                -- Any k messages of a segment cost at most its whole content
                -- plus k overheads: as many as that bound lets fit are taken.
                v_fit := CASE WHEN v_size IS NOT NULL AND p_overhead > 0
                              THEN (v_bytes - v_size) / p_overhead ELSE 0 END;
                v_one := greatest(1, p_max_bytes / greatest(p_max_msg::INT8 + p_overhead, 1));
                IF p_first AND v_taken = 0 AND v_fit < v_one THEN
                    -- The call's first segment is always delivered: as many
                    -- messages as the budget holds whatever the size skew.
                    v_take := least(v_take, v_one);
                    v_cost := v_bytes;     -- the budget is spent
                ELSIF v_fit >= 1 THEN
                    v_take := least(v_take, v_fit);
                    v_cost := v_size + p_overhead::INT8 * v_take;
                ELSE
                    EXIT;                  -- does not fit; the rest waits
                END IF;
                v_partial := true;
            END IF;
            v_bytes := v_bytes - v_cost;
        END IF;
        o_base := s.base_offset;
        o_start_idx := v_si;
        o_take := v_take;
        o_created_at := s.created_at;
        o_blob := s.blob;
        o_lease_expires_at := v_exp;
        o_cost := v_cost;
        RETURN NEXT;
        v_start := coalesce(v_start, s.base_offset + v_si);
        v_lastoff := s.base_offset + v_si + v_take - 1;
        v_taken := v_taken + v_take;
        v_left := v_left - v_take;
        EXIT WHEN v_left <= 0 OR v_partial OR (v_bytes IS NOT NULL AND v_bytes <= 0);
    END LOOP;

    IF v_taken = 0 THEN
        -- Starvation fix: a cursor below a partition whose every segment is gone
        -- would otherwise be a candidate forever. Only when no segment exists at
        -- all (deferred or over-budget segments are not a reason).
        UPDATE queen.log_consumers c
        SET committed = p.last_offset
        FROM queen.log_partitions p
        WHERE c.partition_id = p_pid AND c.consumer_group = p_group
          AND p.id = p_pid AND p.last_offset > c.committed
          AND NOT EXISTS (SELECT 1 FROM queen.log_segments x WHERE x.partition_id = p_pid);
        RETURN;
    END IF;

    IF p_auto_ack THEN
        -- At-most-once: the cursor moves inside the pop's transaction; no lease,
        -- attempt state untouched.
        UPDATE queen.log_consumers
        SET committed = v_lastoff, worker_id = NULL, lease_expires_at = NULL,
            lease_acquired_at = NULL, batch_end = NULL,
            total_consumed = total_consumed + v_taken
        WHERE partition_id = p_pid AND consumer_group = p_group;
    ELSE
        UPDATE queen.log_consumers
        SET worker_id = p_worker, lease_expires_at = v_exp, lease_acquired_at = v_now,
            batch_end = v_lastoff,
            attempt_count = CASE WHEN attempt_offset = v_start THEN attempt_count + 1 ELSE 1 END,
            attempt_offset = v_start
        WHERE partition_id = p_pid AND consumer_group = p_group;
    END IF;
END;
$$;

-- Records an empty wildcard scan for (queue, group). At most every 30 s it
-- re-checks, ignoring leases, whether anything may be pending at all: only
-- when nothing is may the floor move to now (a lease-held backlog must not be
-- hidden when its lease expires); otherwise only updated_at moves. The check
-- is bounded as has_pending_v1's: the queue's index of partitions with data
-- (at most 4096 entries probed; more counts as pending) and the partitions
-- written since the floor less two minutes (at most 1024, newest first; more
-- counts as pending) - it read every partition of the queue written since the
-- floor. Rows upserted in queue id order.
CREATE OR REPLACE FUNCTION qn.note_empty_scan(p_qids UUID[], p_group TEXT)
RETURNS VOID
LANGUAGE plpgsql
AS $$
BEGIN
        INSERT INTO queen.consumer_watermarks AS w
            (queue_id, consumer_group, last_empty_scan_at, updated_at)
        SELECT q.qid, p_group,
               CASE WHEN qn.maybe_pending(q.qid, p_group, coalesce(w0.last_empty_scan_at, 'epoch'))
                    THEN coalesce(w0.last_empty_scan_at, 'epoch')
                    ELSE now() END,
               now()
        FROM unnest(p_qids) AS q(qid)
        LEFT JOIN queen.consumer_watermarks w0
               ON w0.queue_id = q.qid AND w0.consumer_group = p_group
        WHERE w0.queue_id IS NULL OR w0.updated_at < now() - interval '30 seconds'
        ORDER BY q.qid
        ON CONFLICT (queue_id, consumer_group) DO UPDATE
        SET last_empty_scan_at = EXCLUDED.last_empty_scan_at, updated_at = EXCLUDED.updated_at;
END;
$$;

-- maybe_pending: whether group p_group may have retained data it has not
-- consumed in queue p_qid, leases ignored (note_empty_scan's check): the
-- index of partitions with data (at most 4096 entries probed, more answers
-- true) and the partitions written since p_floor less two minutes (at most
-- 1024 probed, newest first, more answers true). False only when both were
-- read whole.
CREATE OR REPLACE FUNCTION qn.maybe_pending(p_qid UUID, p_group TEXT, p_floor TIMESTAMPTZ)
RETURNS BOOL
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_n   INT8;
    v_any BOOL;
BEGIN
    SELECT count(*), bool_or(e.ok) INTO v_n, v_any
    FROM (SELECT pp.partition_id AS id FROM qn.partition_pending pp
          WHERE pp.queue_id = p_qid
          ORDER BY pp.queue_id, pp.ord LIMIT 4097) h
    CROSS JOIN LATERAL (
        SELECT (k.partition_id IS NULL AND p.last_offset >= p.log_start)
               OR p.last_offset > greatest(k.committed, p.log_start - 1) AS ok
        FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers k
               ON k.partition_id = p.id AND k.consumer_group = p_group
        WHERE p.id = h.id
        OFFSET 0) e;
    IF coalesce(v_any, false) OR v_n > 4096 THEN
        RETURN true;
    END IF;
    SELECT count(*), bool_or(e.ok) INTO v_n, v_any
    FROM (SELECT p.id, p.last_offset, p.log_start
          FROM queen.log_partitions p
          WHERE p.queue_id = p_qid AND p.last_write_at >= p_floor - interval '2 minutes'
          ORDER BY p.queue_id, p.last_write_at DESC LIMIT 1025 OFFSET 0) h
    CROSS JOIN LATERAL (
        SELECT (k.partition_id IS NULL AND h.last_offset >= h.log_start)
               OR h.last_offset > greatest(k.committed, h.log_start - 1) AS ok
        FROM (SELECT 1) one
        LEFT JOIN queen.log_consumers k
               ON k.partition_id = h.id AND k.consumer_group = p_group
        OFFSET 0) e;
    RETURN coalesce(v_any, false) OR v_n > 1024;
END;
$$;

-- pending_clear: takes the partition out of pop_v1's index of partitions with
-- data (qn.partition_pending) when every consumer group registered on its queue
-- has consumed its last offset, or it holds nothing (retention emptied it), or
-- it is gone. A queue no group ever registered on keeps it. Under the
-- partition's row lock, taken only if free (a pop never waits; a push holding it
-- keeps the row anyway), so no push can commit between the check and the delete.
CREATE OR REPLACE FUNCTION qn.pending_clear(p_qid UUID, p_pid UUID)
RETURNS VOID
LANGUAGE plpgsql
AS $$
DECLARE
    v_last  INT8;
    v_start INT8;
BEGIN
    SELECT p.last_offset, p.log_start INTO v_last, v_start
    FROM queen.log_partitions p
    WHERE p.id = p_pid
    FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM queen.log_partitions p WHERE p.id = p_pid) THEN
            RETURN;                                   -- locked: a push is writing it
        END IF;
    ELSIF v_last >= v_start AND (
           NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m WHERE m.queue_id = p_qid)
           OR EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                      WHERE m.queue_id = p_qid
                        AND NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                        WHERE c.partition_id = p_pid
                                          AND c.consumer_group = m.consumer_group
                                          AND c.committed >= v_last))) THEN
        RETURN;                                       -- some group has not read it all
    END IF;
    DELETE FROM qn.partition_pending WHERE queue_id = p_qid AND partition_id = p_pid;
END;
$$;

-- sweep_step: one step of the any-partition pop's fallback sweep for (queue,
-- group): examines at most 1024 partitions by name after the stored position
-- (qn.scan_sweep), and returns those this group may claim (no cursor, or data
-- past an unleased cursor; written since the group's empty-scan floor less two
-- minutes of slack for the 1 s quantization of last_write_at and commit
-- latency; not in p_skip), at most p_want, in random order. The position moves
-- past the last returned one (so none is skipped), or past the chunk. A pass
-- that wraps around without meeting anything pending (leases ignored: a
-- lease-held backlog must not be hidden when its lease expires) moves the
-- floor to the pass's start; a floor is moved at most every 30 s. Cost: one
-- ordered index range of the chunk plus a cursor probe for each partition
-- written since the floor, whatever the queue's size. Concurrent pops of the
-- group do not wait for one another: whoever does not get the advisory lock
-- returns nothing. seek and delete_consumer_group delete the position with the
-- floor (cursors moved back must be seen by a new pass).
CREATE OR REPLACE FUNCTION qn.sweep_step(p_qid UUID, p_group TEXT, p_want INT4, p_skip UUID[],
                                           OUT o_ids UUID[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_chunk CONSTANT INT4 := 1024;
    v_pos    TEXT;
    v_pass   TIMESTAMPTZ;
    v_dirty  BOOL;
    v_stored BOOL;
    v_floor  TIMESTAMPTZ;
    v_seen   BOOL;
    v_last   TEXT;
    v_n      INT8;
    v_cut    INT8;
    v_wm_at  TIMESTAMPTZ;
    v_wm_upd TIMESTAMPTZ;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended(p_qid::TEXT || '/' || p_group, 45)) THEN
        RETURN;
    END IF;
    SELECT s.pos, s.pass_at, s.dirty INTO v_pos, v_pass, v_dirty
    FROM qn.scan_sweep s
    WHERE s.queue_id = p_qid AND s.consumer_group = p_group;
    v_stored := FOUND;
    IF NOT v_stored OR v_pos = '' THEN
        v_pos := '';
        v_pass := now();
        v_dirty := false;
    END IF;
    SELECT w.last_empty_scan_at, w.updated_at INTO v_wm_at, v_wm_upd
    FROM queen.consumer_watermarks w
    WHERE w.queue_id = p_qid AND w.consumer_group = p_group;
    v_floor := coalesce(v_wm_at, 'epoch') - interval '2 minutes';
    -- The chunk (an ordered range of log_partitions_queue_name_uk, LIMIT first,
    -- behind a fence), each row with its cursor probed by key (a LATERAL
    -- nested loop whatever the plan's generic estimates), then cut after the
    -- p_want-th claimable one.
    WITH h AS (
        SELECT p.id, p.name, p.last_offset, p.log_start, p.last_write_at >= v_floor AS fresh
        FROM queen.log_partitions p
        WHERE p.queue_id = p_qid AND p.name > v_pos
        ORDER BY p.name
        LIMIT v_chunk
        OFFSET 0
    ), e AS (
        SELECT h.id, h.name,
               h.fresh AND (k.has IS NULL
                            OR (h.last_offset > k.committed
                                AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())))
                       AND h.id <> ALL (p_skip) AS claimable,
               h.fresh AND ((k.has IS NULL AND h.last_offset >= h.log_start)
                            OR h.last_offset > greatest(k.committed, h.log_start - 1)) AS pending
        FROM h
        LEFT JOIN LATERAL (
            SELECT true AS has, c.committed, c.lease_expires_at
            FROM queen.log_consumers c
            WHERE h.fresh AND c.partition_id = h.id AND c.consumer_group = p_group
            OFFSET 0) k ON true
    ), r AS (
        SELECT e.*, count(*) FILTER (WHERE e.claimable) OVER (ORDER BY e.name) AS rk
        FROM e
    )
    SELECT ARRAY(SELECT r2.id FROM r r2 WHERE r2.claimable AND r2.rk <= p_want
                 ORDER BY random()),
           bool_or(r.pending) FILTER (WHERE r.rk < p_want OR (r.rk = p_want AND r.claimable)),
           max(r.name) FILTER (WHERE r.rk < p_want OR (r.rk = p_want AND r.claimable)),
           count(*), count(*) FILTER (WHERE r.rk > p_want OR (r.rk = p_want AND NOT r.claimable))
    INTO o_ids, v_seen, v_last, v_n, v_cut
    FROM r;
    v_dirty := v_dirty OR coalesce(v_seen, false);
    IF v_n < v_chunk AND v_cut = 0 THEN
        -- the pass is over: the watermark moves at most every 30 s, and only
        -- a statement that may write runs (ON CONFLICT DO UPDATE locks the row
        -- even when its WHERE is false: every empty pop of the group then
        -- wrote, waited for the others' commits and flushed WAL)
        IF v_wm_upd IS NOT NULL AND (v_dirty OR v_wm_upd >= now() - interval '30 seconds') THEN
            IF v_stored THEN
                DELETE FROM qn.scan_sweep WHERE queue_id = p_qid AND consumer_group = p_group;
            END IF;
            RETURN;
        END IF;
        INSERT INTO queen.consumer_watermarks AS w
            (queue_id, consumer_group, last_empty_scan_at, updated_at)
        VALUES (p_qid, p_group, CASE WHEN v_dirty THEN 'epoch' ELSE v_pass END, now())
        ON CONFLICT (queue_id, consumer_group) DO UPDATE
        SET last_empty_scan_at = greatest(w.last_empty_scan_at, EXCLUDED.last_empty_scan_at),
            updated_at = EXCLUDED.updated_at
        WHERE NOT v_dirty AND w.updated_at < now() - interval '30 seconds';
        IF v_stored THEN
            DELETE FROM qn.scan_sweep WHERE queue_id = p_qid AND consumer_group = p_group;
        END IF;
    ELSE
        INSERT INTO qn.scan_sweep AS s (queue_id, consumer_group, pos, pass_at, dirty)
        VALUES (p_qid, p_group, coalesce(v_last, v_pos), v_pass, v_dirty)
        ON CONFLICT (queue_id, consumer_group) DO UPDATE
        SET pos = EXCLUDED.pos, pass_at = EXCLUDED.pass_at, dirty = EXCLUDED.dirty;
    END IF;
END;
$$;

-- pop_v1: see sql/API.md.
CREATE OR REPLACE FUNCTION qn.pop_v1(
    p_queue          TEXT,
    p_partition      TEXT,
    p_group          TEXT,
    p_budget         INT4,
    p_max_bytes      INT8,
    p_msg_overhead   INT4,
    p_max_msg_bytes  INT4,
    p_lease_seconds  INT4,
    p_worker         TEXT,
    p_auto_ack       BOOL,
    p_max_partitions INT4,
    p_sub_mode       TEXT,
    p_sub_from       TIMESTAMPTZ,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_queue TEXT, r_partition TEXT, r_pid UUID, r_base INT8, r_start_idx INT4,
               r_take INT4, r_created_at TIMESTAMPTZ, r_blob BYTEA,
               r_lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_group   TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_part    TEXT := nullif(p_partition, '');
    v_mode    TEXT := qn.sub_mode_canonical(p_sub_mode);
    v_ts      TIMESTAMPTZ;
    v_qid     UUID;
    v_pid     UUID;
    v_lease   INT4;
    v_delayed INT4;
    v_wbuf    INT4;
    v_smode   TEXT;
    v_sts     TIMESTAMPTZ;
    v_conf    BOOL;
    v_maxp    INT4 := CASE WHEN coalesce(p_max_partitions, 0) <= 0 THEN 1 ELSE p_max_partitions END;
    v_left    INT4 := p_budget;
    v_bytes   INT8 := CASE WHEN coalesce(p_max_bytes, 0) > 0 THEN p_max_bytes END;
    v_first   BOOL := true;
    v_claimed INT4 := 0;
    v_got     INT4;
    v_want    INT4;
    v_start   INT4;
    v_cands   UUID[];
    v_scan    UUID[];
    v_idle    UUID[];
    v_pick    INT4;
    v_phase   INT4;
    c         RECORD;
    s         RECORD;
BEGIN
    IF coalesce(p_budget, 0) < 1 THEN
        RETURN;
    END IF;
    IF p_queue IS NULL OR octet_length(p_queue) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'QPOP bad queue name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'QPOP invalid subscription mode %', p_sub_mode
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_mode = 'timestamp' AND p_sub_from IS NULL THEN
        v_mode := 'new';           -- unusable timestamp: treated as 'new'
    END IF;
    IF v_group = '__QUEUE_MODE__' THEN
        v_mode := 'all';           -- queue mode always reads everything retained
    END IF;
    v_ts := CASE v_mode WHEN 'all' THEN 'epoch'::TIMESTAMPTZ WHEN 'new' THEN now()
                        ELSE p_sub_from END;

    -- One statement: the queue, its options, the group's subscription and the
    -- named partition's id.
    FOR v_try IN 1 .. 2 LOOP
        SELECT q.id, coalesce(q.lease_time, 60), coalesce(q.delayed_processing, 0),
               coalesce(q.window_buffer, 0), m.subscription_mode, m.subscription_timestamp,
               coalesce(m.conflation, false), p.id
        INTO v_qid, v_lease, v_delayed, v_wbuf, v_smode, v_sts, v_conf, v_pid
        FROM queen.queues q
        LEFT JOIN queen.consumer_groups_metadata m
               ON m.tenant_id = p_tenant AND m.consumer_group = v_group AND m.queue_id = q.id
              AND m.partition_name = '' AND m.namespace = '' AND m.task = ''
        LEFT JOIN queen.log_partitions p ON p.queue_id = q.id AND p.name = v_part
        WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        EXIT WHEN FOUND;
        -- A group may subscribe before the first push: provision the queue.
        INSERT INTO queen.queues (tenant_id, name, namespace, task)
        VALUES (p_tenant, p_queue, qn.name_namespace(p_queue), qn.name_task(p_queue))
        ON CONFLICT (tenant_id, name) DO NOTHING;
    END LOOP;
    IF v_conf THEN
        RAISE EXCEPTION 'QPOP consumer group % of queue % consumes by conflation (set by Queen MQ), which this broker does not serve',
            v_group, p_queue USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF v_smode IS NULL THEN
        SELECT g.o_mode, g.o_ts INTO v_smode, v_sts
        FROM qn.register_group(v_qid, p_tenant, v_group, v_mode, v_ts) g;
        IF v_smode IS NULL THEN
            -- Another pop is registering this group right now. Returning nothing
            -- here answered a consumer "empty" with data present, after the
            -- commit that woke it: the broker then parked it until its next news
            -- or re-check. So wait for that registration to end (a short
            -- transaction; this one holds nothing it could wait for: a pop
            -- that inserted the queue itself made the other's insert wait
            -- instead), then register or read what it registered. Discovery
            -- (several groups' locks in one call) still never waits.
            PERFORM pg_advisory_xact_lock(qn.group_lock_key(p_tenant, v_group, v_qid));
            SELECT g.o_mode, g.o_ts INTO v_smode, v_sts
            FROM qn.register_group(v_qid, p_tenant, v_group, v_mode, v_ts) g;
            IF v_smode IS NULL THEN
                RETURN;        -- nothing registered and nothing to read: nothing this time
            END IF;
        END IF;
    END IF;
    IF coalesce(p_lease_seconds, 0) > 0 THEN
        v_lease := p_lease_seconds;
    END IF;

    IF v_part IS NOT NULL THEN
        -- The named partition (a missing one returns nothing): its rows straight
        -- into the result, no candidate scan.
        IF v_pid IS NOT NULL THEN
            RETURN QUERY
            SELECT p_queue, v_part, v_pid, pp.o_base, pp.o_start_idx, pp.o_take,
                   pp.o_created_at, pp.o_blob, pp.o_lease_expires_at
            FROM qn.pop_partition(v_pid, v_group, p_worker, coalesce(p_auto_ack, false),
                                  v_lease, v_delayed, v_wbuf, v_smode, v_sts, v_left, v_bytes,
                                  true, p_max_bytes, coalesce(p_msg_overhead, 0),
                                  coalesce(p_max_msg_bytes, 0)) pp;
        END IF;
        RETURN;
    END IF;

    -- Candidates, in two phases (DESIGN.md, Scale: no scan of every partition
    -- per pop).
    -- 1. The index of partitions with data (qn.partition_pending), read in its
    --    random order (ord) from a random point, wrapping around, at most 4096
    --    entries: the first v_pick (2 x max_partitions, at least 8) this group
    --    may claim (no cursor yet, or data past an unleased cursor), tried in
    --    random order. Fairness: every pending partition is among the first
    --    ones after a random point with about the same chance on every pop,
    --    whatever the others hold (none is starved behind a busy neighbour).
    -- 2. Only when phase 1 claimed nothing: the fallback sweep (qn.sweep_step),
    --    one bounded chunk of the queue's partitions by name per pop, resumed
    --    where the previous pop of the group left it. It serves what the index
    --    does not cover: partitions Queen MQ's own procedures write, and those
    --    cleared before a new group subscribed (they wait until the index
    --    offers this group nothing claimable). A full scan here cost seconds
    --    per empty pop at 1,000,000 partitions (and minutes under a plan that
    --    turned the cursor join quadratic).
    v_want := CASE WHEN v_maxp >= 128 THEN 512 ELSE least(greatest(v_maxp * 4, 64), 512) END;
    v_start := floor(random() * 2147483647)::INT4;
    -- phase 1: the window in index order (an ordered Append: the part from
    -- v_start, then the wrapped part), each entry checked by a LATERAL probe
    -- (so a nested loop in that order), stopping at v_pick claimable entries
    -- (at 1 % claimable: about 100 entries each)
    v_pick := least(v_want, greatest(v_maxp * 2, 8));
    v_cands := ARRAY(
        SELECT x.id FROM (
            SELECT h.id
            FROM (SELECT w.id
                  FROM ((SELECT pp.partition_id AS id FROM qn.partition_pending pp
                         WHERE pp.queue_id = v_qid AND pp.ord >= v_start
                         ORDER BY pp.queue_id, pp.ord LIMIT 4096)
                        UNION ALL
                        (SELECT pp.partition_id FROM qn.partition_pending pp
                         WHERE pp.queue_id = v_qid AND pp.ord < v_start
                         ORDER BY pp.queue_id, pp.ord LIMIT 4096)) w
                  LIMIT 4096) h
            CROSS JOIN LATERAL (
                SELECT 1
                FROM queen.log_partitions p
                LEFT JOIN queen.log_consumers k
                       ON k.partition_id = p.id AND k.consumer_group = v_group
                WHERE p.id = h.id
                  AND (k.partition_id IS NULL
                       OR (p.last_offset > k.committed
                           AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())))
                OFFSET 0) e   -- a fence: not flattened into a join that loses the order
            LIMIT v_pick) x
        ORDER BY random());
    -- the first 64 entries of the window, of which up to 8 this group may not
    -- claim go to pending_clear: it drops those every group has consumed (and
    -- those whose partition is gone)
    v_idle := ARRAY(
        SELECT h.id
        FROM (SELECT w.id
              FROM ((SELECT pp.partition_id AS id FROM qn.partition_pending pp
                     WHERE pp.queue_id = v_qid AND pp.ord >= v_start
                     ORDER BY pp.queue_id, pp.ord LIMIT 64)
                    UNION ALL
                    (SELECT pp.partition_id FROM qn.partition_pending pp
                     WHERE pp.queue_id = v_qid AND pp.ord < v_start
                     ORDER BY pp.queue_id, pp.ord LIMIT 64)) w
              LIMIT 64) h
        CROSS JOIN LATERAL (
            SELECT 1
            FROM (SELECT 1) one
            LEFT JOIN queen.log_partitions p ON p.id = h.id
            LEFT JOIN queen.log_consumers k
                   ON k.partition_id = h.id AND k.consumer_group = v_group
            WHERE p.id IS NULL OR (k.partition_id IS NOT NULL AND p.last_offset <= k.committed)
            OFFSET 0) e
        LIMIT 8);

    FOR v_phase IN 1 .. 2 LOOP
        EXIT WHEN v_left <= 0 OR v_claimed >= v_maxp OR (v_bytes IS NOT NULL AND v_bytes <= 0);
        IF v_phase = 2 THEN
            CONTINUE WHEN v_claimed > 0;   -- phase 1 found work: no sweep
            SELECT w.o_ids INTO v_scan
            FROM qn.sweep_step(v_qid, v_group, v_want, coalesce(v_cands, '{}')) w;
        END IF;
        FOR c IN
            SELECT p.id, p.name
            FROM unnest(coalesce(CASE WHEN v_phase = 1 THEN v_cands ELSE v_scan END, '{}'))
                 WITH ORDINALITY AS u(id, ord)
            JOIN queen.log_partitions p ON p.id = u.id
            ORDER BY u.ord
        LOOP
            v_got := 0;
            FOR s IN
                SELECT * FROM qn.pop_partition(c.id, v_group, p_worker, coalesce(p_auto_ack, false),
                                                  v_lease, v_delayed, v_wbuf, v_smode, v_sts,
                                                  v_left, v_bytes, v_first, p_max_bytes,
                                                  coalesce(p_msg_overhead, 0),
                                                  coalesce(p_max_msg_bytes, 0))
            LOOP
                r_queue := p_queue;
                r_partition := c.name;
                r_pid := c.id;
                r_base := s.o_base;
                r_start_idx := s.o_start_idx;
                r_take := s.o_take;
                r_created_at := s.o_created_at;
                r_blob := s.o_blob;
                r_lease_expires_at := s.o_lease_expires_at;
                RETURN NEXT;
                v_got := v_got + s.o_take;
                IF v_bytes IS NOT NULL THEN
                    v_bytes := v_bytes - s.o_cost;
                END IF;
                v_first := false;
            END LOOP;
            IF v_got > 0 THEN
                v_claimed := v_claimed + 1;
                v_left := v_left - v_got;
            END IF;
            EXIT WHEN v_left <= 0 OR v_claimed >= v_maxp OR (v_bytes IS NOT NULL AND v_bytes <= 0);
        END LOOP;
    END LOOP;

    IF v_idle IS NOT NULL THEN
        PERFORM qn.pending_clear(v_qid, x.id) FROM unnest(v_idle) AS x(id);
    END IF;
END;
$$;

-- pop_one_v1: see sql/API.md. The hot path of a pop that names one partition
-- whose id the broker knows: keyed on that id (one partition's rows plus the
-- reference table queues), no name resolution. The names travel too: a stale
-- id, one that is not (p_tenant, p_queue, p_partition)'s, or the group's first
-- contact with the queue goes through pop_v1 by names instead.
CREATE OR REPLACE FUNCTION qn.pop_one_v1(
    p_pid            UUID,
    p_queue          TEXT,
    p_partition      TEXT,
    p_group          TEXT,
    p_budget         INT4,
    p_max_bytes      INT8,
    p_msg_overhead   INT4,
    p_max_msg_bytes  INT4,
    p_lease_seconds  INT4,
    p_worker         TEXT,
    p_auto_ack       BOOL,
    p_sub_mode       TEXT,
    p_sub_from       TIMESTAMPTZ,
    p_tenant         UUID)
RETURNS TABLE (r_queue TEXT, r_partition TEXT, r_pid UUID, r_base INT8, r_start_idx INT4,
               r_take INT4, r_created_at TIMESTAMPTZ, r_blob BYTEA,
               r_lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
DECLARE
    v_group   TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_lease   INT4;
    v_delayed INT4;
    v_wbuf    INT4;
    v_smode   TEXT;
    v_sts     TIMESTAMPTZ;
    v_conf    BOOL;
BEGIN
    IF coalesce(p_budget, 0) < 1 THEN
        RETURN;
    END IF;
    SELECT coalesce(q.lease_time, 60), coalesce(q.delayed_processing, 0),
           coalesce(q.window_buffer, 0), m.subscription_mode, m.subscription_timestamp,
           coalesce(m.conflation, false)
    INTO v_lease, v_delayed, v_wbuf, v_smode, v_sts, v_conf
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    LEFT JOIN queen.consumer_groups_metadata m
           ON m.tenant_id = p_tenant AND m.consumer_group = v_group AND m.queue_id = q.id
          AND m.partition_name = '' AND m.namespace = '' AND m.task = ''
    WHERE p.id = p_pid AND p.name = p_partition
      AND q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND OR v_smode IS NULL OR v_conf THEN
        -- stale or foreign id, first contact, or a conflating group: by names
        -- (which registers, provisions or refuses as pop_v1 does)
        RETURN QUERY
        SELECT * FROM qn.pop_v1(p_queue, p_partition, p_group, p_budget, p_max_bytes,
                                p_msg_overhead, p_max_msg_bytes, p_lease_seconds, p_worker,
                                p_auto_ack, 1, p_sub_mode, p_sub_from, p_tenant);
        RETURN;
    END IF;
    IF qn.sub_mode_canonical(p_sub_mode) IS NULL THEN
        RAISE EXCEPTION 'QPOP invalid subscription mode %', p_sub_mode
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_lease_seconds, 0) > 0 THEN
        v_lease := p_lease_seconds;
    END IF;
    RETURN QUERY
    SELECT p_queue, p_partition, p_pid, pp.o_base, pp.o_start_idx, pp.o_take,
           pp.o_created_at, pp.o_blob, pp.o_lease_expires_at
    FROM qn.pop_partition(p_pid, v_group, p_worker, coalesce(p_auto_ack, false),
                          v_lease, v_delayed, v_wbuf, v_smode, v_sts, p_budget,
                          CASE WHEN coalesce(p_max_bytes, 0) > 0 THEN p_max_bytes END,
                          true, p_max_bytes, coalesce(p_msg_overhead, 0),
                          coalesce(p_max_msg_bytes, 0)) pp;
END;
$$;

-- pop_bundle_v1: see sql/API.md. The broker's bundled lease: several pop_one_v1
-- requests (one partition id each, for a consumer each) in one call and one
-- transaction. Members run one by one in (partition id, group) order (then in
-- the order given), the order ack_bundle_v1 locks consumer rows in too, so two
-- bundles lock their partitions in the same order; each member
-- is exactly one pop_one_v1 call, keyed on its own partition id (nothing here
-- touches two partitions in one statement). r_member is the member's index
-- (0-based) in the arrays; a member that leased nothing has no row.
CREATE OR REPLACE FUNCTION qn.pop_bundle_v1(
    p_pids           UUID[],
    p_queues         TEXT[],
    p_partitions     TEXT[],
    p_groups         TEXT[],
    p_budgets        INT4[],
    p_max_bytes      INT8[],
    p_msg_overhead   INT4[],
    p_max_msg_bytes  INT4[],
    p_lease_seconds  INT4[],
    p_workers        TEXT[],
    p_sub_modes      TEXT[],
    p_sub_from_us    INT8[],
    p_tenant         UUID)
RETURNS TABLE (r_member INT4, r_queue TEXT, r_partition TEXT, r_pid UUID, r_base INT8,
               r_start_idx INT4, r_take INT4, r_created_at TIMESTAMPTZ, r_blob BYTEA,
               r_lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n INT4 := coalesce(cardinality(p_pids), 0);
    v_i INT4;
BEGIN
    IF coalesce(cardinality(p_queues), 0) <> v_n OR coalesce(cardinality(p_partitions), 0) <> v_n
       OR coalesce(cardinality(p_groups), 0) <> v_n OR coalesce(cardinality(p_budgets), 0) <> v_n
       OR coalesce(cardinality(p_max_bytes), 0) <> v_n
       OR coalesce(cardinality(p_msg_overhead), 0) <> v_n
       OR coalesce(cardinality(p_max_msg_bytes), 0) <> v_n
       OR coalesce(cardinality(p_lease_seconds), 0) <> v_n
       OR coalesce(cardinality(p_workers), 0) <> v_n OR coalesce(cardinality(p_sub_modes), 0) <> v_n
       OR coalesce(cardinality(p_sub_from_us), 0) <> v_n THEN
        RAISE EXCEPTION 'QPOP bundle arrays differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_i IN SELECT o.i FROM unnest(p_pids, p_groups) WITH ORDINALITY AS o(pid, grp, i)
               ORDER BY o.pid, coalesce(nullif(o.grp, ''), '__QUEUE_MODE__'), o.i LOOP
        IF p_pids[v_i] IS NULL OR coalesce(p_workers[v_i], '') = '' THEN
            RAISE EXCEPTION 'QPOP bundle member % has no partition id or worker', v_i - 1
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN QUERY
        SELECT v_i - 1, x.r_queue, x.r_partition, x.r_pid, x.r_base, x.r_start_idx, x.r_take,
               x.r_created_at, x.r_blob, x.r_lease_expires_at
        FROM qn.pop_one_v1(p_pids[v_i], p_queues[v_i], p_partitions[v_i], p_groups[v_i],
                           p_budgets[v_i], p_max_bytes[v_i], p_msg_overhead[v_i],
                           p_max_msg_bytes[v_i], p_lease_seconds[v_i], p_workers[v_i], false,
                           p_sub_modes[v_i],
                           CASE WHEN p_sub_from_us[v_i] IS NULL THEN NULL
                                ELSE 'epoch'::TIMESTAMPTZ
                                     + p_sub_from_us[v_i] * INTERVAL '1 microsecond' END,
                           p_tenant) x;
    END LOOP;
END;
$$;

-- pop_discover_v1: see sql/API.md. The durable subscription is stored once per
-- (group, namespace, task) with queue_id NULL; a matching queue met later is
-- registered from it, so with 'new' a queue created after the subscription is
-- read from its beginning. p_allow_exact / p_allow_prefix (both NULL: every
-- queue) narrow the matching queues to those the caller may consume (a name in
-- p_allow_exact, or starting with an element of p_allow_prefix): a queue outside
-- them is neither registered with the group nor claimed.
DROP FUNCTION IF EXISTS qn.pop_discover_v1(TEXT, TEXT, TEXT, INT4, INT8, INT4, INT4, INT4, TEXT,
                                           BOOL, INT4, TEXT, TIMESTAMPTZ, UUID);
CREATE OR REPLACE FUNCTION qn.pop_discover_v1(
    p_namespace      TEXT,
    p_task           TEXT,
    p_group          TEXT,
    p_budget         INT4,
    p_max_bytes      INT8,
    p_msg_overhead   INT4,
    p_max_msg_bytes  INT4,
    p_lease_seconds  INT4,
    p_worker         TEXT,
    p_auto_ack       BOOL,
    p_max_partitions INT4,
    p_sub_mode       TEXT,
    p_sub_from       TIMESTAMPTZ,
    p_tenant         UUID DEFAULT '00000000-0000-0000-0000-000000000001',
    p_allow_exact    TEXT[] DEFAULT NULL,
    p_allow_prefix   TEXT[] DEFAULT NULL)
RETURNS TABLE (r_queue TEXT, r_partition TEXT, r_pid UUID, r_base INT8, r_start_idx INT4,
               r_take INT4, r_created_at TIMESTAMPTZ, r_blob BYTEA,
               r_lease_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_ns      TEXT := coalesce(p_namespace, '');
    v_task    TEXT := coalesce(p_task, '');
    v_group   TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_mode    TEXT := qn.sub_mode_canonical(p_sub_mode);
    v_ts      TIMESTAMPTZ;
    v_dmode   TEXT;
    v_dts     TIMESTAMPTZ;
    v_qids    UUID[];
    v_maxp    INT4 := CASE WHEN coalesce(p_max_partitions, 0) <= 0 THEN 1 ELSE p_max_partitions END;
    v_left    INT4 := p_budget;
    v_bytes   INT8 := CASE WHEN coalesce(p_max_bytes, 0) > 0 THEN p_max_bytes END;
    v_first   BOOL := true;
    v_claimed INT4 := 0;
    v_got     INT4;
    v_want    INT4;
    v_pick    INT4;
    v_startq  UUID;
    v_cands   UUID[];
    q         RECORD;
    c         RECORD;
    s         RECORD;
BEGIN
    IF v_ns = '' AND v_task = '' THEN
        RAISE EXCEPTION 'QPOP namespace or task required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(p_budget, 0) < 1 THEN
        RETURN;
    END IF;
    IF v_mode IS NULL THEN
        RAISE EXCEPTION 'QPOP invalid subscription mode %', p_sub_mode
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_mode = 'timestamp' AND p_sub_from IS NULL THEN
        v_mode := 'new';
    END IF;
    IF v_group = '__QUEUE_MODE__' THEN
        v_mode := 'all';
    END IF;
    v_ts := CASE v_mode WHEN 'all' THEN 'epoch'::TIMESTAMPTZ WHEN 'new' THEN now()
                        ELSE p_sub_from END;

    -- The durable discovery subscription (never waiting, as in register_group).
    IF NOT pg_try_advisory_xact_lock(hashtextextended(
               p_tenant::TEXT || '/' || v_group || '/' || v_ns || '/' || v_task, 44)) THEN
        RETURN;
    END IF;
    INSERT INTO queen.consumer_groups_metadata
        (tenant_id, consumer_group, queue_id, namespace, task, subscription_mode,
         subscription_timestamp)
    VALUES (p_tenant, v_group, NULL, v_ns, v_task, v_mode, v_ts)
    ON CONFLICT DO NOTHING;
    SELECT m.subscription_mode, m.subscription_timestamp INTO v_dmode, v_dts
    FROM queen.consumer_groups_metadata m
    WHERE m.tenant_id = p_tenant AND m.consumer_group = v_group AND m.queue_id IS NULL
      AND m.partition_name = '' AND m.namespace = v_ns AND m.task = v_task;

    -- Register the group with every matching queue it has not met yet.
    FOR q IN
        SELECT x.id
        FROM queen.queues x
        WHERE x.tenant_id = p_tenant
          AND (v_ns = '' OR x.namespace = v_ns) AND (v_task = '' OR x.task = v_task)
          AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
               OR x.name = ANY (p_allow_exact)
               OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                          WHERE starts_with(x.name, a.pre)))
          AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                          WHERE m.tenant_id = p_tenant AND m.consumer_group = v_group
                            AND m.queue_id = x.id AND m.partition_name = ''
                            AND m.namespace = '' AND m.task = '')
        ORDER BY x.id
    LOOP
        PERFORM qn.register_group(q.id, p_tenant, v_group,
                                     CASE WHEN v_dmode = 'new' AND v_dts < now() THEN 'timestamp'
                                          ELSE v_dmode END,
                                     v_dts);
    END LOOP;

    SELECT array_agg(x.id ORDER BY x.id) INTO v_qids
    FROM queen.queues x
    WHERE x.tenant_id = p_tenant
      AND (v_ns = '' OR x.namespace = v_ns) AND (v_task = '' OR x.task = v_task)
      AND ((p_allow_exact IS NULL AND p_allow_prefix IS NULL)
           OR x.name = ANY (p_allow_exact)
           OR EXISTS (SELECT 1 FROM unnest(p_allow_prefix) a(pre)
                      WHERE starts_with(x.name, a.pre)));
    IF v_qids IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
               WHERE m.tenant_id = p_tenant AND m.consumer_group = v_group
                 AND (m.queue_id = ANY (v_qids)
                      OR (m.queue_id IS NULL AND m.namespace = v_ns AND m.task = v_task))
                 AND m.partition_name = '' AND coalesce(m.conflation, false)) THEN
        RAISE EXCEPTION 'QPOP consumer group % consumes a matching queue by conflation (set by Queen MQ), which this broker does not serve',
            v_group USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;

    -- Candidates, bounded as pop_v1's (DESIGN.md, Scale; the scan it replaces
    -- read every partition of every matching queue written since the
    -- group's floor, ordered at random):
    -- 1. the index of partitions with data (qn.partition_pending) of the
    --    matching queues, from a random queue id onwards (wrapping around), at
    --    most 4096 entries, the first v_pick this group may claim (no cursor
    --    yet, or data past an unleased cursor), tried in random order;
    -- 2. only when phase 1 offered nothing: one step of the fallback sweep
    --    (qn.sweep_step) of at most 4 matching queues taken at random.
    v_want := CASE WHEN v_maxp >= 128 THEN 512 ELSE least(greatest(v_maxp * 4, 64), 512) END;
    v_pick := least(v_want, greatest(v_maxp * 2, 8));
    v_startq := gen_random_uuid();
    v_cands := ARRAY(
        SELECT x.id FROM (
            SELECT h.id
            FROM (SELECT w.id
                  FROM ((SELECT pp.partition_id AS id FROM qn.partition_pending pp
                         WHERE pp.queue_id = ANY (v_qids) AND pp.queue_id >= v_startq
                         LIMIT 4096)
                        UNION ALL
                        (SELECT pp.partition_id FROM qn.partition_pending pp
                         WHERE pp.queue_id = ANY (v_qids) AND pp.queue_id < v_startq
                         LIMIT 4096)) w
                  LIMIT 4096) h
            CROSS JOIN LATERAL (
                SELECT 1
                FROM queen.log_partitions p
                LEFT JOIN queen.log_consumers k
                       ON k.partition_id = p.id AND k.consumer_group = v_group
                WHERE p.id = h.id
                  AND (k.partition_id IS NULL
                       OR (p.last_offset > k.committed
                           AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())))
                OFFSET 0) e
            LIMIT v_pick) x
        ORDER BY random());
    IF cardinality(v_cands) = 0 THEN
        FOR q IN SELECT u.id FROM unnest(v_qids) AS u(id) ORDER BY random() LIMIT 4 LOOP
            SELECT v_cands || coalesce(w.o_ids, '{}') INTO v_cands
            FROM qn.sweep_step(q.id, v_group, v_want, '{}') w;
            EXIT WHEN cardinality(v_cands) > 0;
        END LOOP;
    END IF;

    FOR c IN
        SELECT p.id, p.name, x.name AS qname, coalesce(x.lease_time, 60) AS lease_time,
               coalesce(x.delayed_processing, 0) AS delayed_processing,
               coalesce(x.window_buffer, 0) AS window_buffer, m.subscription_mode,
               m.subscription_timestamp
        FROM unnest(v_cands) WITH ORDINALITY AS u(id, ord)
        JOIN queen.log_partitions p ON p.id = u.id
        JOIN queen.queues x ON x.id = p.queue_id
        JOIN queen.consumer_groups_metadata m
          ON m.tenant_id = p_tenant AND m.consumer_group = v_group AND m.queue_id = x.id
         AND m.partition_name = '' AND m.namespace = '' AND m.task = ''
        ORDER BY u.ord
    LOOP
        v_got := 0;
        FOR s IN
            SELECT * FROM qn.pop_partition(
                c.id, v_group, p_worker, coalesce(p_auto_ack, false),
                CASE WHEN coalesce(p_lease_seconds, 0) > 0 THEN p_lease_seconds
                     ELSE c.lease_time END,
                c.delayed_processing, c.window_buffer, c.subscription_mode,
                c.subscription_timestamp, v_left, v_bytes, v_first, p_max_bytes,
                coalesce(p_msg_overhead, 0), coalesce(p_max_msg_bytes, 0))
        LOOP
            r_queue := c.qname;
            r_partition := c.name;
            r_pid := c.id;
            r_base := s.o_base;
            r_start_idx := s.o_start_idx;
            r_take := s.o_take;
            r_created_at := s.o_created_at;
            r_blob := s.o_blob;
            r_lease_expires_at := s.o_lease_expires_at;
            RETURN NEXT;
            v_got := v_got + s.o_take;
            IF v_bytes IS NOT NULL THEN
                v_bytes := v_bytes - s.o_cost;
            END IF;
            v_first := false;
        END LOOP;
        IF v_got > 0 THEN
            v_claimed := v_claimed + 1;
            v_left := v_left - v_got;
        END IF;
        EXIT WHEN v_left <= 0 OR v_claimed >= v_maxp OR (v_bytes IS NOT NULL AND v_bytes <= 0);
    END LOOP;

    IF v_claimed = 0 THEN
        PERFORM qn.note_empty_scan(v_qids, v_group);
    END IF;
END;
$$;

-- has_pending_v1: the long-poll gate. True when the group may have something to
-- pop: a missing queue, partition, subscription or cursor row answers true so
-- that the full pop does the first contact. A live lease hides its partition
-- (nothing to pop there until it is acked or expires).
CREATE OR REPLACE FUNCTION qn.has_pending_v1(
    p_queue     TEXT,
    p_partition TEXT,
    p_group     TEXT,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS BOOL
LANGUAGE plpgsql STABLE
SET jit = off
AS $$
DECLARE
    v_group TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_part  TEXT := nullif(p_partition, '');
    v_qid   UUID;
    v_reg   BOOL;
    v_floor TIMESTAMPTZ;
    v_n     INT8;
    v_any   BOOL;
    r       RECORD;
BEGIN
    SELECT q.id, EXISTS (SELECT 1 FROM queen.consumer_groups_metadata m
                         WHERE m.tenant_id = p_tenant AND m.consumer_group = v_group
                           AND m.queue_id = q.id AND m.partition_name = ''
                           AND m.namespace = '' AND m.task = '')
    INTO v_qid, v_reg
    FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND OR NOT v_reg THEN
        RETURN true;
    END IF;
    IF v_part IS NOT NULL THEN
        SELECT p.last_offset, p.log_start, k.committed, k.lease_expires_at,
               k.partition_id IS NOT NULL AS has_row
        INTO r
        FROM queen.log_partitions p
        LEFT JOIN queen.log_consumers k ON k.partition_id = p.id AND k.consumer_group = v_group
        WHERE p.queue_id = v_qid AND p.name = v_part;
        IF NOT FOUND OR NOT r.has_row THEN
            RETURN true;
        END IF;
        RETURN r.last_offset > greatest(r.committed, r.log_start - 1)
               AND (r.lease_expires_at IS NULL OR r.lease_expires_at <= now());
    END IF;
    -- Bounded, and false only after looking at everything that may hold data
    -- for the group (it used to answer false from one window of each, so a
    -- parked caller slept until its deadline while data sat past them):
    --   1. the index of partitions with data (qn.partition_pending): exact for
    --      what it holds; at most 4096 entries are probed, and a queue with
    --      more entries than that, none claimable among those probed, answers
    --      true (the pop decides);
    --   2. what the index does not hold (partitions Queen MQ's procedures
    --      wrote, and those cleared before this group subscribed) lies among
    --      the partitions written since the group's empty-scan floor less two
    --      minutes (idx_log_partitions_queue_write, newest first): at most 1024
    --      are probed, and more than that answers true until a clean sweep
    --      pass of the pops moves the floor.
    SELECT coalesce(w.last_empty_scan_at, 'epoch') - interval '2 minutes' INTO v_floor
    FROM (SELECT 1) one
    LEFT JOIN queen.consumer_watermarks w
           ON w.queue_id = v_qid AND w.consumer_group = v_group;
    SELECT count(*), bool_or(e.ok) INTO v_n, v_any
    FROM (SELECT pp.partition_id AS id FROM qn.partition_pending pp
          WHERE pp.queue_id = v_qid
          ORDER BY pp.queue_id, pp.ord LIMIT 4097) h
    CROSS JOIN LATERAL (
        SELECT k.partition_id IS NULL
               OR (p.last_offset > greatest(k.committed, p.log_start - 1)
                   AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())) AS ok
        FROM (SELECT 1) one
        LEFT JOIN queen.log_partitions p ON p.id = h.id
        LEFT JOIN queen.log_consumers k
               ON k.partition_id = h.id AND k.consumer_group = v_group
        WHERE p.id IS NOT NULL
        OFFSET 0) e;
    IF coalesce(v_any, false) OR v_n > 4096 THEN
        RETURN true;
    END IF;
    SELECT count(*), bool_or(e.ok) INTO v_n, v_any
    FROM (SELECT p.id, p.last_offset, p.log_start
          FROM queen.log_partitions p
          WHERE p.queue_id = v_qid AND p.last_write_at >= v_floor
          ORDER BY p.queue_id, p.last_write_at DESC LIMIT 1025 OFFSET 0) h
    CROSS JOIN LATERAL (
        SELECT (k.partition_id IS NULL AND h.last_offset >= h.log_start)
               OR (h.last_offset > greatest(k.committed, h.log_start - 1)
                   AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())) AS ok
        FROM (SELECT 1) one
        LEFT JOIN queen.log_consumers k
               ON k.partition_id = h.id AND k.consumer_group = v_group
        OFFSET 0) e;
    RETURN coalesce(v_any, false) OR v_n > 1024;
END;
$$;

-- pop_gate_v1: what a pop of a queue with min_pop_wait_time needs before it
-- claims anything: the queue's min_pop_wait_time (ms) and how many retained
-- messages the group has not consumed in partitions whose lease is free (the
-- named one, or, for any partition, those of the first 4096 entries of the
-- index of partitions with data, qn.partition_pending, in its order: a sum
-- over every partition of the queue read a million rows per gated pop).
-- Watermark arithmetic only, no segment is read; a group with no cursor on a
-- partition counts its whole retained range (a hint: the pop that follows
-- decides; past 4096 entries, or for data the index does not hold, it is a
-- lower bound, and an under-full pop is then held at most min_pop_wait_time).
-- Missing queue: (0, 0).
CREATE OR REPLACE FUNCTION qn.pop_gate_v1(
    p_queue     TEXT,
    p_partition TEXT,
    p_group     TEXT,
    p_tenant    UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_pending INT8, r_min_wait INT4)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_group TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_part  TEXT := nullif(p_partition, '');
    v_qid   UUID;
    v_wait  INT4;
BEGIN
    SELECT q.id, q.min_pop_wait_time INTO v_qid, v_wait
    FROM queen.queues q
    WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0::INT8, 0;
        RETURN;
    END IF;
    IF v_part IS NOT NULL THEN
        RETURN QUERY
            SELECT coalesce(sum(greatest(p.last_offset
                                         - greatest(coalesce(k.committed, -1), p.log_start - 1),
                                         0)), 0)::INT8, v_wait
            FROM queen.log_partitions p
            LEFT JOIN queen.log_consumers k
                   ON k.partition_id = p.id AND k.consumer_group = v_group
            WHERE p.queue_id = v_qid AND p.name = v_part
              AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now());
        RETURN;
    END IF;
    RETURN QUERY
        SELECT coalesce(sum(e.n), 0)::INT8, v_wait
        FROM (SELECT pp.partition_id AS id FROM qn.partition_pending pp
              WHERE pp.queue_id = v_qid
              ORDER BY pp.queue_id, pp.ord LIMIT 4096) h
        CROSS JOIN LATERAL (
            SELECT greatest(p.last_offset
                            - greatest(coalesce(k.committed, -1), p.log_start - 1), 0) AS n
            FROM queen.log_partitions p
            LEFT JOIN queen.log_consumers k
                   ON k.partition_id = p.id AND k.consumer_group = v_group
            WHERE p.id = h.id
              AND (k.lease_expires_at IS NULL OR k.lease_expires_at <= now())
            OFFSET 0) e;
END;
$$;
