-- 005_log_ack.sql - ack_v1, ack_bundle_v1 (positional and by transaction-id hash, one decision
-- procedure), dlq_head_v1, renew_lease_v1, release_lease_v1, check_leases_v1.
--
-- Does: move a (partition, group) cursor, release or keep its lease, spend the
-- retry budget, hand a poison frame to the dead-letter path.
-- Does not: read frames (the broker extracts the dead letter from the covering
-- segment ack_v1 returns and files it with dlq_head_v1).
--
-- Invariants kept:
--   1. Cursor semantics: acking offset N completes every earlier offset of the
--      span; an explicit failure (failed / retry / dlq) is never skipped: the
--      cursor stops at the completed prefix below the lowest failure of the call,
--      and completed items above it are reported deferred (redelivered).
--   2. Only an explicit FAILED spends the retry budget (one unit per call); lease
--      expiry and RETRY never do.
--   3. A terminal failure moves the cursor past exactly the poison frame: filed by
--      dlq_head_v1 (the lease is kept until the snapshot is filed, so a crash in
--      between redelivers instead of losing), or dropped when dead-lettering is
--      off. The poison frame must be the head of what remains (committed + 1):
--      when unacked messages precede it, the lease is released instead and the
--      batch redelivers from the head, so nothing before the poison is skipped
--      without an ack.
--   4. Hash resolution is bounded through the primary key to the ackable span
--      (committed, batch_end] (measured.md weak point 3): it starts at the sidecar
--      row covering max(committed + 1, txns_start).
--   5. Lock order: acks take only their consumer row (FOR UPDATE); several acks in
--      one transaction are issued in ascending (partition_id, consumer_group) by
--      the caller.
-- (JIT is turned off only around the one-shot hash resolution: see
-- 003_log_push.sql.)

-- ack_v1: see sql/API.md. Outcomes: 1 applied, 2 noop, 3 stale, 4 unresolved,
-- 5 lease_invalid, 6 rejected, 7 deferred. Summary flags: 1 lease released,
-- 2 DLQ hand-off pending, 4 poison frame dropped, 8 retry budget charged.
CREATE OR REPLACE FUNCTION qn.ack_v1(
    p_pid      UUID,
    p_group    TEXT,
    p_worker   TEXT,
    p_hashes   BYTEA[],
    p_offsets  INT8[],
    p_statuses INT2[],
    p_strict   BOOL DEFAULT false)
RETURNS TABLE (r_idx INT4, r_outcome INT2, r_off INT8, r_flags INT4, r_committed INT8,
               r_base INT8, r_blob BYTEA)
LANGUAGE plpgsql
AS $$
DECLARE
    v_group   TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_n       INT := greatest(coalesce(cardinality(p_hashes), 0),
                              coalesce(cardinality(p_offsets), 0));
    v_st      INT2[];    -- 1 completed, 2 failed, 3 retry, 4 dlq
    v_eff     INT8[];    -- offset resolved inside the ackable span
    v_below   BOOL[];    -- hash found below the cursor
    v_out     INT2[];
    v_res     BYTEA[];   -- hashes still to resolve (NULL: resolved or rejected)
    v_found   BOOL;
    v_com     INT8;
    v_bend    INT8;
    v_wid     TEXT;
    v_lexp    TIMESTAMPTZ;
    v_brc     INT4;
    v_txs     INT8;
    v_lastoff INT8;
    v_limit   INT4;
    v_dlq_on  BOOL;
    v_lease   BOOL;
    v_lo      INT8;
    v_hi      INT8;
    v_hash_n  INT := 0;
    v_miss    BOOL := false;
    v_sig     INT8;
    v_sigst   INT2;
    v_maxok   INT8;
    v_new     INT8;
    v_flags   INT4 := 0;
    v_poff    INT8;
    v_pbase   INT8;
    v_pend    INT8;
    v_pblob   BYTEA;
    v_head    BOOL;
    v_release BOOL := false;
    v_reset   BOOL := false;
    v_charge  BOOL := false;
    v_fast    BOOL;
    v_badidx  INT8;
    v_total   INT8;
    h         BYTEA;
    o         INT8;
    r         RECORD;
BEGIN
    IF (p_hashes IS NOT NULL AND cardinality(p_hashes) <> v_n)
       OR (p_offsets IS NOT NULL AND cardinality(p_offsets) <> v_n)
       OR (p_statuses IS NOT NULL AND cardinality(p_statuses) <> v_n) THEN
        RAISE EXCEPTION 'QACK misaligned arrays';
    END IF;

    SELECT true, c.committed, c.batch_end, c.worker_id, c.lease_expires_at,
           c.batch_retry_count, p.txns_start, p.last_offset, coalesce(q.retry_limit, 3),
           coalesce(q.dead_letter_queue, true) OR coalesce(q.dlq_after_max_retries, true)
    INTO v_found, v_com, v_bend, v_wid, v_lexp, v_brc, v_txs, v_lastoff, v_limit, v_dlq_on
    FROM queen.log_consumers c
    JOIN queen.log_partitions p ON p.id = c.partition_id
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE c.partition_id = p_pid AND c.consumer_group = v_group
    FOR UPDATE OF c;

    IF NOT coalesce(v_found, false) THEN
        FOR i IN 1 .. v_n LOOP
            IF p_strict THEN
                RAISE EXCEPTION 'QACK rejected item %', i - 1;
            END IF;
            RETURN QUERY SELECT (i - 1)::INT4, 6::INT2, NULL::INT8, NULL::INT4, NULL::INT8,
                                NULL::INT8, NULL::BYTEA;
        END LOOP;
        RETURN QUERY SELECT -1, NULL::INT2, NULL::INT8, 0, -1::INT8, NULL::INT8, NULL::BYTEA;
        RETURN;
    END IF;

    IF coalesce(p_worker, '') <> ''
       AND (v_wid IS DISTINCT FROM p_worker OR v_lexp IS NULL OR v_lexp <= now()) THEN
        FOR i IN 1 .. v_n LOOP
            IF p_strict THEN
                RAISE EXCEPTION 'QACK lease_invalid item %', i - 1;
            END IF;
            RETURN QUERY SELECT (i - 1)::INT4, 5::INT2, NULL::INT8, NULL::INT4, NULL::INT8,
                                NULL::INT8, NULL::BYTEA;
        END LOOP;
        RETURN QUERY SELECT -1, NULL::INT2, NULL::INT8, 0, v_com, NULL::INT8, NULL::BYTEA;
        RETURN;
    END IF;

    -- "Has a lease" means the row carries a leased batch, whether or not the
    -- caller named the lease (the lease id only triggers validation).
    v_lease := v_bend IS NOT NULL;
    v_hi := CASE WHEN v_lease THEN v_bend ELSE v_lastoff END;
    -- Positional acks that all complete (the common case: a consumer acks
    -- what it was given) take set-based statements instead of the per-item
    -- loops below (an ack of 100 messages at 50,000 msg/s: 0.29 ms of server
    -- time that way, 0.23 ms this way). Same verdicts: an item past the span (or with
    -- no offset) is rejected (6), one at or below the cursor is a noop (2),
    -- the rest apply (1) and the cursor moves to the highest of them.
    v_fast := coalesce(cardinality(p_offsets), 0) = v_n
              AND NOT EXISTS (SELECT 1 FROM unnest(p_hashes) x WHERE x IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM unnest(p_statuses) x
                              WHERE x IS NOT NULL AND x NOT IN (0, 1));
    IF v_fast THEN
        SELECT max(u.o) FILTER (WHERE u.o > v_com AND u.o <= v_hi),
               min(u.ord) FILTER (WHERE u.o IS NULL OR u.o > v_hi)
        INTO v_maxok, v_badidx
        FROM unnest(p_offsets) WITH ORDINALITY AS u(o, ord);
        IF p_strict AND v_badidx IS NOT NULL THEN
            RAISE EXCEPTION 'QACK rejected item %', v_badidx - 1;
        END IF;
        v_new := greatest(v_com, coalesce(v_maxok, v_com));
        v_total := v_new - v_com;
    ELSE
        v_st := array_fill(1::INT2, ARRAY[v_n]);
        v_eff := array_fill(NULL::INT8, ARRAY[v_n]);
        v_below := array_fill(false, ARRAY[v_n]);
        v_out := array_fill(NULL::INT2, ARRAY[v_n]);

        FOR i IN 1 .. v_n LOOP
            v_st[i] := CASE WHEN p_statuses IS NULL OR p_statuses[i] IS NULL
                                 OR p_statuses[i] IN (0, 1) THEN 1
                            WHEN p_statuses[i] IN (2, 3, 4) THEN p_statuses[i]
                            ELSE 2 END;   -- anything else is a failure, as on the wire
            h := p_hashes[i];
            o := p_offsets[i];
            IF h IS NOT NULL THEN
                IF octet_length(h) <> 16 OR o IS NOT NULL THEN
                    v_out[i] := 6;
                ELSE
                    v_hash_n := v_hash_n + 1;
                END IF;
            ELSIF o IS NULL OR o > v_hi THEN
                v_out[i] := 6;                   -- nothing to ack, or beyond the span
            ELSIF o > v_com THEN
                v_eff[i] := o;
            END IF;
        END LOOP;

        IF v_hash_n > 0 THEN
            -- Resolution, bounded through the primary key to the ackable span: the
            -- sidecar rows from the one covering lo up to batch_end. Stored frames
            -- are filtered by "h = ANY(the items' hashes)" in a one-shot plan
            -- (EXECUTE), where the array is a constant and the test is a hash
            -- lookup; the few matches are then joined to the items. A cached plan
            -- chose nested loops that exploded every stored row once per item.
            v_lo := greatest(v_com + 1, v_txs);
            v_res := p_hashes;
            -- one-shot plans below: JIT would compile again at every call
            PERFORM set_config('jit', 'off', true);
            FOR i IN 1 .. v_n LOOP
                IF v_out[i] IS NOT NULL THEN
                    v_res[i] := NULL;            -- rejected already: not resolved
                END IF;
            END LOOP;
            IF v_lo <= v_hi THEN
                FOR r IN EXECUTE
                    'SELECT u.ord::INT AS ord, c.off
                     FROM unnest($1::BYTEA[]) WITH ORDINALITY AS u(h, ord)
                     JOIN (SELECT th.h, min(t.base_offset + th.idx) AS off
                           FROM queen.log_txns t
                           CROSS JOIN LATERAL qn.log_unnest_hashes(t.hashes) th
                           WHERE t.partition_id = $2
                             AND t.base_offset >= coalesce(
                                     (SELECT max(t2.base_offset) FROM queen.log_txns t2
                                      WHERE t2.partition_id = $2 AND t2.base_offset <= $3),
                                     $3)
                             AND t.base_offset <= $4
                             AND t.base_offset + th.idx BETWEEN $3 AND $4
                             AND th.h = ANY ($1)
                           GROUP BY th.h) c ON c.h = u.h'
                    USING v_res, p_pid, v_lo, v_hi
                LOOP
                    v_eff[r.ord] := r.off;
                    v_res[r.ord] := NULL;
                END LOOP;
            END IF;
            FOR i IN 1 .. v_n LOOP
                IF v_res[i] IS NOT NULL THEN
                    v_miss := true;
                END IF;
            END LOOP;
            -- Hashes not in the span: acked before (below the cursor) or unknown.
            -- Only this uncommon path reads the sidecar below the cursor (from
            -- txns_start: rows below it are gone).
            IF v_miss AND v_com >= v_txs THEN
                FOR r IN EXECUTE
                    'SELECT u.ord::INT AS ord
                     FROM unnest($1::BYTEA[]) WITH ORDINALITY AS u(h, ord)
                     WHERE u.h IN (SELECT th.h
                                   FROM queen.log_txns t
                                   CROSS JOIN LATERAL qn.log_unnest_hashes(t.hashes) th
                                   WHERE t.partition_id = $2 AND t.base_offset <= $3
                                     AND t.base_offset + th.idx <= $3
                                     AND th.h = ANY ($1))'
                    USING v_res, p_pid, v_com
                LOOP
                    v_below[r.ord] := true;
                END LOOP;
            END IF;
        END IF;

        -- The head signal: the lowest failure in the span (dlq > failed > retry at
        -- the same offset). Without a leased batch failures have no effect.
        IF v_lease THEN
            FOR i IN 1 .. v_n LOOP
                CONTINUE WHEN v_st[i] = 1 OR v_eff[i] IS NULL;
                IF v_sig IS NULL OR v_eff[i] < v_sig
                   OR (v_eff[i] = v_sig
                       AND (CASE v_st[i] WHEN 4 THEN 3 WHEN 2 THEN 2 ELSE 1 END)
                           > (CASE v_sigst WHEN 4 THEN 3 WHEN 2 THEN 2 ELSE 1 END)) THEN
                    v_sig := v_eff[i];
                    v_sigst := v_st[i];
                END IF;
            END LOOP;
        END IF;
        FOR i IN 1 .. v_n LOOP
            IF v_st[i] = 1 AND v_eff[i] IS NOT NULL AND (v_sig IS NULL OR v_eff[i] < v_sig) THEN
                v_maxok := greatest(v_maxok, v_eff[i]);
            END IF;
        END LOOP;
        v_new := greatest(v_com, coalesce(v_maxok, v_com));
        v_total := v_new - v_com;

        -- Per-item outcomes.
        FOR i IN 1 .. v_n LOOP
            CONTINUE WHEN v_out[i] IS NOT NULL;
            IF v_eff[i] IS NOT NULL THEN
                IF v_st[i] = 1 THEN
                    v_out[i] := CASE WHEN v_sig IS NULL OR v_eff[i] < v_sig THEN 1 ELSE 7 END;
                ELSIF NOT v_lease THEN
                    v_out[i] := 6;               -- no leased batch to fail
                ELSE
                    v_out[i] := CASE WHEN v_eff[i] = v_sig AND v_st[i] = v_sigst THEN 1 ELSE 7 END;
                END IF;
            ELSIF p_hashes[i] IS NOT NULL AND NOT v_below[i] THEN
                v_out[i] := 4;                   -- unknown: not acked, redelivered
            ELSE
                v_out[i] := CASE WHEN v_st[i] = 1 THEN 2 ELSE 3 END;
            END IF;
        END LOOP;

        IF p_strict THEN
            FOR i IN 1 .. v_n LOOP
                IF v_out[i] NOT IN (1, 2) THEN
                    RAISE EXCEPTION 'QACK % item %',
                        CASE v_out[i] WHEN 3 THEN 'stale' WHEN 4 THEN 'unresolved'
                                      WHEN 6 THEN 'rejected' ELSE 'deferred' END, i - 1;
                END IF;
            END LOOP;
        END IF;

    END IF;

    -- The branch.
    IF v_sig IS NOT NULL THEN
        v_head := v_sig = v_new + 1;
        IF v_sigst = 3 THEN
            v_release := true;                                -- retry: no charge
        ELSIF v_sigst = 2 AND v_brc < v_limit THEN
            v_release := true;                                -- failed, budget left
            v_charge := true;
        ELSIF NOT v_head THEN
            v_release := true;                                -- redeliver from the head first
        ELSIF v_sigst = 4 OR v_dlq_on THEN
            v_flags := v_flags | 2;                           -- hand-off, lease kept
            v_poff := v_sig;
            SELECT s.base_offset, s.end_offset, s.blob INTO v_pbase, v_pend, v_pblob
            FROM queen.log_segments s
            WHERE s.partition_id = p_pid AND s.base_offset <= v_sig
            ORDER BY s.base_offset DESC LIMIT 1;
            IF v_pend IS NULL OR v_pend < v_sig THEN
                v_pbase := NULL;                              -- retention deleted it
                v_pblob := NULL;
            END IF;
        ELSE
            v_flags := v_flags | 4;                           -- DLQ off: drop it
            v_poff := v_sig;
            v_new := v_sig;
            v_total := v_total + 1;
            v_release := true;
            v_reset := true;
        END IF;
    ELSIF v_lease AND v_new >= v_bend THEN
        v_release := true;                                    -- whole batch done
        v_reset := true;
    END IF;
    IF v_release THEN
        v_flags := v_flags | 1;
        IF v_lastoff > v_new THEN
            v_flags := v_flags | 16;                          -- more is there to lease
        END IF;
    END IF;
    IF v_charge THEN
        v_flags := v_flags | 8;
    END IF;

    IF v_new <> v_com OR v_release OR v_charge THEN
        UPDATE queen.log_consumers
        SET committed = v_new,
            total_consumed = total_consumed + v_total,
            worker_id = CASE WHEN v_release THEN NULL ELSE worker_id END,
            lease_expires_at = CASE WHEN v_release THEN NULL ELSE lease_expires_at END,
            lease_acquired_at = CASE WHEN v_release THEN NULL ELSE lease_acquired_at END,
            batch_end = CASE WHEN v_release THEN NULL ELSE batch_end END,
            batch_retry_count = CASE WHEN v_reset THEN 0
                                     WHEN v_charge THEN batch_retry_count + 1
                                     ELSE batch_retry_count END,
            attempt_offset = CASE WHEN v_reset THEN NULL ELSE attempt_offset END,
            attempt_count = CASE WHEN v_reset THEN 0 ELSE attempt_count END
        WHERE partition_id = p_pid AND consumer_group = v_group;
    END IF;

    -- Rows returned one by one: a statement per row set would cost more than
    -- the rows (an ack carries few items).
    r_flags := NULL;
    r_committed := NULL;
    r_base := NULL;
    r_blob := NULL;
    IF v_fast THEN
        RETURN QUERY
        SELECT (u.ord - 1)::INT4,
               (CASE WHEN u.o IS NULL OR u.o > v_hi THEN 6 WHEN u.o > v_com THEN 1 ELSE 2 END)::INT2,
               CASE WHEN u.o > v_com AND u.o <= v_hi THEN u.o END,
               NULL::INT4, NULL::INT8, NULL::INT8, NULL::BYTEA
        FROM unnest(p_offsets) WITH ORDINALITY AS u(o, ord)
        ORDER BY u.ord;
    ELSE
        FOR i IN 1 .. v_n LOOP
            r_idx := i - 1;
            r_outcome := v_out[i];
            r_off := v_eff[i];
            RETURN NEXT;
        END LOOP;
    END IF;
    r_idx := -1;
    r_outcome := NULL;
    r_off := v_poff;
    r_flags := v_flags;
    r_committed := v_new;
    r_base := v_pbase;
    r_blob := v_pblob;
    RETURN NEXT;
END;
$$;

-- The type of queen.log_dlq.payload: 'bytea' on our table, 'jsonb' on one Queen
-- MQ laid down (its payloads are JSON documents). dlq_head_v1 stores raw bytes
-- in the first, JSON as JSON in the second.
CREATE OR REPLACE FUNCTION qn.dlq_payload_type()
RETURNS TEXT
LANGUAGE sql STABLE
AS $$
    SELECT format_type(a.atttypid, NULL)
    FROM pg_attribute a
    WHERE a.attrelid = 'queen.log_dlq'::regclass AND a.attname = 'payload'
      AND NOT a.attisdropped
$$;

-- ack_bundle_v1: see sql/API.md. The broker's bundled acks: several ack_v1
-- calls (one (partition, group, worker) each, from any calls and streams) in
-- one call and one transaction. Member k's items are the next p_counts[k] of
-- the flat item arrays. Members run one by one in ascending (partition id,
-- group) (invariant 5), then in the order given; each is exactly one ack_v1
-- (not strict), keyed on its own partition. r_member is the member's index
-- (0-based); every other column is ack_v1's.
CREATE OR REPLACE FUNCTION qn.ack_bundle_v1(
    p_pids     UUID[],
    p_groups   TEXT[],
    p_workers  TEXT[],
    p_counts   INT4[],
    p_hashes   BYTEA[],
    p_offsets  INT8[],
    p_statuses INT2[])
RETURNS TABLE (r_member INT4, r_idx INT4, r_outcome INT2, r_off INT8, r_flags INT4,
               r_committed INT8, r_base INT8, r_blob BYTEA)
LANGUAGE plpgsql
AS $$
DECLARE
    v_n     INT4 := coalesce(cardinality(p_pids), 0);
    v_start INT4[];
    v_total INT4 := 0;
    v_i     INT4;
    v_lo    INT4;
BEGIN
    IF coalesce(cardinality(p_groups), 0) <> v_n OR coalesce(cardinality(p_workers), 0) <> v_n
       OR coalesce(cardinality(p_counts), 0) <> v_n THEN
        RAISE EXCEPTION 'QACK bundle arrays differ in length' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_i IN 1 .. v_n LOOP
        IF p_pids[v_i] IS NULL OR coalesce(p_counts[v_i], 0) < 1 THEN
            RAISE EXCEPTION 'QACK bundle member % has no partition id or no item', v_i - 1
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_start[v_i] := v_total + 1;
        v_total := v_total + p_counts[v_i];
    END LOOP;
    IF coalesce(cardinality(p_hashes), 0) <> v_total OR coalesce(cardinality(p_offsets), 0) <> v_total
       OR coalesce(cardinality(p_statuses), 0) <> v_total THEN
        RAISE EXCEPTION 'QACK bundle item arrays do not match the counts'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR v_i IN SELECT o.i FROM unnest(p_pids, p_groups) WITH ORDINALITY AS o(pid, grp, i)
               ORDER BY o.pid, coalesce(nullif(o.grp, ''), '__QUEUE_MODE__'), o.i LOOP
        v_lo := v_start[v_i];
        RETURN QUERY
        SELECT v_i - 1, x.r_idx, x.r_outcome, x.r_off, x.r_flags, x.r_committed, x.r_base, x.r_blob
        FROM qn.ack_v1(p_pids[v_i], p_groups[v_i], p_workers[v_i],
                       p_hashes[v_lo:v_lo + p_counts[v_i] - 1],
                       p_offsets[v_lo:v_lo + p_counts[v_i] - 1],
                       p_statuses[v_lo:v_lo + p_counts[v_i] - 1], false) x;
    END LOOP;
END;
$$;

-- dlq_head_v1: files the dead letter and moves the cursor past it in one
-- transaction. The row must still carry the leased batch the hand-off kept
-- (batch_end set, p_off inside (committed, batch_end]) and, when p_worker is
-- given, that worker's live lease; otherwise r_ok = false and nothing is
-- written. So a second call for the same frame fails (the first released the
-- lease). committed = GREATEST(committed, p_off) is a guard: the cursor already
-- sits just below p_off, and a stale caller can never walk it backward.
-- On a JSONB dead-letter table (Queen MQ's) the payload must be UTF-8 JSON: it
-- is stored as JSON; anything else raises QDLQ ... (SQLSTATE 22P02) and writes
-- nothing (the lease stays, so the frame is redelivered, not lost).
CREATE OR REPLACE FUNCTION qn.dlq_head_v1(
    p_pid        UUID,
    p_group      TEXT,
    p_worker     TEXT,
    p_off        INT8,
    p_message_id UUID,
    p_txn        TEXT,
    p_payload    BYTEA,
    p_error      TEXT)
RETURNS TABLE (r_ok BOOL, r_id UUID)
LANGUAGE plpgsql
AS $$
DECLARE
    v_group TEXT := coalesce(nullif(p_group, ''), '__QUEUE_MODE__');
    v_com   INT8;
    v_bend  INT8;
    v_wid   TEXT;
    v_lexp  TIMESTAMPTZ;
    v_brc   INT4;
    v_id    UUID;
    v_json  JSONB;
BEGIN
    SELECT c.committed, c.batch_end, c.worker_id, c.lease_expires_at, c.batch_retry_count
    INTO v_com, v_bend, v_wid, v_lexp, v_brc
    FROM queen.log_consumers c
    WHERE c.partition_id = p_pid AND c.consumer_group = v_group
    FOR UPDATE;
    IF NOT FOUND OR v_bend IS NULL OR p_off IS NULL OR p_off <= v_com OR p_off > v_bend
       OR (coalesce(p_worker, '') <> ''
           AND (v_wid IS DISTINCT FROM p_worker OR v_lexp IS NULL OR v_lexp <= now())) THEN
        RETURN QUERY SELECT false, NULL::UUID;
        RETURN;
    END IF;
    IF qn.dlq_payload_type() = 'jsonb' THEN
        BEGIN
            v_json := convert_from(coalesce(p_payload, ''::BYTEA), 'UTF8')::JSONB;
        EXCEPTION WHEN others THEN    -- not UTF-8 (22021) or not JSON (22P02)
            RAISE EXCEPTION 'QDLQ the dead letter at offset % is not JSON, and this dead-letter table (laid down by Queen MQ) holds JSON payloads only',
                p_off USING ERRCODE = 'invalid_text_representation';
        END;
        -- dynamic: a static statement would bind p_payload's type to the column
        EXECUTE 'INSERT INTO queen.log_dlq (partition_id, consumer_group, "offset", message_id,
                                             transaction_id, payload, error, retry_count)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id'
            INTO v_id
            USING p_pid, v_group, p_off, p_message_id, p_txn, v_json,
                  coalesce(nullif(p_error, ''), 'Retries exhausted'), v_brc;
    ELSE
        INSERT INTO queen.log_dlq (partition_id, consumer_group, "offset", message_id,
                                   transaction_id, payload, error, retry_count)
        VALUES (p_pid, v_group, p_off, p_message_id, p_txn, p_payload,
                coalesce(nullif(p_error, ''), 'Retries exhausted'), v_brc)
        RETURNING id INTO v_id;
    END IF;
    UPDATE queen.log_consumers
    SET committed = greatest(committed, p_off),
        worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_end = NULL,
        batch_retry_count = 0, attempt_offset = NULL, attempt_count = 0,
        total_consumed = total_consumed + 1
    WHERE partition_id = p_pid AND consumer_group = v_group;
    RETURN QUERY SELECT true, v_id;
END;
$$;

-- renew_lease_v1: extends every still-live lease of the worker to
-- GREATEST(current, now + seconds); never shortens, never resurrects an expired
-- one. Rows are locked in consumer-row order (ascending partition, group) so a
-- renewal cannot deadlock against a transaction acking several partitions.
-- There is no index on worker_id (it would make every lease change non-HOT):
-- this scans log_consumers, which is acceptable for a per-batch, not per-message,
-- operation.
CREATE OR REPLACE FUNCTION qn.renew_lease_v1(p_worker TEXT, p_seconds INT4)
RETURNS TABLE (r_renewed INT4, r_expires_at TIMESTAMPTZ)
LANGUAGE plpgsql
AS $$
BEGIN
    -- PL/pgSQL, not SQL: a SQL function's statement is planned again at every
    -- call, this one's plan is cached for the session.
    WITH l AS (
        SELECT c.partition_id, c.consumer_group
        FROM queen.log_consumers c
        WHERE c.worker_id = p_worker AND c.lease_expires_at > now()
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE
    ), u AS (
        UPDATE queen.log_consumers c
        SET lease_expires_at = greatest(c.lease_expires_at,
                                        now() + make_interval(secs => greatest(coalesce(p_seconds, 60), 1)))
        FROM l
        WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
        RETURNING c.lease_expires_at
    )
    SELECT count(*)::INT4, min(u.lease_expires_at) INTO r_renewed, r_expires_at FROM u;
    RETURN NEXT;
END;
$$;

-- release_lease_v1: releases every live lease of the worker now; the cursor does
-- not move, so each batch redelivers at once (a Consume stream ended).
CREATE OR REPLACE FUNCTION qn.release_lease_v1(p_worker TEXT)
RETURNS INT4
LANGUAGE plpgsql
AS $$
DECLARE
    v_n INT4;
BEGIN
    WITH l AS (
        SELECT c.partition_id, c.consumer_group
        FROM queen.log_consumers c
        WHERE c.worker_id = p_worker AND c.lease_expires_at > now()
        ORDER BY c.partition_id, c.consumer_group
        FOR UPDATE
    ), u AS (
        UPDATE queen.log_consumers c
        SET worker_id = NULL, lease_expires_at = NULL, lease_acquired_at = NULL, batch_end = NULL
        FROM l
        WHERE c.partition_id = l.partition_id AND c.consumer_group = l.consumer_group
        RETURNING 1
    )
    SELECT count(*)::INT4 INTO v_n FROM u;
    RETURN v_n;
END;
$$;

-- check_leases_v1: inside a transaction, fails it unless every named worker
-- still holds at least one live lease.
CREATE OR REPLACE FUNCTION qn.check_leases_v1(p_workers TEXT[])
RETURNS VOID
LANGUAGE plpgsql
AS $$
DECLARE
    v_w TEXT;
BEGIN
    FOR v_w IN SELECT DISTINCT w FROM unnest(p_workers) AS w ORDER BY 1 LOOP
        IF v_w IS NULL OR NOT EXISTS (SELECT 1 FROM queen.log_consumers c
                                      WHERE c.worker_id = v_w AND c.lease_expires_at > now()) THEN
            RAISE EXCEPTION 'QTXN lease not held %', coalesce(v_w, '');
        END IF;
    END LOOP;
END;
$$;
