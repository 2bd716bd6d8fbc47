-- 007_log_fetch.sql - fetch_v1: read by offset, Kafka-like. No lease, no cursor,
-- nothing written (STABLE).
--
-- Per entry: one header row (r_base NULL) with the entry's error, high watermark
-- (last_offset + 1) and log_start, then its segment rows: a head probe (the
-- segment covering the offset, one backward primary-key step) and a forward walk,
-- gap tolerant like pop. Byte budgets use the same cost rule as pop:
-- zstd_content_size(blob) + p_msg_overhead x taken; a segment that does not fit
-- whole is taken partially, as many messages k as content size + k x overhead
-- allows (k of its messages are never larger than all of them), and ends the
-- entry; when that is none, the very first segment of the whole call is still
-- delivered (max(1, budget / (p_max_msg_bytes + p_msg_overhead)) messages, the
-- bound whatever the size skew; also for an unknown size), any other ends the
-- entry.
-- r_entry is the zero-based entry position. Errors: 0 none, 1 unknown partition,
-- 2 offset out of range (< log_start or > last_offset + 1; = last_offset + 1 is a
-- valid empty read). Budgets <= 0 mean unlimited.
-- (SET jit = off on the heavier procedures: see 003_log_push.sql.)
CREATE OR REPLACE FUNCTION qn.fetch_v1(
    p_queues        TEXT[],
    p_partitions    TEXT[],
    p_offsets       INT8[],
    p_max_bytes     INT8[],
    p_budget        INT8,
    p_max_records   INT4,
    p_msg_overhead  INT4,
    p_max_msg_bytes INT4,
    p_tenant        UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_entry INT4, r_error INT2, r_pid UUID, r_high INT8, r_log_start INT8,
               r_base INT8, r_start_idx INT4, r_take INT4, r_created_at TIMESTAMPTZ,
               r_blob BYTEA)
LANGUAGE plpgsql STABLE
SET jit = off
AS $$
DECLARE
    v_n     INT := coalesce(cardinality(p_queues), 0);
    v_call  INT8 := CASE WHEN coalesce(p_budget, 0) > 0 THEN p_budget END;
    v_recs  INT4 := CASE WHEN coalesce(p_max_records, 0) > 0 THEN p_max_records ELSE 2147483647 END;
    v_ovh   INT8 := greatest(coalesce(p_msg_overhead, 0), 0);
    v_unit  INT8 := greatest(coalesce(p_max_msg_bytes, 0)::INT8 + greatest(coalesce(p_msg_overhead, 0), 0), 1);
    v_first BOOL := true;
    v_pid   UUID;
    v_last  INT8;
    v_start INT8;
    v_off   INT8;
    v_ent   INT8;       -- entry byte budget left, NULL = unlimited
    v_left  INT4;       -- records left in the entry
    v_si    INT8;
    v_avail INT8;
    v_take  INT8;
    v_size  INT8;
    v_fit   INT8;
    v_cost  INT8;
    v_lim   INT8;
    v_stop  BOOL;
    s       RECORD;
BEGIN
    IF (p_partitions IS NOT NULL AND cardinality(p_partitions) <> v_n)
       OR coalesce(cardinality(p_offsets), 0) <> v_n
       OR (p_max_bytes IS NOT NULL AND cardinality(p_max_bytes) <> v_n) THEN
        RAISE EXCEPTION 'QFETCH misaligned arrays';
    END IF;
    FOR i IN 1 .. v_n LOOP
        SELECT p.id, p.last_offset, p.log_start INTO v_pid, v_last, v_start
        FROM queen.queues q
        JOIN queen.log_partitions p
          ON p.queue_id = q.id AND p.name = coalesce(nullif(p_partitions[i], ''), 'Default')
        WHERE q.tenant_id = p_tenant AND q.name = p_queues[i];
        IF NOT FOUND THEN
            RETURN QUERY SELECT (i - 1)::INT4, 1::INT2, NULL::UUID, NULL::INT8, NULL::INT8,
                                NULL::INT8, NULL::INT4, NULL::INT4, NULL::TIMESTAMPTZ, NULL::BYTEA;
            CONTINUE;
        END IF;
        v_off := p_offsets[i];
        IF v_off IS NULL OR v_off < v_start OR v_off > v_last + 1 THEN
            RETURN QUERY SELECT (i - 1)::INT4, 2::INT2, v_pid, v_last + 1, v_start,
                                NULL::INT8, NULL::INT4, NULL::INT4, NULL::TIMESTAMPTZ, NULL::BYTEA;
            CONTINUE;
        END IF;
        RETURN QUERY SELECT (i - 1)::INT4, 0::INT2, v_pid, v_last + 1, v_start,
                            NULL::INT8, NULL::INT4, NULL::INT4, NULL::TIMESTAMPTZ, NULL::BYTEA;
        CONTINUE WHEN v_off > v_last;
        CONTINUE WHEN v_call IS NOT NULL AND v_call <= 0 AND NOT v_first;
        v_ent := CASE WHEN coalesce(p_max_bytes[i], 0) > 0 THEN p_max_bytes[i] END;
        v_left := v_recs;
        FOR s IN
            SELECT x.base_offset, x.end_offset, x.created_at, x.blob
            FROM queen.log_segments x
            WHERE x.partition_id = v_pid
              AND x.base_offset >= coalesce(
                      (SELECT max(y.base_offset) FROM queen.log_segments y
                       WHERE y.partition_id = v_pid AND y.base_offset <= v_off),
                      v_off)
            ORDER BY x.base_offset
            LIMIT v_recs
        LOOP
            v_si := greatest(v_off - s.base_offset, 0);
            v_avail := s.end_offset - s.base_offset + 1 - v_si;
            CONTINUE WHEN v_avail <= 0;
            v_take := least(v_avail, v_left);
            v_stop := false;
            IF v_ent IS NOT NULL OR v_call IS NOT NULL THEN
                v_size := qn.zstd_content_size(s.blob);
                v_cost := v_size + v_ovh * v_take;
                v_lim := least(coalesce(v_ent, v_call), coalesce(v_call, v_ent));
                IF v_size IS NULL OR v_cost > v_lim THEN
                    -- as pop: k messages cost at most the whole content plus k
                    -- overheads; the call's first segment always goes
                    v_fit := CASE WHEN v_size IS NOT NULL AND v_ovh > 0
                                  THEN (v_lim - v_size) / v_ovh ELSE 0 END;
                    IF v_first AND v_fit < greatest(1, greatest(v_lim, 0) / v_unit) THEN
                        v_take := least(v_take, greatest(1, greatest(v_lim, 0) / v_unit));
                        v_cost := greatest(v_lim, 0);
                    ELSIF v_fit >= 1 THEN
                        v_take := least(v_take, v_fit);
                        v_cost := v_size + v_ovh * v_take;
                    ELSE
                        EXIT;
                    END IF;
                    v_stop := true;
                END IF;
                v_ent := v_ent - v_cost;
                v_call := v_call - v_cost;
            END IF;
            r_entry := i - 1;
            r_error := 0;
            r_pid := v_pid;
            r_high := v_last + 1;
            r_log_start := v_start;
            r_base := s.base_offset;
            r_start_idx := v_si;
            r_take := v_take;
            r_created_at := s.created_at;
            r_blob := s.blob;
            RETURN NEXT;
            v_first := false;
            v_left := v_left - v_take;
            EXIT WHEN v_stop OR v_left <= 0 OR v_ent <= 0 OR v_call <= 0;
        END LOOP;
    END LOOP;
END;
$$;
