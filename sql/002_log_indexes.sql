-- queen:no-transaction
--
-- 002_log_indexes.sql - the two partial indexes that make retention's cost follow
-- deletable work instead of the partition count: "this partition holds something
-- deletable under cutoff C" is exactly "its oldest_live_at (oldest_txn_at) is
-- older than C" (created_at is monotone per partition), so maint_worklist_v1 does
-- one range scan per queue instead of one probe per partition.
--
-- Built CONCURRENTLY because they arrive on an already populated, hot table: a
-- plain CREATE INDEX would block every push for the duration of the build. That
-- is why this file runs outside a transaction, statement by statement (each
-- statement ends with a semicolon at the end of a line, no function bodies here).
-- An interrupted build leaves an INVALID index, which qn_migrate drops before the
-- files are applied, so IF NOT EXISTS builds it again.
--
-- lock_timeout is disabled for the builds: a concurrent build waits for older
-- transactions by design, and timing out halfway would only leave an INVALID
-- index behind.
SET lock_timeout = 0;

CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_queue_oldest
    ON queen.log_partitions (queue_id, oldest_live_at)
    WHERE oldest_live_at IS NOT NULL;

CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_log_partitions_queue_oldest_txn
    ON queen.log_partitions (queue_id, oldest_txn_at)
    WHERE oldest_txn_at IS NOT NULL;

RESET lock_timeout;
