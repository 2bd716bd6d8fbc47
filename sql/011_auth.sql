-- 011_auth.sql - what the broker asks before it lets a caller act on something
-- it names by id (a partition id, a lease id) rather than by queue name: which
-- queue of the caller's tenant that id belongs to. The broker then checks the
-- caller's grants on that queue (broker/src/rpc/authz.c) before any procedure
-- that writes runs, so a refused call has no side effect and an id of another
-- tenant's partition or lease is answered as if it did not exist.
--
-- Writes addressed by a partition id carry the caller's tenant themselves:
-- push_one_v1 (003_log_push.sql; push_v1 resolves names in p_tenant and then
-- calls it) only takes the id path when the partition belongs to a queue of
-- p_tenant, so an id of another tenant's partition (a forged id, or a stale
-- entry of the store's id cache) is never written: with names it falls back to
-- them in p_tenant, without it raises QPUSH unknown partition
-- (test/sql/test_sql_push.c, test_push_one_other_tenant).
--
-- Both functions below are read-only (STABLE) and keyed on the ids they are given (primary key
-- and index probes); neither is on a path the broker takes without auth.

-- partition_queues_v1: for each given partition id that belongs to a queue of
-- p_tenant, its queue's name. Ids of other tenants' partitions, and ids that do
-- not exist, yield no row.
CREATE OR REPLACE FUNCTION qn.partition_queues_v1(
    p_pids   UUID[],
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_pid UUID, r_queue TEXT)
LANGUAGE sql STABLE
AS $$
    SELECT p.id, q.name::TEXT
    FROM queen.log_partitions p
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE p.id = ANY (p_pids) AND q.tenant_id = p_tenant
$$;

-- lease_queues_v1: every live lease of worker p_worker (a lease id) with its
-- partition and, when the partition belongs to a queue of p_tenant, that queue's
-- name (NULL for a lease in another tenant's queue, whose name is not revealed).
CREATE OR REPLACE FUNCTION qn.lease_queues_v1(
    p_worker TEXT,
    p_tenant UUID DEFAULT '00000000-0000-0000-0000-000000000001')
RETURNS TABLE (r_pid UUID, r_queue TEXT)
LANGUAGE sql STABLE
AS $$
    SELECT c.partition_id, CASE WHEN q.tenant_id = p_tenant THEN q.name::TEXT END
    FROM queen.log_consumers c
    JOIN queen.log_partitions p ON p.id = c.partition_id
    JOIN queen.queues q ON q.id = p.queue_id
    WHERE c.worker_id = p_worker AND c.batch_end IS NOT NULL AND c.lease_expires_at > now()
$$;
