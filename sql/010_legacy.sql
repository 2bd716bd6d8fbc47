-- 010_legacy.sql - removes what earlier versions of this broker left in schema
-- queen, so that nothing of ours can collide with Queen MQ's procedures there.
--
-- Earlier versions created every procedure in schema queen and recorded their
-- migrations in queen.schema_files. Queen MQ re-creates its own procedures in
-- that schema at every boot; one of ours (delete_queue_v1(text, uuid) returning
-- BOOL) had Queen MQ's name and arguments with another result type, so Queen
-- MQ's CREATE OR REPLACE failed on a database we had migrated. Everything of
-- ours now lives in schema qn (000_schema.sql).
--
-- What this drops, and only when queen.schema_files holds our record of
-- 003_log_push.sql (proof that our earlier migrator ran here): each function of
-- the list below whose exact signature AND result type are present in schema
-- queen. A function of Queen MQ with one of these names but another signature
-- or result type is left alone. queen.log_unnest_hashes is not in the list:
-- Queen MQ defines it with the same signature and contract, and its procedures
-- call it. queen.schema_files itself goes last. Idempotent: a second run finds
-- nothing to drop.
DO $legacy$
DECLARE
    r RECORD;
    v_oid REGPROCEDURE;
BEGIN
    IF to_regclass('queen.schema_files') IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'queen.schema_files'::regclass AND attname = 'checksum'
                     AND NOT attisdropped) THEN
        RETURN;    -- not our bookkeeping table
    END IF;
    IF NOT EXISTS (SELECT 1 FROM queen.schema_files WHERE name = '003_log_push.sql') THEN
        RETURN;
    END IF;
    FOR r IN SELECT * FROM (VALUES
    ('queen.push_v1(text[],text[],integer[],bytea[],bigint[],bytea[],boolean,uuid)',
     'TABLE(r_ord integer, r_pid uuid, r_window integer, r_status smallint, r_base bigint, r_created_at timestamp with time zone, r_dup_idx integer, r_dup_off bigint)'),
    ('queen.push_v1(text[],text[],integer[],bytea[],bigint[],bytea[],boolean,uuid,integer[])',
     'TABLE(r_ord integer, r_pid uuid, r_window integer, r_status smallint, r_base bigint, r_created_at timestamp with time zone, r_dup_idx integer, r_dup_off bigint)'),
    ('queen.ack_v1(uuid,text,text,bytea[],bigint[],smallint[],boolean)', 'TABLE(r_idx integer, r_outcome smallint, r_off bigint, r_flags integer, r_committed bigint, r_base bigint, r_blob bytea)'),
    ('queen.check_leases_v1(text[])', 'void'),
    ('queen.conf_bool(jsonb,text,boolean,boolean)', 'boolean'),
    ('queen.conf_int(jsonb,text,integer,integer,bigint,bigint)', 'integer'),
    ('queen.conf_text(jsonb,text,text,text)', 'text'),
    ('queen.configure_queue_v1(text,jsonb,boolean,uuid)', 'TABLE(r_created boolean, r_id uuid, r_name text, r_namespace text, r_task text, r_created_at timestamp with time zone, r_priority integer, r_lease_time integer, r_retry_limit integer, r_retry_delay integer, r_max_size integer, r_ttl integer, r_dead_letter_queue boolean, r_dlq_after_max_retries boolean, r_delayed_processing integer, r_window_buffer integer, r_retention_seconds integer, r_completed_retention_seconds integer, r_retention_enabled boolean, r_encryption_enabled boolean, r_max_wait_time_seconds integer, r_min_pop_wait_time integer, r_dedup_window_seconds integer, r_partitions integer, r_segments bigint, r_messages bigint)'),
    ('queen.delete_consumer_group_v1(text,text,boolean,uuid)', 'integer'),
    ('queen.delete_dlq_v1(uuid,uuid,text)', 'integer'),
    ('queen.delete_queue_v1(text,uuid)', 'boolean'),
    ('queen.dlq_head_v1(uuid,text,text,bigint,uuid,text,bytea,text)', 'TABLE(r_ok boolean, r_id uuid)'),
    ('queen.ensure_column(text,text,text)', 'void'),
    ('queen.ensure_index(text,text)', 'void'),
    ('queen.ensure_storage(text,text,"char")', 'void'),
    ('queen.evict_max_wait_step_v1(uuid,timestamp with time zone,integer)', 'TABLE(r_deleted integer, r_frames bigint, r_new_log_start bigint, r_done boolean)'),
    ('queen.fetch_v1(text[],text[],bigint[],bigint[],bigint,integer,integer,integer,uuid)', 'TABLE(r_entry integer, r_error smallint, r_pid uuid, r_high bigint, r_log_start bigint, r_base bigint, r_start_idx integer, r_take integer, r_created_at timestamp with time zone, r_blob bytea)'),
    ('queen.first_base_since(uuid,bigint,timestamp with time zone)', 'bigint'),
    ('queen.get_dlq_v1(uuid)', 'TABLE(r_id uuid, r_queue text, r_partition text, r_pid uuid, r_group text, r_offset bigint, r_message_id uuid, r_txn text, r_payload bytea, r_error text, r_retry_count integer, r_failed_at timestamp with time zone)'),
    ('queen.get_queue_v1(text,uuid)', 'TABLE(r_id uuid, r_name text, r_namespace text, r_task text, r_created_at timestamp with time zone, r_priority integer, r_lease_time integer, r_retry_limit integer, r_retry_delay integer, r_max_size integer, r_ttl integer, r_dead_letter_queue boolean, r_dlq_after_max_retries boolean, r_delayed_processing integer, r_window_buffer integer, r_retention_seconds integer, r_completed_retention_seconds integer, r_retention_enabled boolean, r_encryption_enabled boolean, r_max_wait_time_seconds integer, r_min_pop_wait_time integer, r_dedup_window_seconds integer, r_partitions integer, r_segments bigint, r_messages bigint)'),
    ('queen.has_pending_v1(text,text,text,uuid)', 'boolean'),
    ('queen.hash_index(bytea,bytea)', 'integer'),
    ('queen.list_consumer_groups_v1(text,text,uuid)', 'TABLE(r_group text, r_queue text, r_sub_mode text, r_sub_from timestamp with time zone, r_partition text, r_pid uuid, r_committed bigint, r_last_offset bigint, r_lag bigint, r_time_lag_seconds bigint, r_leased boolean, r_worker text, r_total_consumed bigint, r_retry_count integer, r_attempt_count integer)'),
    ('queen.list_dlq_v1(text,text,text,integer,integer,uuid)', 'TABLE(r_id uuid, r_queue text, r_partition text, r_pid uuid, r_group text, r_offset bigint, r_message_id uuid, r_txn text, r_payload bytea, r_error text, r_retry_count integer, r_failed_at timestamp with time zone)'),
    ('queen.list_queues_v1(text,text,integer,integer,uuid)', 'TABLE(r_id uuid, r_name text, r_namespace text, r_task text, r_created_at timestamp with time zone, r_priority integer, r_lease_time integer, r_retry_limit integer, r_retry_delay integer, r_max_size integer, r_ttl integer, r_dead_letter_queue boolean, r_dlq_after_max_retries boolean, r_delayed_processing integer, r_window_buffer integer, r_retention_seconds integer, r_completed_retention_seconds integer, r_retention_enabled boolean, r_encryption_enabled boolean, r_max_wait_time_seconds integer, r_min_pop_wait_time integer, r_dedup_window_seconds integer, r_partitions integer, r_segments bigint, r_messages bigint)'),
    ('queen.maint_worklist_v1(timestamp with time zone,smallint,integer)', 'TABLE(r_pid uuid, r_all_cutoff timestamp with time zone, r_completed_cutoff timestamp with time zone, r_cutoff timestamp with time zone)'),
    ('queen.metrics_purge_v1(timestamp with time zone)', 'integer'),
    ('queen.name_namespace(text)', 'text'),
    ('queen.name_task(text)', 'text'),
    ('queen.note_empty_scan(uuid[],text)', 'void'),
    ('queen.notify_push_v1(text[],uuid)', 'void'),
    ('queen.partition_cleanup_step_v1(timestamp with time zone,integer)', 'TABLE(r_deleted integer, r_done boolean)'),
    ('queen.partition_dead_v1(uuid,timestamp with time zone)', 'boolean'),
    ('queen.partition_meta_v1(text,text,uuid)', 'TABLE(r_pid uuid, r_window integer, r_last_offset bigint, r_txns_start bigint)'),
    ('queen.pop_discover_v1(text,text,text,integer,bigint,integer,integer,integer,text,boolean,integer,text,timestamp with time zone,uuid)', 'TABLE(r_queue text, r_partition text, r_pid uuid, r_base bigint, r_start_idx integer, r_take integer, r_created_at timestamp with time zone, r_blob bytea, r_lease_expires_at timestamp with time zone)'),
    ('queen.pop_gate_v1(text,text,text,uuid)', 'TABLE(r_pending bigint, r_min_wait integer)'),
    ('queen.pop_partition(uuid,text,text,boolean,integer,integer,integer,text,timestamp with time zone,integer,bigint,boolean,bigint,integer,integer)', 'TABLE(o_base bigint, o_start_idx integer, o_take integer, o_created_at timestamp with time zone, o_blob bytea, o_lease_expires_at timestamp with time zone, o_cost bigint)'),
    ('queen.pop_v1(text,text,text,integer,bigint,integer,integer,integer,text,boolean,integer,text,timestamp with time zone,uuid)', 'TABLE(r_queue text, r_partition text, r_pid uuid, r_base bigint, r_start_idx integer, r_take integer, r_created_at timestamp with time zone, r_blob bytea, r_lease_expires_at timestamp with time zone)'),
    ('queen.push_v1(text[],text[],integer[],bytea[],bigint[],bytea[],boolean,uuid,integer[],uuid[])', 'TABLE(r_ord integer, r_pid uuid, r_window integer, r_status smallint, r_base bigint, r_created_at timestamp with time zone, r_dup_idx integer, r_dup_off bigint)'),
    ('queen.queue_partitions_v1(text,text,uuid)', 'TABLE(r_partition text, r_pid uuid, r_last_offset bigint, r_log_start bigint, r_committed bigint, r_depth bigint, r_leased boolean, r_last_write_at timestamp with time zone)'),
    ('queen.queue_rows(uuid[])', 'TABLE(r_id uuid, r_name text, r_namespace text, r_task text, r_created_at timestamp with time zone, r_priority integer, r_lease_time integer, r_retry_limit integer, r_retry_delay integer, r_max_size integer, r_ttl integer, r_dead_letter_queue boolean, r_dlq_after_max_retries boolean, r_delayed_processing integer, r_window_buffer integer, r_retention_seconds integer, r_completed_retention_seconds integer, r_retention_enabled boolean, r_encryption_enabled boolean, r_max_wait_time_seconds integer, r_min_pop_wait_time integer, r_dedup_window_seconds integer, r_partitions integer, r_segments bigint, r_messages bigint)'),
    ('queen.register_group(uuid,uuid,text,text,timestamp with time zone)', 'record'),
    ('queen.release_lease_v1(text)', 'integer'),
    ('queen.renew_lease_v1(text,integer)', 'TABLE(r_renewed integer, r_expires_at timestamp with time zone)'),
    ('queen.retention_step_v1(uuid,timestamp with time zone,timestamp with time zone,integer)', 'TABLE(r_deleted integer, r_frames bigint, r_new_log_start bigint, r_done boolean)'),
    ('queen.seed_cursor(uuid,text,timestamp with time zone,bigint,bigint)', 'bigint'),
    ('queen.seek_consumer_group_v1(text,text,text,boolean,timestamp with time zone,uuid)', 'integer'),
    ('queen.segment_at_v1(uuid,bigint[])', 'TABLE(r_base bigint, r_end bigint, r_created_at timestamp with time zone, r_blob bytea)'),
    ('queen.stats_v1(text,uuid)', 'TABLE(r_queue text, r_partitions integer, r_messages bigint, r_segments bigint, r_pending bigint, r_dead_letters bigint, r_groups integer, r_bytes bigint)'),
    ('queen.sub_mode_canonical(text)', 'text'),
    ('queen.trim_segments(uuid,timestamp with time zone,timestamp with time zone,integer,text)', 'TABLE(r_deleted integer, r_frames bigint, r_new_log_start bigint, r_done boolean)'),
    ('queen.txns_purge_step_v1(uuid,timestamp with time zone,integer)', 'TABLE(r_deleted integer, r_new_txns_start bigint, r_done boolean)'),
    ('queen.txns_since_v1(uuid,bigint)', 'TABLE(r_base bigint, r_end bigint, r_created_at timestamp with time zone, r_hashes bytea)'),
    ('queen.txns_window_v1(uuid,integer)', 'TABLE(r_base bigint, r_end bigint, r_created_at timestamp with time zone, r_hashes bytea)'),
    ('queen.zstd_content_size(bytea)', 'bigint')
    ) AS l(sig, result)
    LOOP
        v_oid := to_regprocedure(r.sig);
        IF v_oid IS NOT NULL AND pg_get_function_result(v_oid) = r.result THEN
            EXECUTE format('DROP FUNCTION %s', v_oid::TEXT);
        END IF;
    END LOOP;
    DROP TABLE queen.schema_files;
END;
$legacy$;
