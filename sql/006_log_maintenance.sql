-- 006_log_maintenance.sql - the retention loop's procedures: the work list,
-- retention (both rules), the hash-sidecar purge, max-wait eviction, partition
-- cleanup and the metrics purge.
--
-- Does: delete whole segments (never part of one), sidecar rows, dead partitions,
-- old audit rows; keep log_start / txns_start and the oldest_* work-list columns
-- true in the same transaction.
-- Does not: schedule anything, take the loop's advisory lock (the broker does),
-- wrap steps in one transaction, or ever touch log_dlq (dead letters outlive
-- retention on purpose).
--
-- Invariants kept:
--   1. Each step works on one partition (cleanup excepted), deletes at most
--      p_max_rows rows and holds exactly that partition's row lock, in its own
--      short autocommitted transaction: a large backlog drains in many short
--      steps with pushes interleaving, and since no step holds two partition
--      locks, steps cannot deadlock against the multi-partition writers.
--   2. Only a contiguous prefix of whole segments is deleted; log_start becomes
--      the last deleted end_offset + 1 (storage model invariant 3), and
--      oldest_live_at the created_at of the first remaining segment (NULL when
--      none), both under the same lock.
--   3. The completed rule never deletes past MIN(committed) over the partition's
--      consumer rows: no rows means nothing consumed, so it deletes nothing, and
--      one stalled group pins the history for every group.
--   4. Whatever deletes a partition deletes its log_txns rows first (no foreign
--      key), and a partition holding a dead letter is never deleted.
--   5. Retention (not max-wait eviction) honours queues.retention_sink_hold: a
--      segment the named group has not consumed stays until it is older than
--      retention_sink_hold_max_seconds.
-- (SET jit = off on the heavier procedures: see 003_log_push.sql.)

-- maint_worklist_v1: partitions with something possibly deletable, oldest first,
-- from one range scan per queue over the partial indexes of 002_log_indexes.sql
-- (cost follows deletable work, not the partition count). Cutoffs are computed
-- from the queue's configuration and the caller's single p_now per cycle.
-- Phase 1 retention, 2 sidecar purge, 3 max-wait eviction. NULL cutoff = rule off.
-- Queues DeleteQueue is deleting (the reserved tenant ...dead) are left to its
-- steps (a retention step there would only contend for the same rows).
-- Phase 2 probes every queue: at 10,000 queues that was 240 ms a cycle whatever
-- was due. It probes one window of 1,000 queues by id per call instead, the
-- walk's place kept in qn.sidecar_sweep (written only when there is more than
-- one window): a queue's sidecar is looked at every ceil(queues / 1,000)
-- calls, which its cutoff (15 minutes at least) easily absorbs.
CREATE OR REPLACE FUNCTION qn.maint_worklist_v1(p_now TIMESTAMPTZ, p_phase INT2, p_limit INT4)
RETURNS TABLE (r_pid UUID, r_all_cutoff TIMESTAMPTZ, r_completed_cutoff TIMESTAMPTZ,
               r_cutoff TIMESTAMPTZ)
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $$
DECLARE
    v_limit INT4 := CASE WHEN coalesce(p_limit, 0) > 0 THEN p_limit ELSE 5000 END;
    v_window CONSTANT INT4 := 1000;
    v_pos   UUID;
    v_ids   UUID[];
    v_next  UUID;
BEGIN
    IF p_phase = 1 THEN
        RETURN QUERY
        SELECT x.id, q.all_c, q.comp_c, greatest(q.all_c, q.comp_c)
        FROM (SELECT y.id,
                     CASE WHEN y.retention_seconds > 0
                          THEN p_now - make_interval(secs => y.retention_seconds) END AS all_c,
                     CASE WHEN y.completed_retention_seconds > 0
                          THEN p_now - make_interval(secs => y.completed_retention_seconds) END AS comp_c
              FROM queen.queues y
              WHERE y.retention_enabled
                AND (y.retention_seconds > 0 OR y.completed_retention_seconds > 0)
                AND y.tenant_id <> '00000000-0000-0000-0000-00000000dead') q
        CROSS JOIN LATERAL (
            SELECT p.id, p.oldest_live_at
            FROM queen.log_partitions p
            WHERE p.queue_id = q.id AND p.oldest_live_at IS NOT NULL
              AND p.oldest_live_at < greatest(q.all_c, q.comp_c)
            ORDER BY p.oldest_live_at
            LIMIT v_limit) x
        ORDER BY x.oldest_live_at
        LIMIT v_limit;
    ELSIF p_phase = 2 THEN
        -- The sidecar outlives the dedup window, the completed-retention window
        -- (acks by transaction id of consumed-but-retained data) and 15 minutes
        -- (a plausible late ack): a hash dropped earlier would turn a late ack
        -- into an unresolved one.
        SELECT s.pos INTO v_pos FROM qn.sidecar_sweep s;
        SELECT array_agg(w.id ORDER BY w.id) INTO v_ids
        FROM (SELECT y.id FROM queen.queues y
              WHERE v_pos IS NULL OR y.id > v_pos
              ORDER BY y.id LIMIT v_window) w;
        v_next := CASE WHEN cardinality(v_ids) = v_window THEN v_ids[v_window] END;
        IF v_next IS DISTINCT FROM v_pos THEN
            INSERT INTO qn.sidecar_sweep (pos) VALUES (v_next)
            ON CONFLICT (one) DO UPDATE SET pos = EXCLUDED.pos;
        END IF;
        RETURN QUERY
        SELECT x.id, NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ, q.cut
        FROM (SELECT y.id,
                     p_now - make_interval(secs => greatest(y.dedup_window_seconds,
                                                            y.completed_retention_seconds,
                                                            900)) AS cut
              FROM queen.queues y
              WHERE y.id = ANY (v_ids)
                AND y.tenant_id <> '00000000-0000-0000-0000-00000000dead') q
        CROSS JOIN LATERAL (
            SELECT p.id, p.oldest_txn_at
            FROM queen.log_partitions p
            WHERE p.queue_id = q.id AND p.oldest_txn_at IS NOT NULL
              AND p.oldest_txn_at < q.cut
            ORDER BY p.oldest_txn_at
            LIMIT v_limit) x
        ORDER BY x.oldest_txn_at
        LIMIT v_limit;
    ELSIF p_phase = 3 THEN
        -- Applies whatever retention_enabled says.
        RETURN QUERY
        SELECT x.id, NULL::TIMESTAMPTZ, NULL::TIMESTAMPTZ, q.cut
        FROM (SELECT y.id, p_now - make_interval(secs => y.max_wait_time_seconds) AS cut
              FROM queen.queues y
              WHERE y.max_wait_time_seconds > 0
                AND y.tenant_id <> '00000000-0000-0000-0000-00000000dead') q
        CROSS JOIN LATERAL (
            SELECT p.id, p.oldest_live_at
            FROM queen.log_partitions p
            WHERE p.queue_id = q.id AND p.oldest_live_at IS NOT NULL
              AND p.oldest_live_at < q.cut
            ORDER BY p.oldest_live_at
            LIMIT v_limit) x
        ORDER BY x.oldest_live_at
        LIMIT v_limit;
    ELSE
        RAISE EXCEPTION 'QMAINT unknown phase %', p_phase USING ERRCODE = 'invalid_parameter_value';
    END IF;
END;
$$;

-- Deletes the longest prefix (at most p_max_rows) of whole segments that rule 1
-- (created before p_all_cutoff) or rule 2 (created before p_completed_cutoff and
-- consumed by every group) allows, and that the sink hold lets go: with
-- p_hold_off set, only segments ending at or below it, or created before
-- p_hold_cutoff. Every condition is monotone in base order (created_at and
-- end_offset grow), so the deletable set is a prefix and a walk of p_max_rows + 1
-- rows from log_start decides it. Internal to the steps below.
CREATE OR REPLACE FUNCTION qn.trim_segments(p_pid UUID, p_all_cutoff TIMESTAMPTZ,
                                               p_completed_cutoff TIMESTAMPTZ,
                                               p_max_rows INT4, p_type TEXT,
                                               p_hold_off INT8 DEFAULT NULL,
                                               p_hold_cutoff TIMESTAMPTZ DEFAULT NULL)
RETURNS TABLE (r_deleted INT4, r_frames INT8, r_new_log_start INT8, r_done BOOL)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_max     INT4 := greatest(coalesce(p_max_rows, 1000), 1);
    v_from    INT8;
    v_oldest  TIMESTAMPTZ;
    v_minc    INT8;
    v_k       INT4 := 0;
    v_frames  INT8 := 0;
    v_lastb   INT8;
    v_laste   INT8;
    v_next    TIMESTAMPTZ;
    v_done    BOOL := true;
    v_by2     BOOL := false;
    v_r1      BOOL;
    v_r2      BOOL;
    v_held    BOOL;
    s         RECORD;
BEGIN
    SELECT p.log_start, p.oldest_live_at INTO v_from, v_oldest
    FROM queen.log_partitions p
    WHERE p.id = p_pid
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, 0::INT8, NULL::INT8, true;
        RETURN;
    END IF;
    IF p_completed_cutoff IS NOT NULL THEN
        SELECT min(c.committed) INTO v_minc
        FROM queen.log_consumers c WHERE c.partition_id = p_pid;
    END IF;

    FOR s IN
        SELECT x.base_offset, x.end_offset, x.created_at
        FROM queen.log_segments x
        WHERE x.partition_id = p_pid AND x.base_offset >= v_from
        ORDER BY x.base_offset
        LIMIT v_max + 1
    LOOP
        v_r1 := p_all_cutoff IS NOT NULL AND s.created_at < p_all_cutoff;
        v_r2 := v_minc IS NOT NULL AND s.created_at < p_completed_cutoff
                AND s.end_offset <= v_minc;
        v_held := p_hold_off IS NOT NULL AND s.end_offset > p_hold_off
                  AND (p_hold_cutoff IS NULL OR s.created_at >= p_hold_cutoff);
        IF NOT (v_r1 OR v_r2) OR v_held OR v_k = v_max THEN
            v_next := s.created_at;          -- first segment that stays
            v_done := NOT (v_r1 OR v_r2) OR v_held;
            EXIT;
        END IF;
        v_k := v_k + 1;
        v_frames := v_frames + (s.end_offset - s.base_offset + 1);
        v_lastb := s.base_offset;
        v_laste := s.end_offset;
        v_by2 := v_by2 OR NOT v_r1;
    END LOOP;

    IF v_k = 0 THEN
        -- Nothing deletable. Keep the work-list column true (self-healing after
        -- any drift) without writing when it already is.
        IF v_oldest IS DISTINCT FROM v_next THEN
            UPDATE queen.log_partitions SET oldest_live_at = v_next WHERE id = p_pid;
        END IF;
        RETURN QUERY SELECT 0, 0::INT8, v_from, true;
        RETURN;
    END IF;

    -- One primary-key range.
    DELETE FROM queen.log_segments
    WHERE partition_id = p_pid AND base_offset >= v_from AND base_offset <= v_lastb;
    UPDATE queen.log_partitions
    SET log_start = greatest(log_start, v_laste + 1), oldest_live_at = v_next
    WHERE id = p_pid;
    INSERT INTO queen.retention_history (partition_id, messages_deleted, retention_type)
    VALUES (p_pid, least(v_frames, 2147483647)::INT4,
            coalesce(p_type, CASE WHEN v_by2 THEN 'completed_retention' ELSE 'retention' END));
    RETURN QUERY SELECT v_k, v_frames, v_laste + 1, v_done;
END;
$$;

-- retention_step_v1: both rules; NULL cutoff = rule off. A queue whose
-- retention_sink_hold names a consumer group (Queen MQ's S3 sink) keeps every
-- segment that group has not consumed in this partition (no cursor: nothing
-- consumed), unless it is older than retention_sink_hold_max_seconds (default
-- 604800), so a sink that died cannot pin the data forever. Max-wait eviction
-- is not held: it is data loss by design, whoever has read the data.
CREATE OR REPLACE FUNCTION qn.retention_step_v1(p_pid UUID, p_all_cutoff TIMESTAMPTZ,
                                                   p_completed_cutoff TIMESTAMPTZ, p_max_rows INT4)
RETURNS TABLE (r_deleted INT4, r_frames INT8, r_new_log_start INT8, r_done BOOL)
LANGUAGE plpgsql
AS $$
DECLARE
    v_sink TEXT;
    v_max  INT4;
    v_hold INT8;
BEGIN
    SELECT nullif(q.retention_sink_hold, ''), q.retention_sink_hold_max_seconds
    INTO v_sink, v_max
    FROM queen.log_partitions p JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = p_pid;
    IF v_sink IS NOT NULL THEN
        -- no lock: the sink's cursor only moves forward, a stale value holds more
        SELECT c.committed INTO v_hold
        FROM queen.log_consumers c
        WHERE c.partition_id = p_pid AND c.consumer_group = v_sink;
        v_hold := coalesce(v_hold, -1);
    END IF;
    RETURN QUERY
    SELECT * FROM qn.trim_segments(
        p_pid, p_all_cutoff, p_completed_cutoff, p_max_rows, NULL, v_hold,
        CASE WHEN v_sink IS NOT NULL
             THEN now() - make_interval(secs => greatest(coalesce(v_max, 604800), 0)) END);
END;
$$;

-- evict_max_wait_step_v1: rule 1 only, for every group, leased batches included;
-- nothing is dead-lettered (data loss by design: for data that is worthless when
-- stale). A cursor left below the new log_start resumes at the next segment.
CREATE OR REPLACE FUNCTION qn.evict_max_wait_step_v1(p_pid UUID, p_cutoff TIMESTAMPTZ,
                                                        p_max_rows INT4)
RETURNS TABLE (r_deleted INT4, r_frames INT8, r_new_log_start INT8, r_done BOOL)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
        SELECT * FROM qn.trim_segments(p_pid, p_cutoff, NULL, p_max_rows, 'max_wait_time_eviction');
END;
$$;

-- txns_purge_step_v1: deletes the oldest sidecar rows created before p_cutoff,
-- advances txns_start (the push probe's and ack resolution's lower bound) and
-- oldest_txn_at under the partition lock. A hash purged here resolves as
-- unknown: a re-push is accepted as new, a late ack is not applied (redelivery).
CREATE OR REPLACE FUNCTION qn.txns_purge_step_v1(p_pid UUID, p_cutoff TIMESTAMPTZ,
                                                    p_max_rows INT4)
RETURNS TABLE (r_deleted INT4, r_new_txns_start INT8, r_done BOOL)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_max    INT4 := greatest(coalesce(p_max_rows, 1000), 1);
    v_from   INT8;
    v_oldest TIMESTAMPTZ;
    v_k      INT4 := 0;
    v_lastb  INT8;
    v_laste  INT8;
    v_next   TIMESTAMPTZ;
    v_done   BOOL := true;
    s        RECORD;
BEGIN
    SELECT p.txns_start, p.oldest_txn_at INTO v_from, v_oldest
    FROM queen.log_partitions p
    WHERE p.id = p_pid
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 0, NULL::INT8, true;
        RETURN;
    END IF;
    FOR s IN
        SELECT t.base_offset, t.end_offset, t.created_at
        FROM queen.log_txns t
        WHERE t.partition_id = p_pid AND t.base_offset >= v_from
        ORDER BY t.base_offset
        LIMIT v_max + 1
    LOOP
        IF p_cutoff IS NULL OR s.created_at >= p_cutoff OR v_k = v_max THEN
            v_next := s.created_at;
            v_done := p_cutoff IS NULL OR s.created_at >= p_cutoff;
            EXIT;
        END IF;
        v_k := v_k + 1;
        v_lastb := s.base_offset;
        v_laste := s.end_offset;
    END LOOP;
    IF v_k = 0 THEN
        IF v_oldest IS DISTINCT FROM v_next THEN
            UPDATE queen.log_partitions SET oldest_txn_at = v_next WHERE id = p_pid;
        END IF;
        RETURN QUERY SELECT 0, v_from, true;
        RETURN;
    END IF;
    DELETE FROM queen.log_txns
    WHERE partition_id = p_pid AND base_offset >= v_from AND base_offset <= v_lastb;
    UPDATE queen.log_partitions
    SET txns_start = greatest(txns_start, v_laste + 1), oldest_txn_at = v_next
    WHERE id = p_pid;
    RETURN QUERY SELECT v_k, v_laste + 1, v_done;
END;
$$;

-- partition_dead_v1: TRUE iff the partition is empty and idle since p_cutoff:
-- created and last written before it, no segment, no dead letter (a dead letter
-- pins its partition), and no consumer row with a live lease or any activity
-- (lease taken or expiring, row created) at or after the cutoff. NULL when the
-- partition does not exist.
CREATE OR REPLACE FUNCTION qn.partition_dead_v1(p_pid UUID, p_cutoff TIMESTAMPTZ)
RETURNS BOOL
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (
        SELECT p.created_at < p_cutoff AND p.last_write_at < p_cutoff
           AND NOT EXISTS (SELECT 1 FROM queen.log_segments s WHERE s.partition_id = p.id)
           AND NOT EXISTS (SELECT 1 FROM queen.log_dlq d WHERE d.partition_id = p.id)
           AND NOT EXISTS (
                   SELECT 1 FROM queen.log_consumers c
                   WHERE c.partition_id = p.id
                     AND ((c.batch_end IS NOT NULL
                           AND (c.lease_expires_at IS NULL OR c.lease_expires_at > now()))
                          OR c.lease_expires_at >= p_cutoff
                          OR c.lease_acquired_at >= p_cutoff
                          OR c.created_at >= p_cutoff))
        FROM queen.log_partitions p
        WHERE p.id = p_pid);
END;
$$;

-- partition_cleanup_step_v1: deletes up to p_max_rows dead partitions among
-- the next window of at most 8192 partitions by id (qn.cleanup_sweep keeps the
-- window's place between calls and maintenance cycles, wrapping around at the
-- end), so one call reads a bounded number of partitions whatever their count
-- (it read them all, every cycle). r_done is false only when more dead ones
-- than p_max_rows were found in the window (the caller calls again at once).
-- Candidates are locked FOR UPDATE SKIP LOCKED in id order (never waiting, so
-- never deadlocking) and the predicate is evaluated again under the locks,
-- which is the authoritative check. Their log_txns and qn.partition_pending
-- rows go first (no foreign key), an audit row each, then the partition rows
-- (cascading to cursors and segments). One maintenance instance runs it at a
-- time (the loop's advisory lock); the window's row is written by it alone.
CREATE OR REPLACE FUNCTION qn.partition_cleanup_step_v1(p_cutoff TIMESTAMPTZ, p_max_rows INT4)
RETURNS TABLE (r_deleted INT4, r_done BOOL)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_window CONSTANT INT4 := 8192;
    v_max  INT4 := greatest(coalesce(p_max_rows, 1000), 1);
    v_pos  UUID;
    v_last UUID;
    v_n    INT8;
    v_more BOOL;
    v_cand UUID[];
    v_ids  UUID[];
BEGIN
    IF p_cutoff IS NULL THEN
        RETURN QUERY SELECT 0, true;
        RETURN;
    END IF;
    SELECT w.pos INTO v_pos FROM qn.cleanup_sweep w;
    -- the window (a primary-key range, LIMIT first), then the dead ones in it
    -- up to v_max (the window ends after the v_max-th when there are more)
    WITH h AS (
        SELECT p.id, p.created_at < p_cutoff AND p.last_write_at < p_cutoff AS old
        FROM queen.log_partitions p
        WHERE v_pos IS NULL OR p.id > v_pos
        ORDER BY p.id
        LIMIT v_window
        OFFSET 0
    ), d AS (
        SELECT h.id, h.old AND qn.partition_dead_v1(h.id, p_cutoff) AS dead FROM h
    ), r AS (
        SELECT d.*, count(*) FILTER (WHERE d.dead) OVER (ORDER BY d.id) AS rk FROM d
    )
    SELECT array_agg(r.id ORDER BY r.id) FILTER (WHERE r.dead AND r.rk <= v_max),
           (array_agg(r.id ORDER BY r.id DESC)
                FILTER (WHERE r.rk < v_max OR (r.rk = v_max AND r.dead)))[1],
           count(*), bool_or(r.rk > v_max OR (r.rk = v_max AND NOT r.dead))
    INTO v_cand, v_last, v_n, v_more
    FROM r;
    v_more := coalesce(v_more, false);
    INSERT INTO qn.cleanup_sweep AS w (one, pos)
    VALUES (true, CASE WHEN v_n < v_window AND NOT v_more THEN NULL ELSE v_last END)
    ON CONFLICT (one) DO UPDATE SET pos = EXCLUDED.pos;
    SELECT array_agg(x.id) INTO v_cand
    FROM (SELECT p.id
          FROM queen.log_partitions p
          WHERE p.id = ANY (coalesce(v_cand, '{}'))
          ORDER BY p.id
          FOR UPDATE SKIP LOCKED) x;
    IF v_cand IS NULL THEN
        RETURN QUERY SELECT 0, NOT v_more;
        RETURN;
    END IF;
    SELECT array_agg(c.id ORDER BY c.id) INTO v_ids
    FROM unnest(v_cand) AS c(id)
    WHERE qn.partition_dead_v1(c.id, p_cutoff);
    IF v_ids IS NOT NULL THEN
        DELETE FROM queen.log_txns WHERE partition_id = ANY (v_ids);
        DELETE FROM qn.partition_pending pp
        USING queen.log_partitions p
        WHERE p.id = ANY (v_ids) AND pp.queue_id = p.queue_id AND pp.partition_id = p.id;
        INSERT INTO queen.retention_history (partition_id, messages_deleted, retention_type)
        SELECT id, 0, '__partition_deleted__' FROM unnest(v_ids) AS id;
        DELETE FROM queen.log_partitions WHERE id = ANY (v_ids);
    END IF;
    RETURN QUERY SELECT coalesce(cardinality(v_ids), 0), NOT v_more;
END;
$$;

-- metrics_purge_v1: ages out the retention audit; then, once per cycle, one
-- bounded step (50,000 rows) of a queue a DeleteQueue left half deleted
-- (qn.delete_queue_finish_v1, in 009_admin.sql), so an interrupted call is
-- finished by maintenance.
CREATE OR REPLACE FUNCTION qn.metrics_purge_v1(p_cutoff TIMESTAMPTZ)
RETURNS INT4
LANGUAGE plpgsql
AS $$
DECLARE
    v_n INT4;
BEGIN
    WITH d AS (DELETE FROM queen.retention_history WHERE executed_at < p_cutoff RETURNING 1)
    SELECT count(*)::INT4 INTO v_n FROM d;
    IF to_regprocedure('qn.delete_queue_finish_v1(integer)') IS NOT NULL THEN
        PERFORM qn.delete_queue_finish_v1(50000);
    END IF;
    RETURN v_n;
END;
$$;
