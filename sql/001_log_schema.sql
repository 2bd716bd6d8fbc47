-- 001_log_schema.sql - the log tables and their two pure helpers.
--
-- The storage model (seeds/000): a message's address is one BIGINT offset,
-- monotone within its partition. Messages are packed into segments, one
-- log_segments row holding many frames compressed together with zstd and covering
-- an inclusive range [base_offset, end_offset]; a partition's ranges are disjoint
-- and allocated in ascending order. A consumer group's progress in a partition is
-- one integer (log_consumers.committed).
--
-- Invariants every procedure relies on:
--   1. Ranges are disjoint and allocated monotonically: the allocator UPDATE of
--      log_partitions.last_offset runs under that row's lock; a rolled-back push
--      rolls the bump back, so there are no holes in steady state.
--   2. created_at is monotone per partition in commit order: it is stamped with
--      clock_timestamp() after the row lock is held.
--   3. log_start is the first live segment's base_offset, or last_offset + 1 when
--      the partition holds no segment: retention deletes only a contiguous prefix
--      of whole segments and sets log_start to the last deleted end_offset + 1.
--   4. Offsets are not dense: retention leaves a gap below log_start, and every
--      reader takes the next segment whose base is greater.
--
-- Applied at every start in one transaction; every statement is idempotent
-- (IF NOT EXISTS, the guarded ensure_* helpers of 000_schema.sql, storage
-- parameters re-applied by ALTER TABLE ... SET, CREATE OR REPLACE FUNCTION).

-- ---------------------------------------------------------------------------
-- log_partitions: one row per partition, and that row is the partition's write
-- serializer (push allocator, retention steps, cleanup all lock it).
CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id             UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    queue_id       UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    name           TEXT NOT NULL DEFAULT 'Default',
    -- allocator: the next segment's base is last_offset + 1
    last_offset    BIGINT NOT NULL DEFAULT -1,
    -- first live segment's base, or last_offset + 1 when empty (invariant 3)
    log_start      BIGINT NOT NULL DEFAULT 0,
    -- log_txns purge watermark: sidecar rows below it are gone
    txns_start     BIGINT NOT NULL DEFAULT 0,
    -- quantized to 1 s steps by push (the column is indexed; see push_v1)
    last_write_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT log_partitions_queue_name_uk UNIQUE (queue_id, name)
);
-- The retention work-list: created_at of the row at log_start (resp. txns_start),
-- NULL when there is none. A fact, never a policy: cutoffs are computed from the
-- queue's configuration at query time. Moved in the same transaction, under the
-- same row lock, as the watermark it mirrors; push only fills them on the
-- empty-to-non-empty transition (COALESCE) so its UPDATE stays HOT.
SELECT qn.ensure_column('log_partitions', 'oldest_live_at', 'TIMESTAMPTZ');
SELECT qn.ensure_column('log_partitions', 'oldest_txn_at', 'TIMESTAMPTZ');

-- Lets a wildcard pop range-scan only recently written partitions instead of the
-- whole set. Because it exists, push bumps last_write_at only when it is more than
-- a second old (otherwise every allocator UPDATE would be non-HOT); the candidate
-- scan absorbs the staleness with two minutes of slack.
SELECT qn.ensure_index('idx_log_partitions_queue_write', $ddl$
    CREATE INDEX idx_log_partitions_queue_write
    ON queen.log_partitions (queue_id, last_write_at)$ddl$);

-- The any-partition pop's index of partitions with data (DESIGN.md, Scale): a
-- row while the partition may hold messages some consumer group has not
-- consumed. Push inserts it (ON CONFLICT DO NOTHING: an index probe, no write
-- when present) in the statement that allocates, under the partition's row
-- lock; a pop deletes it (qn.pending_clear) under the same lock once every group
-- of the queue has consumed the partition's last offset. pop_v1 reads it from a
-- random point instead of scanning every partition of the queue. In schema qn:
-- Queen MQ's tables stay as its SQL laid them down, and partitions its own
-- procedures write are found by pop_v1's fallback scan. No foreign key (no
-- trigger on the push path): delete_queue_v1 and partition cleanup delete its
-- rows, and pending_clear drops a row whose partition is gone.
-- Made once, with every partition that holds data at that moment (a database
-- written before the index existed), so none waits for the fallback scan.
DO $$
BEGIN
    IF to_regclass('qn.partition_pending') IS NULL THEN
        CREATE TABLE qn.partition_pending (
            queue_id     UUID NOT NULL,
            partition_id UUID NOT NULL,
            -- the row's place in the queue's pop order, drawn at random when it
            -- is made: pop_v1 reads from a random point of (queue_id, ord), so
            -- every row has a fair chance whatever the partition ids look like
            ord          INT4 NOT NULL DEFAULT (floor(random() * 2147483647))::INT4,
            PRIMARY KEY (queue_id, partition_id)
        );
        CREATE INDEX partition_pending_ord ON qn.partition_pending (queue_id, ord);
        INSERT INTO qn.partition_pending (queue_id, partition_id)
        SELECT p.queue_id, p.id FROM queen.log_partitions p WHERE p.last_offset >= p.log_start;
    END IF;
END;
$$;

-- The any-partition pop's fallback sweep (DESIGN.md, Scale): where a (queue,
-- group)'s bounded walk over the queue's partitions by name stands when a pass
-- takes more than one pop. pop_v1 examines at most one chunk of partitions per
-- pop that found nothing in qn.partition_pending, from pos onwards; a pass
-- that wraps around having seen nothing pending (leases ignored) moves the
-- group's empty-scan floor to the pass's start. No row: the next pass starts
-- from the first name. A single-chunk queue never writes one.
CREATE TABLE IF NOT EXISTS qn.scan_sweep (
    queue_id       UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
    consumer_group TEXT NOT NULL,
    -- the last partition name examined in this pass ('' before the first)
    pos            TEXT NOT NULL,
    -- when this pass began: the floor it may set
    pass_at        TIMESTAMPTZ NOT NULL,
    -- a partition with something pending was seen in this pass
    dirty          BOOL NOT NULL,
    PRIMARY KEY (queue_id, consumer_group)
);

-- Where partition cleanup's walk over log_partitions (by id) stands between
-- maintenance cycles: each cycle examines one bounded window of ids after pos
-- (NULL: from the first), so a cycle's cost does not grow with the partition
-- count. One row at most.
CREATE TABLE IF NOT EXISTS qn.cleanup_sweep (
    one BOOL PRIMARY KEY DEFAULT true CHECK (one),
    pos UUID
);

-- The per-queue figures the metrics refresh reports (stats_step_v1): a walk
-- over log_partitions by id, one bounded window per call, adds each window's
-- sums into qn.stats_acc; the call that ends a pass replaces qn.stats_snap
-- with them. So a refresh costs one window whatever the partition count (a
-- whole-table aggregate per refresh ran 9-15 s at 1,000,000 partitions), and
-- the figures are those of the last whole pass. consumer_group '' is the
-- queue's own row; any other is that group's lag on the queue.
-- Queues being deleted in steps (delete_queue_step_v1). The first step moves
-- the queue row to the reserved tenant 00000000-0000-0000-0000-00000000dead
-- under its id as name, so no name lookup (push, pop, admin, listings) and no
-- id-keyed call of its tenant finds it any more; each later step deletes a
-- bounded number of its rows and commits; the maintenance cycle finishes what
-- an interrupted call left. The original tenant and name are kept here.
CREATE TABLE IF NOT EXISTS qn.queue_deleting (
    queue_id   UUID PRIMARY KEY,
    tenant_id  UUID NOT NULL,
    name       TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
DO $$
BEGIN
    IF to_regclass('qn.queue_deleting_name') IS NULL THEN
        CREATE INDEX queue_deleting_name ON qn.queue_deleting (tenant_id, name);
    END IF;
END;
$$;

-- Where the sidecar work list (maint_worklist_v1 phase 2) stands in its walk
-- over the queues by id: each call probes one window of queues, the next call
-- the next window. No row, or pos NULL: from the first queue.
CREATE TABLE IF NOT EXISTS qn.sidecar_sweep (
    one BOOL PRIMARY KEY DEFAULT true CHECK (one),
    pos UUID                        -- the last queue id of the previous window
);

CREATE TABLE IF NOT EXISTS qn.stats_sweep (
    one     BOOL PRIMARY KEY DEFAULT true CHECK (one),
    pos     UUID,                   -- the last partition id added to stats_acc
    pass_at TIMESTAMPTZ NOT NULL    -- when this pass began
);
CREATE TABLE IF NOT EXISTS qn.stats_acc (
    queue_id       UUID NOT NULL,
    consumer_group TEXT NOT NULL,
    parts          INT8 NOT NULL,
    msgs           INT8 NOT NULL,
    pending        INT8 NOT NULL,
    dead           INT8 NOT NULL,
    lag            INT8 NOT NULL,
    PRIMARY KEY (queue_id, consumer_group)
);
CREATE TABLE IF NOT EXISTS qn.stats_snap (
    queue_id       UUID NOT NULL,
    consumer_group TEXT NOT NULL,
    parts          INT8 NOT NULL,
    msgs           INT8 NOT NULL,
    pending        INT8 NOT NULL,
    dead           INT8 NOT NULL,
    lag            INT8 NOT NULL,
    taken_at       TIMESTAMPTZ NOT NULL,   -- the pass's start
    PRIMARY KEY (queue_id, consumer_group)
);

-- Tuned against churn. Every push updates its partition's row, so between
-- autovacuum passes dead tuples dwarf the live row count:
--   fillfactor 70              leaves room on the page for HOT updates;
--   scale_factor 0 with threshold 500
--                              triggers vacuum on a dead-tuple count, not on a
--                              fraction of a table whose population is fixed, so
--                              it keeps re-firing under churn;
--   cost_delay 0               each pass finishes fast instead of sleeping;
--   vacuum_truncate off        heap truncation takes an ACCESS EXCLUSIVE lock,
--                              reclaims nothing on a fixed population and froze
--                              every push and pop behind it for seconds: turning
--                              it off removed a whole class of periodic spikes.
-- Do not strip these in a tuning pass.
ALTER TABLE queen.log_partitions SET (
    fillfactor = 70,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = off
);

-- ---------------------------------------------------------------------------
-- log_segments: the messages. Zero secondary indexes, on purpose: the primary key
-- is also the pop path (range scans and backward steps), and every extra index
-- would be paid by every push.
CREATE TABLE IF NOT EXISTS queen.log_segments (
    partition_id UUID NOT NULL REFERENCES queen.log_partitions (id) ON DELETE CASCADE,
    base_offset  BIGINT NOT NULL,
    end_offset   BIGINT NOT NULL,   -- inclusive; frames = end - base + 1
    created_at   TIMESTAMPTZ NOT NULL,
    blob         BYTEA NOT NULL,    -- length-prefixed frames, zstd-compressed by the broker
    PRIMARY KEY (partition_id, base_offset)
);
-- The broker already compressed the bytes: EXTERNAL stops TOAST from spending CPU
-- trying again, and keeps an out-of-line value uncompressed so that
-- substring(blob, 1, 18) (zstd_content_size) fetches one chunk, not the value.
SELECT qn.ensure_storage('log_segments', 'blob', 'e');
-- Set by measurement at 1M msg/s (reference broker, 2026-08): factors 0.02 /
-- 0.05 re-fired vacuum about every 13 s, and each pass over the growing heap and
-- its TOAST table competed for I/O exactly when there was no headroom left (a
-- hiccup at 800k msg/s, a stall at 900k, collapse at 1M). At 0.1 / 0.3 vacuum
-- still keeps pace with retention churn (the heap plateaus through slot reuse,
-- verified over 300 s with retention sweeping every 5 s); cost_limit 4000 and
-- cost_delay 0 make each pass finish fast. The blob bytes live in the TOAST table,
-- so the same four values are set with the toast. prefix: tuning only the heap
-- would leave the larger half of the write volume on the stock cadence.
ALTER TABLE queen.log_segments SET (
    autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3,
    autovacuum_vacuum_cost_limit = 4000,
    autovacuum_vacuum_cost_delay = 0,
    toast.autovacuum_vacuum_scale_factor = 0.1,
    toast.autovacuum_vacuum_insert_scale_factor = 0.3,
    toast.autovacuum_vacuum_cost_limit = 4000,
    toast.autovacuum_vacuum_cost_delay = 0
);

-- ---------------------------------------------------------------------------
-- log_txns: the hash sidecar, one row per segment mirroring its range, 16 bytes
-- per frame (xxh3_128 of the transaction id, big-endian, frame order). SQL never
-- hashes; it stores and compares bytea. Written by every push whatever the dedup
-- window, because ack by transaction id resolves through it; purged on its own
-- clock (GREATEST(window, completed retention, 900 s)), so its size is
-- O(rate x window).
--
-- No foreign key on purpose: the purge path must never pay foreign-key trigger
-- cost, and rows are only reached through a live partition. The obligation that
-- leaves: whatever deletes a partition deletes these rows itself first
-- (partition_cleanup_step_v1 and delete_queue_v1 do).
CREATE TABLE IF NOT EXISTS queen.log_txns (
    partition_id UUID NOT NULL,
    base_offset  BIGINT NOT NULL,
    end_offset   BIGINT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,   -- the segment's stamp
    hashes       BYTEA NOT NULL,         -- 16 x frames bytes
    PRIMARY KEY (partition_id, base_offset)
);
-- 128-bit hashes are incompressible: EXTERNAL skips the futile compression
-- attempt on large rows.
SELECT qn.ensure_storage('log_txns', 'hashes', 'e');
-- Same insert-heavy, prefix-deleted shape as log_segments, same reasoning.
ALTER TABLE queen.log_txns SET (
    autovacuum_vacuum_scale_factor = 0.1,
    autovacuum_vacuum_insert_scale_factor = 0.3,
    autovacuum_vacuum_cost_delay = 0
);

-- ---------------------------------------------------------------------------
-- log_consumers: the entire consumption model, one row per (partition, group).
-- A leased batch is the span (committed, batch_end]; one row holds at most one
-- lease, so exactly one leased batch is in flight per (partition, group).
CREATE TABLE IF NOT EXISTS queen.log_consumers (
    partition_id      UUID NOT NULL REFERENCES queen.log_partitions (id) ON DELETE CASCADE,
    consumer_group    TEXT NOT NULL DEFAULT '__QUEUE_MODE__',
    committed         BIGINT NOT NULL DEFAULT -1,   -- last acked; next wanted = committed + 1
    batch_end         BIGINT,                       -- inclusive end of the leased batch; NULL = none
    worker_id         TEXT,                         -- lease holder (= lease id)
    lease_expires_at  TIMESTAMPTZ,
    lease_acquired_at TIMESTAMPTZ,
    -- retry budget spent by explicit FAILED acks only
    batch_retry_count INTEGER NOT NULL DEFAULT 0,
    -- redelivery telemetry: lease expiry increments it, never the budget, so a
    -- consumer crash cannot eat the budget an explicit failure is entitled to
    attempt_offset    BIGINT,
    attempt_count     INTEGER NOT NULL DEFAULT 0,
    total_consumed    BIGINT NOT NULL DEFAULT 0,
    lease_conflated   BOOLEAN NOT NULL DEFAULT false,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_id, consumer_group)
);
-- Every pop and ack updates a row here: the same churn and exclusive-lock reasons
-- as log_partitions; fillfactor 50 because the rows are updated even more often
-- (lease set, lease cleared, cursor moved) and every update should stay HOT.
-- No index on worker_id for the same reason: it would make every lease change
-- non-HOT; renew/release by worker scan the table instead (rare operations).
ALTER TABLE queen.log_consumers SET (
    fillfactor = 50,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0,
    vacuum_truncate = off
);

-- ---------------------------------------------------------------------------
-- log_dlq: the one table with a row per message. The payload is a snapshot, not a
-- pointer, and there is no foreign key: a dead letter survives the retention that
-- deletes its source segment, and partition cleanup refuses to reclaim a
-- partition that still holds one. delete_queue_v1 deletes these rows itself.
-- Nothing removes a row on a timer.
CREATE TABLE IF NOT EXISTS queen.log_dlq (
    id             UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    partition_id   UUID NOT NULL,
    consumer_group TEXT NOT NULL,
    "offset"       BIGINT NOT NULL,
    message_id     UUID,
    transaction_id TEXT,
    payload        BYTEA,          -- opaque bytes as the producer sent them
    error          TEXT,
    retry_count    INTEGER NOT NULL DEFAULT 0,   -- batch_retry_count when filed
    failed_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- What the DLQ browse and depth queries scan.
SELECT qn.ensure_index('idx_log_dlq_partition_failed_at', $ddl$
    CREATE INDEX idx_log_dlq_partition_failed_at
    ON queen.log_dlq (partition_id, failed_at DESC)$ddl$);

-- ---------------------------------------------------------------------------
-- Explodes a 16-byte-stride blob into (idx, hash) rows, idx zero-based; trailing
-- partial bytes are ignored. Plain SQL, IMMUTABLE, not STRICT, one SELECT: so the
-- planner inlines it into the calling query (push probe, ack by hash).
-- The OFFSET 0 subquery detoasts the argument once (p || '' copies it) instead of
-- once per 16-byte slice: an out-of-line value would otherwise be fetched again
-- for every substring.
CREATE OR REPLACE FUNCTION qn.log_unnest_hashes(p BYTEA)
RETURNS TABLE (idx INT, h BYTEA)
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT g, substring(d.v FROM g * 16 + 1 FOR 16)
    FROM (SELECT p || ''::bytea AS v OFFSET 0) d,
         generate_series(0, octet_length(d.v) / 16 - 1) AS g
$$;

-- The decompressed size a zstd frame header records (RFC 8878 section 3.1.1.1),
-- or NULL when the header does not record it or is not a zstd frame header.
-- Pop and fetch budget bytes with it without decompressing. Reads only the first
-- 18 bytes (4 magic + 1 descriptor + 1 window + 4 dictionary id + 8 size), which
-- with STORAGE EXTERNAL is one TOAST chunk.
--   Magic_Number           0xFD2FB528 little-endian: 28 B5 2F FD
--   Frame_Header_Descriptor bits 7-6 Frame_Content_Size_flag, bit 5
--                          Single_Segment_flag, bit 3 reserved (must be 0),
--                          bits 1-0 Dictionary_ID_flag
--   Window_Descriptor      1 byte, present unless Single_Segment_flag
--   Dictionary_ID          0, 1, 2 or 4 bytes per Dictionary_ID_flag
--   Frame_Content_Size     flag 0: 1 byte if Single_Segment_flag else absent;
--                          1: 2 bytes (value + 256); 2: 4 bytes; 3: 8 bytes;
--                          little-endian
CREATE OR REPLACE FUNCTION qn.zstd_content_size(p_blob BYTEA)
RETURNS INT8
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
DECLARE
    v_h      BYTEA := substring(p_blob FROM 1 FOR 18);
    v_n      INT := octet_length(v_h);
    v_fhd    INT;
    v_single BOOLEAN;
    v_pos    INT;
    v_size   INT;
    v_val    INT8 := 0;
BEGIN
    IF v_n < 6 OR get_byte(v_h, 0) <> 40 OR get_byte(v_h, 1) <> 181
       OR get_byte(v_h, 2) <> 47 OR get_byte(v_h, 3) <> 253 THEN
        RETURN NULL;
    END IF;
    v_fhd := get_byte(v_h, 4);
    IF (v_fhd & 8) <> 0 THEN
        RETURN NULL;   -- reserved bit set: not a frame we can trust
    END IF;
    v_single := (v_fhd & 32) <> 0;
    v_pos := 5 + CASE WHEN v_single THEN 0 ELSE 1 END
               + CASE v_fhd & 3 WHEN 0 THEN 0 WHEN 1 THEN 1 WHEN 2 THEN 2 ELSE 4 END;
    v_size := CASE v_fhd >> 6
                  WHEN 0 THEN CASE WHEN v_single THEN 1 ELSE 0 END
                  WHEN 1 THEN 2
                  WHEN 2 THEN 4
                  ELSE 8
              END;
    IF v_size = 0 OR v_n < v_pos + v_size THEN
        RETURN NULL;
    END IF;
    IF v_size = 8 AND get_byte(v_h, v_pos + 7) >= 128 THEN
        RETURN NULL;   -- beyond INT8; no real segment is that large
    END IF;
    FOR i IN REVERSE v_size - 1 .. 0 LOOP
        v_val := v_val * 256 + get_byte(v_h, v_pos + i);
    END LOOP;
    IF v_size = 2 THEN
        v_val := v_val + 256;
    END IF;
    RETURN v_val;
END;
$$;

-- Namespace and task of a queue created without explicit ones: the first and
-- second dot-separated parts of its name ("ns.task.rest"); '' when absent.
CREATE OR REPLACE FUNCTION qn.name_namespace(p_name TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT split_part(p_name, '.', 1) $$;

CREATE OR REPLACE FUNCTION qn.name_task(p_name TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT split_part(p_name, '.', 2) $$;
