/*
 * stmts.c - the table of every statement the store prepares: its SQL text and
 * parameter types, its lane, whether it may write, and the decoder of its result,
 * in one place, so that sql/API.md and the C side can be compared at a glance.
 *
 * Rules:
 *   1. Set-returning procedures are selected with their result columns named, in
 *      the order the decoders read them: a column added to a procedure later does
 *      not move anything.
 *   2. Parameter types are declared here, so every binary parameter is received
 *      as exactly that type (no inference on the server).
 *   3. Every procedure that takes p_tenant gets it explicitly (never the default).
 *   4. Every procedure is called schema-qualified in schema qn (ours alone, so it
 *      never collides with Queen MQ's procedures in schema queen); tables are
 *      named in schema queen, where the storage model puts them.
 *   5. writes is true for every statement that can change the database (a lost
 *      outcome is then QN_EINDOUBT, store.h); lane is WRITE for the calls a push
 *      or an ack waits on, READ for everything else (bulk reads, admin).
 */
#include "store_int.h"

#define T QN_OID_TEXT
#define TA QN_OID_TEXT_ARR
#define I2A QN_OID_INT2_ARR
#define I4 QN_OID_INT4
#define I4A QN_OID_INT4_ARR
#define I8 QN_OID_INT8
#define I8A QN_OID_INT8_ARR
#define B QN_OID_BOOL
#define BY QN_OID_BYTEA
#define BYA QN_OID_BYTEA_ARR
#define U QN_OID_UUID
#define TS QN_OID_TIMESTAMPTZ
#define J QN_OID_JSONB

#define QUEUE_COLS                                                                                 \
    "r_id, r_name, r_namespace, r_task, r_created_at, r_priority, r_lease_time, "                  \
    "r_retry_limit, r_retry_delay, r_max_size, r_ttl, r_dead_letter_queue, "                       \
    "r_dlq_after_max_retries, r_delayed_processing, r_window_buffer, r_retention_seconds, "        \
    "r_completed_retention_seconds, r_retention_enabled, r_encryption_enabled, "                   \
    "r_max_wait_time_seconds, r_min_pop_wait_time, r_dedup_window_seconds, r_partitions, "         \
    "r_segments, r_messages"

#define DLQ_COLS                                                                                   \
    "r_id, r_queue, r_partition, r_pid, r_group, r_offset, r_message_id, r_txn, r_payload, "       \
    "r_error, r_retry_count, r_failed_at"

#define POP_COLS                                                                                   \
    "r_queue, r_partition, r_pid, r_base, r_start_idx, r_take, r_created_at, r_blob, "             \
    "r_lease_expires_at"

const struct qn__stmt qn__stmts[QN_STMT_COUNT] = {
    [QN_STMT_PUSH] = {"qn_push",
                      "SELECT r_ord, r_pid, r_window, r_status, r_base, r_created_at, "
                      "r_dup_idx, r_dup_off FROM qn.push_v1($1, $2, $3, $4, $5, $6, $7, $8, "
                      "$9, $10, $11)",
                      11,
                      {TA, TA, I4A, BYA, I8A, BYA, B, U, I4A, QN_OID_UUID_ARR, B},
                      QN__LANE_WRITE,
                      true,
                      qn__decode_push},
    [QN_STMT_PUSH_ONE] = {"qn_push_one",
                          "SELECT r_pid, r_window, r_status, r_base, r_created_at, r_dup_idx, "
                          "r_dup_off FROM qn.push_one_v1($1, $2, $3, $4, $5, $6, $7, $8, $9, "
                          "$10, $11)",
                          11,
                          {U, I4, BY, I8, BY, B, I4, B, T, T, U},
                          QN__LANE_WRITE,
                          true,
                          qn__decode_push_one},
    [QN_STMT_SEGMENT_AT] = {"qn_segment_at",
                            "SELECT r_base, r_end, r_created_at, r_blob "
                            "FROM qn.segment_at_v1($1, $2)",
                            2,
                            {U, I8A},
                            QN__LANE_WRITE,
                            false,
                            qn__decode_segments},
    [QN_STMT_POP] = {"qn_pop",
                     "SELECT " POP_COLS " FROM qn.pop_v1($1, $2, $3, $4, $5, $6, $7, $8, "
                     "$9, $10, $11, $12, $13, $14)",
                     14,
                     {T, T, T, I4, I8, I4, I4, I4, T, B, I4, T, TS, U},
                     QN__LANE_READ,
                     true,
                     qn__decode_pop},
    [QN_STMT_POP_DISCOVER] = {"qn_pop_discover",
                              "SELECT " POP_COLS " FROM qn.pop_discover_v1($1, $2, $3, $4, "
                              "$5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)",
                              16,
                              {T, T, T, I4, I8, I4, I4, I4, T, B, I4, T, TS, U, TA, TA},
                              QN__LANE_READ,
                              true,
                              qn__decode_pop},
    [QN_STMT_POP_ONE] = {"qn_pop_one",
                         "SELECT " POP_COLS " FROM qn.pop_one_v1($1, $2, $3, $4, $5, $6, $7, "
                         "$8, $9, $10, $11, $12, $13, $14)",
                         14,
                         {U, T, T, T, I4, I8, I4, I4, I4, T, B, T, TS, U},
                         QN__LANE_READ,
                         true,
                         qn__decode_pop},
    [QN_STMT_POP_BUNDLE] = {"qn_pop_bundle",
                            "SELECT r_member, " POP_COLS " FROM qn.pop_bundle_v1($1, $2, $3, "
                            "$4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                            13,
                            {QN_OID_UUID_ARR, TA, TA, TA, I4A, I8A, I4A, I4A, I4A, TA, TA, I8A, U},
                            QN__LANE_READ,
                            true,
                            qn__decode_pop_bundle},
    [QN_STMT_HAS_PENDING] = {"qn_has_pending",
                             "SELECT qn.has_pending_v1($1, $2, $3, $4)",
                             4,
                             {T, T, T, U},
                             QN__LANE_READ,
                             false,
                             qn__decode_scalar_bool},
    [QN_STMT_POP_GATE] = {"qn_pop_gate",
                          "SELECT r_pending, r_min_wait FROM qn.pop_gate_v1($1, $2, $3, $4)",
                          4,
                          {T, T, T, U},
                          QN__LANE_READ,
                          false,
                          qn__decode_pop_gate},
    [QN_STMT_ACK] = {"qn_ack",
                     "SELECT r_idx, r_outcome, r_off, r_flags, r_committed, r_base, r_blob "
                     "FROM qn.ack_v1($1, $2, $3, $4, $5, $6, $7)",
                     7,
                     {U, T, T, BYA, I8A, I2A, B},
                     QN__LANE_WRITE,
                     true,
                     qn__decode_ack},
    [QN_STMT_ACK_BUNDLE] = {"qn_ack_bundle",
                            "SELECT r_member, r_idx, r_outcome, r_off, r_flags, r_committed, "
                            "r_base, r_blob FROM qn.ack_bundle_v1($1, $2, $3, $4, $5, $6, $7)",
                            7,
                            {QN_OID_UUID_ARR, TA, TA, I4A, BYA, I8A, I2A},
                            QN__LANE_WRITE,
                            true,
                            qn__decode_ack_bundle},
    [QN_STMT_DLQ_HEAD] = {"qn_dlq_head",
                          "SELECT r_ok, r_id FROM qn.dlq_head_v1($1, $2, $3, $4, $5, $6, "
                          "$7, $8)",
                          8,
                          {U, T, T, I8, U, T, BY, T},
                          QN__LANE_WRITE,
                          true,
                          qn__decode_dlq_head},
    [QN_STMT_RENEW] = {"qn_renew",
                       "SELECT r_renewed, r_expires_at FROM qn.renew_lease_v1($1, $2)",
                       2,
                       {T, I4},
                       QN__LANE_WRITE,
                       true,
                       qn__decode_renew},
    [QN_STMT_RELEASE] = {"qn_release",
                         "SELECT qn.release_lease_v1($1)",
                         1,
                         {T},
                         QN__LANE_WRITE,
                         true,
                         qn__decode_scalar_int},
    [QN_STMT_CHECK_LEASES] = {"qn_check_leases",
                              "SELECT qn.check_leases_v1($1)",
                              1,
                              {TA},
                              QN__LANE_WRITE,
                              false,
                              qn__decode_void},
    [QN_STMT_FETCH] = {"qn_fetch",
                       "SELECT r_entry, r_error, r_pid, r_high, r_log_start, r_base, "
                       "r_start_idx, r_take, r_created_at, r_blob "
                       "FROM qn.fetch_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                       9,
                       {TA, TA, I8A, I8A, I8, I4, I4, I4, U},
                       QN__LANE_READ,
                       false,
                       qn__decode_fetch},
    [QN_STMT_CONFIGURE_QUEUE] = {"qn_configure_queue",
                                 "SELECT r_created, " QUEUE_COLS
                                 " FROM qn.configure_queue_v1($1, $2, $3, $4)",
                                 4,
                                 {T, J, B, U},
                                 QN__LANE_READ,
                                 true,
                                 qn__decode_configure},
    [QN_STMT_GET_QUEUE] = {"qn_get_queue",
                           "SELECT " QUEUE_COLS " FROM qn.get_queue_v1($1, $2)",
                           2,
                           {T, U},
                           QN__LANE_READ,
                           false,
                           qn__decode_queues},
    [QN_STMT_QUEUE_ENCRYPTED] = {"qn_queue_encrypted",
                                 "SELECT qn.queue_encrypted_v1($1, $2)",
                                 2,
                                 {T, U},
                                 QN__LANE_READ,
                                 false,
                                 qn__decode_scalar_bool},
    [QN_STMT_LIST_QUEUES] = {"qn_list_queues",
                             "SELECT " QUEUE_COLS
                             " FROM qn.list_queues_v1($1, $2, $3, $4, $5, $6, $7)",
                             7,
                             {T, T, I4, I4, U, TA, TA},
                             QN__LANE_READ,
                             false,
                             qn__decode_queues},
    [QN_STMT_QUEUE_PARTITIONS] = {"qn_queue_partitions",
                                  "SELECT r_partition, r_pid, r_last_offset, r_log_start, "
                                  "r_committed, r_depth, r_leased, r_last_write_at "
                                  "FROM qn.queue_partitions_v1($1, $2, $3)",
                                  3,
                                  {T, T, U},
                                  QN__LANE_READ,
                                  false,
                                  qn__decode_partitions},
    [QN_STMT_DELETE_QUEUE] = {"qn_delete_queue",
                              "SELECT qn.delete_queue_v1($1, $2)",
                              2,
                              {T, U},
                              QN__LANE_READ,
                              true,
                              qn__decode_scalar_bool},
    [QN_STMT_LIST_GROUPS] = {"qn_list_groups",
                             "SELECT r_group, r_queue, r_sub_mode, r_sub_from, r_partition, "
                             "r_pid, r_committed, r_last_offset, r_lag, r_time_lag_seconds, "
                             "r_leased, r_worker, r_total_consumed, r_retry_count, "
                             "r_attempt_count FROM qn.list_consumer_groups_v1($1, $2, $3)",
                             3,
                             {T, T, U},
                             QN__LANE_READ,
                             false,
                             qn__decode_groups},
    [QN_STMT_SEEK_GROUP] = {"qn_seek_group",
                            "SELECT qn.seek_consumer_group_v1($1, $2, $3, $4, $5, $6)",
                            6,
                            {T, T, T, B, TS, U},
                            QN__LANE_READ,
                            true,
                            qn__decode_scalar_int},
    [QN_STMT_DELETE_GROUP] = {"qn_delete_group",
                              "SELECT qn.delete_consumer_group_v1($1, $2, $3, $4)",
                              4,
                              {T, T, B, U},
                              QN__LANE_READ,
                              true,
                              qn__decode_scalar_int},
    [QN_STMT_LIST_DLQ] = {"qn_list_dlq",
                          "SELECT " DLQ_COLS " FROM qn.list_dlq_v1($1, $2, $3, $4, $5, $6, $7, $8)",
                          8,
                          {T, T, T, I4, I4, U, TA, TA},
                          QN__LANE_READ,
                          false,
                          qn__decode_dlq},
    [QN_STMT_GET_DLQ] = {"qn_get_dlq",
                         "SELECT " DLQ_COLS " FROM qn.get_dlq_v1($1)",
                         1,
                         {U},
                         QN__LANE_READ,
                         false,
                         qn__decode_dlq},
    [QN_STMT_DELETE_DLQ] = {"qn_delete_dlq",
                            "SELECT qn.delete_dlq_v1($1, $2, $3)",
                            3,
                            {U, U, T},
                            QN__LANE_READ,
                            true,
                            qn__decode_scalar_int},
    [QN_STMT_STATS] = {"qn_stats",
                       "SELECT r_queue, r_partitions, r_messages, r_segments, r_pending, "
                       "r_dead_letters, r_groups, r_bytes FROM qn.stats_v1($1, $2)",
                       2,
                       {T, U},
                       QN__LANE_READ,
                       false,
                       qn__decode_stats},
    [QN_STMT_NOTIFY_PUSH] = {"qn_notify_push",
                             "SELECT qn.notify_push_v1($1, $2)",
                             2,
                             {TA, U},
                             QN__LANE_WRITE,
                             false,
                             qn__decode_void},
    [QN_STMT_PARTITION_META] = {"qn_partition_meta",
                                "SELECT r_pid, r_window, r_last_offset, r_txns_start "
                                "FROM qn.partition_meta_v1($1, $2, $3)",
                                3,
                                {T, T, U},
                                QN__LANE_WRITE,
                                false,
                                qn__decode_partition_meta},
    [QN_STMT_TXNS_SINCE] = {"qn_txns_since",
                            "SELECT r_base, r_end, r_created_at, r_hashes "
                            "FROM qn.txns_since_v1($1, $2)",
                            2,
                            {U, I8},
                            QN__LANE_READ,
                            false,
                            qn__decode_txns},
    [QN_STMT_TXNS_WINDOW] = {"qn_txns_window",
                             "SELECT r_base, r_end, r_created_at, r_hashes "
                             "FROM qn.txns_window_v1($1, $2)",
                             2,
                             {U, I4},
                             QN__LANE_READ,
                             false,
                             qn__decode_txns},
    [QN_STMT_MAINT_WORKLIST] = {"qn_maint_worklist",
                                "SELECT r_pid, r_all_cutoff, r_completed_cutoff, r_cutoff "
                                "FROM qn.maint_worklist_v1($1, $2, $3)",
                                3,
                                {TS, QN_OID_INT2, I4},
                                QN__LANE_READ,
                                false,
                                qn__decode_worklist},
    [QN_STMT_RETENTION_STEP] = {"qn_retention_step",
                                "SELECT r_deleted, r_frames, r_new_log_start, r_done "
                                "FROM qn.retention_step_v1($1, $2, $3, $4)",
                                4,
                                {U, TS, TS, I4},
                                QN__LANE_READ,
                                true,
                                qn__decode_maint_step},
    [QN_STMT_TXNS_PURGE_STEP] = {"qn_txns_purge_step",
                                 "SELECT r_deleted, 0::INT8, r_new_txns_start, r_done "
                                 "FROM qn.txns_purge_step_v1($1, $2, $3)",
                                 3,
                                 {U, TS, I4},
                                 QN__LANE_READ,
                                 true,
                                 qn__decode_maint_step},
    [QN_STMT_EVICT_MAX_WAIT_STEP] = {"qn_evict_max_wait_step",
                                     "SELECT r_deleted, r_frames, r_new_log_start, r_done "
                                     "FROM qn.evict_max_wait_step_v1($1, $2, $3)",
                                     3,
                                     {U, TS, I4},
                                     QN__LANE_READ,
                                     true,
                                     qn__decode_maint_step},
    [QN_STMT_PARTITION_DEAD] = {"qn_partition_dead",
                                "SELECT coalesce(qn.partition_dead_v1($1, $2), false)",
                                2,
                                {U, TS},
                                QN__LANE_READ,
                                false,
                                qn__decode_scalar_bool},
    [QN_STMT_PARTITION_CLEANUP_STEP] = {"qn_partition_cleanup_step",
                                        "SELECT r_deleted, 0::INT8, NULL::INT8, r_done "
                                        "FROM qn.partition_cleanup_step_v1($1, $2)",
                                        2,
                                        {TS, I4},
                                        QN__LANE_READ,
                                        true,
                                        qn__decode_maint_step},
    [QN_STMT_METRICS_PURGE] = {"qn_metrics_purge",
                               "SELECT qn.metrics_purge_v1($1)",
                               1,
                               {TS},
                               QN__LANE_READ,
                               true,
                               qn__decode_scalar_int},
    [QN_STMT_TRY_LOCK] = {"qn_try_lock",
                          "SELECT pg_try_advisory_lock($1)",
                          1,
                          {I8},
                          QN__LANE_READ,
                          false,
                          qn__decode_scalar_bool},
    [QN_STMT_UNLOCK] = {"qn_unlock",
                        "SELECT pg_advisory_unlock($1)",
                        1,
                        {I8},
                        QN__LANE_READ,
                        false,
                        qn__decode_scalar_bool},
    [QN_STMT_DB_NOW] = {"qn_db_now",
                        "SELECT (extract(epoch FROM now()) * 1000000)::INT8",
                        0,
                        {0},
                        QN__LANE_READ,
                        false,
                        qn__decode_scalar_int},
    /* not a procedure: a primary-key probe for the retention loop's log line */
    [QN_STMT_QUEUES_OF] = {"qn_queues_of",
                           "SELECT count(DISTINCT queue_id)::INT8 FROM queen.log_partitions "
                           "WHERE id = ANY ($1)",
                           1,
                           {QN_OID_UUID_ARR},
                           QN__LANE_READ,
                           false,
                           qn__decode_scalar_int},
    /* the authorization lookups of calls that name partitions or leases by id:
     * an ack waits on them, so they take the write lane (they only read) */
    [QN_STMT_PARTITION_QUEUES] = {"qn_partition_queues",
                                  "SELECT r_pid, r_queue FROM qn.partition_queues_v1($1, $2)",
                                  2,
                                  {QN_OID_UUID_ARR, U},
                                  QN__LANE_WRITE,
                                  false,
                                  qn__decode_pid_queues},
    [QN_STMT_LEASE_QUEUES] = {"qn_lease_queues",
                              "SELECT r_pid, r_queue FROM qn.lease_queues_v1($1, $2)",
                              2,
                              {T, U},
                              QN__LANE_WRITE,
                              false,
                              qn__decode_pid_queues},
    [QN_STMT_LIST_QUEUES_PAGE] = {"qn_list_queues_page",
                                  "SELECT " QUEUE_COLS
                                  " FROM qn.list_queues_page_v1($1, $2, $3, $4, $5, $6, $7)",
                                  7,
                                  {T, T, T, I4, U, TA, TA},
                                  QN__LANE_READ,
                                  false,
                                  qn__decode_queues},
    [QN_STMT_QUEUE_PARTITIONS_PAGE] = {"qn_queue_partitions_page",
                                       "SELECT r_partition, r_pid, r_last_offset, r_log_start, "
                                       "r_committed, r_depth, r_leased, r_last_write_at "
                                       "FROM qn.queue_partitions_page_v1($1, $2, $3, $4, $5)",
                                       5,
                                       {T, T, T, I4, U},
                                       QN__LANE_READ,
                                       false,
                                       qn__decode_partitions},
    [QN_STMT_QUEUE_DEPTH] = {"qn_queue_depth",
                             "SELECT qn.queue_depth_v1($1, $2, $3)",
                             3,
                             {T, T, U},
                             QN__LANE_READ,
                             false,
                             qn__decode_scalar_int},
    [QN_STMT_LIST_GROUPS_PAGE] = {"qn_list_groups_page",
                                  "SELECT r_group, r_queue, r_sub_mode, r_sub_from, r_partition, "
                                  "r_pid, r_committed, r_last_offset, r_lag, r_time_lag_seconds, "
                                  "r_leased, r_worker, r_total_consumed, r_retry_count, "
                                  "r_attempt_count, r_total_lag, r_max_time_lag "
                                  "FROM qn.list_consumer_groups_page_v1($1, $2, $3, $4, $5, $6, "
                                  "$7, $8, $9)",
                                  9,
                                  {T, T, T, T, T, I4, U, TA, TA},
                                  QN__LANE_READ,
                                  false,
                                  qn__decode_groups_page},
    [QN_STMT_LIST_DLQ_PAGE] = {"qn_list_dlq_page",
                               "SELECT " DLQ_COLS
                               " FROM qn.list_dlq_page_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                               9,
                               {T, T, T, TS, U, I4, U, TA, TA},
                               QN__LANE_READ,
                               false,
                               qn__decode_dlq},
    [QN_STMT_GROUP_LAGS] = {"qn_group_lags",
                            "SELECT r_group, r_queue, r_sub_mode, r_sub_from, r_partition, "
                            "r_pid, r_committed, r_last_offset, r_lag, r_time_lag_seconds, "
                            "r_leased, r_worker, r_total_consumed, r_retry_count, "
                            "r_attempt_count FROM qn.group_lags_cached_v1($1)",
                            1,
                            {U},
                            QN__LANE_READ,
                            false,
                            qn__decode_groups},
    [QN_STMT_STATS_CACHED] = {"qn_stats_cached",
                              "SELECT r_queue, r_partitions, r_messages, r_segments, r_pending, "
                              "r_dead_letters, r_groups, r_bytes FROM qn.stats_cached_v1($1, $2)",
                              2,
                              {U, I4},
                              QN__LANE_READ,
                              true,
                              qn__decode_stats},
    [QN_STMT_STATS_STEP] = {"qn_stats_step",
                            "SELECT qn.stats_step_v1($1)",
                            1,
                            {I4},
                            QN__LANE_READ,
                            true,
                            qn__decode_scalar_int},
    [QN_STMT_SEEK_GROUP_STEP] = {"qn_seek_group_step",
                                 "SELECT r_updated, r_next FROM "
                                 "qn.seek_consumer_group_step_v1($1, $2, $3, $4, $5, $6, $7, $8)",
                                 8,
                                 {T, T, T, B, TS, T, I4, U},
                                 QN__LANE_READ,
                                 true,
                                 qn__decode_seek_step},
    [QN_STMT_DELETE_QUEUE_STEP] = {"qn_delete_queue_step",
                                   "SELECT qn.delete_queue_step_v1($1, $2, $3, $4)",
                                   4,
                                   {T, U, I4, B},
                                   QN__LANE_READ,
                                   true,
                                   qn__decode_scalar_int},
};

const uint8_t qn__default_tenant[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
