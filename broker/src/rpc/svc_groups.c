/*
 * rpc/svc_groups.c - AdminService: ListConsumerGroups, SeekConsumerGroup and
 * DeleteConsumerGroup.
 *
 * Does: validate names; check the admin grant (a named queue; without one,
 * ListConsumerGroups shows only the queues the grants cover and
 * DeleteConsumerGroup needs admin on every queue); audit changes; map cursor
 * rows (one per group, queue and partition) to
 * ConsumerGroupInfo entries, one per (group, queue), with lag totals and a
 * LAGGING state past 300 s of time lag; move or delete cursors with one call.
 * Does not: touch leases or messages.
 *
 * Invariant: every call either finishes with a response or is cancelled; its
 * qn_admin_call owns the request and the storage request it started.
 */
#include <stdio.h>
#include <string.h>

#include "queen/error.h"
#include "queen/ids.h"
#include "queen/v1/admin.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/authz.h"
#include "rpc/page_token.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

/* ---------------------------------------------------------------- consumer groups */

static Queen__V1__SubscriptionMode mode_out(const char *m)
{
    if (m && strcmp(m, "new") == 0)
        return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_NEW;
    if (m && strcmp(m, "timestamp") == 0)
        return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_FROM_TIMESTAMP;
    return QUEEN__V1__SUBSCRIPTION_MODE__SUBSCRIPTION_MODE_ALL;
}

/* ListConsumerGroups: one keyset page of cursor rows, asked one row longer
 * than the page (that row only says another page follows), with the name
 * filter of the caller's admin grants when it names no queue. */
struct listg {
    struct qn_admin_call a; /* first: the admin helpers take &l->a */
    struct qn_authz_names names;
    uint32_t page_size;
    uint64_t binding; /* the page token's binding (kind, tenant, filters) */
};

static void listg_cleanup(struct qn_admin_call *a)
{
    qn_authz_names_free(&((struct listg *)a)->names);
}

static void groups_done(void *ud, const struct qn_store_status *st,
                        const struct qn_groups_result *r)
{
    struct qn_admin_call *a = ud;
    struct listg *l = ud;
    if (!qn_admin_ok(a, st))
        return;
    struct qn_arena *ar = &a->arena;
    Queen__V1__ListConsumerGroupsResponse resp = QUEEN__V1__LIST_CONSUMER_GROUPS_RESPONSE__INIT;
    size_t n = r->n > l->page_size ? l->page_size : r->n;
    Queen__V1__ConsumerGroupInfo **groups = qn_arena_alloc(ar, (n ? n : 1) * sizeof *groups);
    Queen__V1__ConsumerGroupPartition **parts = qn_arena_alloc(ar, (n ? n : 1) * sizeof *parts);
    if (groups == NULL || parts == NULL)
        goto oom;
    resp.next_page_token = "";
    if (r->n > n) {
        const struct qn_group_row *last = &r->rows[n - 1];
        struct qn_page_key k;
        memset(&k, 0, sizeof k);
        char *tok = qn_arena_alloc(ar, QN_PAGE_TOKEN_MAX + 1);
        if (tok == NULL || qn_page_key_set_text(&k, 0, last->group) != QN_OK ||
            qn_page_key_set_text(&k, 1, last->queue) != QN_OK ||
            qn_page_key_set_text(&k, 2, last->partition) != QN_OK ||
            qn_page_token_encode(QN_PAGE_GROUPS, l->binding, &k, tok, QN_PAGE_TOKEN_MAX + 1) !=
                QN_OK) {
            qn_admin_finish(a, QN_GRPC_INTERNAL, "cannot make the next page token");
            return;
        }
        resp.next_page_token = tok;
    }
    /* rows arrive grouped by (group, queue); each run becomes one group entry,
     * whose totals are the whole (group, queue)'s, computed by the procedure */
    Queen__V1__ConsumerGroupInfo *cur = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct qn_group_row *row = &r->rows[i];
        if (!qn_authz_may(a->call, QN_SCOPE_ADMIN, row->queue))
            continue; /* a queue the caller's grants do not cover */
        if (cur == NULL || strcmp(cur->consumer_group, row->group) != 0 ||
            strcmp(cur->queue, row->queue) != 0) {
            cur = qn_arena_alloc(ar, sizeof *cur);
            if (cur == NULL)
                goto oom;
            queen__v1__consumer_group_info__init(cur);
            cur->consumer_group = qn_arena_strndup(ar, row->group, strlen(row->group));
            cur->queue = qn_arena_strndup(ar, row->queue, strlen(row->queue));
            if (cur->consumer_group == NULL || cur->queue == NULL)
                goto oom;
            cur->subscription_mode = mode_out(row->sub_mode);
            cur->subscription_from_us = row->sub_from_us;
            cur->partitions = parts + i;
            cur->total_lag = row->total_lag;
            cur->max_time_lag_seconds = row->max_time_lag_seconds;
            cur->state = cur->max_time_lag_seconds > 300
                             ? QUEEN__V1__GROUP_STATE__GROUP_STATE_LAGGING
                             : QUEEN__V1__GROUP_STATE__GROUP_STATE_STABLE;
            groups[resp.n_groups++] = cur;
        }
        if (row->partition == NULL || row->partition[0] == '\0')
            continue; /* a group registered on a queue without partitions yet */
        Queen__V1__ConsumerGroupPartition *p = qn_arena_alloc(ar, sizeof *p);
        char *pid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
        if (p == NULL || pid == NULL)
            goto oom;
        queen__v1__consumer_group_partition__init(p);
        qn_uuid_format(row->pid, pid);
        p->partition = qn_arena_strndup(ar, row->partition, strlen(row->partition));
        p->partition_id = pid;
        p->committed = row->committed;
        p->last_offset = row->last_offset;
        p->lag = row->lag;
        p->time_lag_seconds = row->time_lag_seconds;
        p->leased = row->leased;
        p->lease_id = qn_arena_strndup(ar, row->worker ? row->worker : "",
                                       row->worker ? strlen(row->worker) : 0);
        p->total_consumed = row->total_consumed;
        p->retry_count = row->retry_count < 0 ? 0 : (uint32_t)row->retry_count;
        p->attempt_count = row->attempt_count < 0 ? 0 : (uint32_t)row->attempt_count;
        if (p->partition == NULL || p->lease_id == NULL)
            goto oom;
        cur->partitions[cur->n_partitions++] = p;
    }
    resp.groups = groups;
    qn_admin_reply(a, &resp.base);
    return;
oom:
    qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

void qn_svc_list_groups(qn_call *call, ProtobufCMessage *msg)
{
    struct listg *l = (struct listg *)qn_admin_new(call, msg, sizeof *l);
    if (l == NULL)
        return;
    struct qn_admin_call *a = &l->a;
    a->cleanup = listg_cleanup;
    Queen__V1__ListConsumerGroupsRequest *req = (Queen__V1__ListConsumerGroupsRequest *)msg;
    if (!qn_admin_check_name(a, req->queue, "queue", true) ||
        !qn_admin_check_name(a, req->consumer_group, "consumer_group", true))
        return;
    struct qn_call_opts opts = qn_admin_opts(a);
    const char *filters[] = {req->queue, req->consumer_group};
    l->binding = qn_page_binding(QN_PAGE_GROUPS, opts.tenant, filters, 2);
    l->page_size = qn_page_size(req->page_size, 0);
    struct qn_page_key after;
    const char *why = NULL;
    bool has_after = req->page_token != NULL && req->page_token[0] != '\0';
    if (has_after && qn_page_token_decode(req->page_token, QN_PAGE_GROUPS, l->binding, 3, &after,
                                          &why) != QN_OK) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (req->queue && *req->queue) {
        if (!qn_admin_authorize(a, req->queue))
            return;
    } else {
        /* the procedure keeps only the queues the grants cover (before paging);
         * groups_done checks each row again */
        int all = qn_admin_reach(a, &l->names);
        if (all < 0)
            return;
        opts.names = all ? NULL : &l->names.f;
    }
    qn_admin_sent(a, qn_store_list_consumer_groups_page(
                         a->app->store, req->queue, req->consumer_group,
                         has_after ? after.text[0] : NULL, has_after ? after.text[1] : NULL,
                         has_after ? after.text[2] : NULL, (int32_t)l->page_size + 1, &opts,
                         groups_done, a, &a->sreq[0]));
}

/*
 * SeekConsumerGroup in committed steps of SEEK_STEP partitions by name
 * (seek_consumer_group_step_v1), each its own short transaction: one statement
 * over a million cursors ran for minutes (12.3 s at 200,000) and held every
 * cursor row of the group until it ended. Interrupted, the cursors of the
 * steps done stay moved; SeekConsumerGroup again does the whole seek.
 */
#define SEEK_STEP 10000

struct seekq {
    struct qn_admin_call a; /* first: the admin helpers take &q->a */
    bool to_end;
    int64_t ts;
    uint64_t updated;
    bool has_after;
    char after[QN_NAME_MAX + 1];
};

static void seek_step(struct seekq *q);

static void seek_step_done(void *ud, const struct qn_store_status *st,
                           const struct qn_seek_step *res)
{
    struct seekq *q = ud;
    if (!qn_admin_ok(&q->a, st))
        return;
    q->updated += res->updated > 0 ? (uint64_t)res->updated : 0;
    if (res->next != NULL && res->next[0] != '\0') {
        size_t len = strlen(res->next);
        if (len >= sizeof q->after) {
            qn_admin_finish(&q->a, QN_GRPC_INTERNAL, "partition name too long");
            return;
        }
        memcpy(q->after, res->next, len + 1);
        q->has_after = true;
        seek_step(q);
        return;
    }
    Queen__V1__SeekConsumerGroupResponse resp = QUEEN__V1__SEEK_CONSUMER_GROUP_RESPONSE__INIT;
    resp.partitions_updated = q->updated > UINT32_MAX ? UINT32_MAX : (uint32_t)q->updated;
    qn_admin_reply(&q->a, &resp.base);
}

static void seek_step(struct seekq *q)
{
    Queen__V1__SeekConsumerGroupRequest *req = (Queen__V1__SeekConsumerGroupRequest *)q->a.req;
    struct qn_call_opts opts = qn_admin_opts(&q->a);
    qn_admin_sent(&q->a,
                  qn_store_seek_consumer_group_step(
                      q->a.app->store, qn_or_default(req->consumer_group, QN_QUEUE_MODE),
                      req->queue, req->partition, q->to_end, q->ts, q->has_after ? q->after : NULL,
                      SEEK_STEP, &opts, seek_step_done, q, &q->a.sreq[0]));
}

void qn_svc_seek_group(qn_call *call, ProtobufCMessage *msg)
{
    struct seekq *q = (struct seekq *)qn_admin_new(call, msg, sizeof *q);
    if (q == NULL)
        return;
    struct qn_admin_call *a = &q->a;
    Queen__V1__SeekConsumerGroupRequest *req = (Queen__V1__SeekConsumerGroupRequest *)msg;
    if (!qn_admin_check_name(a, req->consumer_group, "consumer_group", true) ||
        !qn_admin_check_name(a, req->queue, "queue", false) ||
        !qn_admin_check_name(a, req->partition, "partition", true))
        return;
    bool to_end = false;
    int64_t ts = 0;
    if (req->target_case == QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_END && req->to_end) {
        to_end = true;
    } else if (req->target_case == QUEEN__V1__SEEK_CONSUMER_GROUP_REQUEST__TARGET_TO_TIMESTAMP_US) {
        ts = req->to_timestamp_us;
        if (ts < 0) {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT,
                            "to_timestamp_us is negative: expected microseconds since the Unix "
                            "epoch (1970-01-01)");
            return;
        }
    } else {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "set to_end or to_timestamp_us");
        return;
    }
    if (!qn_admin_authorize(a, req->queue))
        return;
    qn_admin_audit(a, req->queue, to_end ? "seek group to end" : "seek group to time");
    q->to_end = to_end;
    q->ts = ts;
    seek_step(q);
}

static void delgroup_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct qn_admin_call *a = ud;
    if (!qn_admin_ok(a, st))
        return;
    Queen__V1__DeleteConsumerGroupResponse resp = QUEEN__V1__DELETE_CONSUMER_GROUP_RESPONSE__INIT;
    resp.partitions_deleted = value < 0 ? 0 : (uint32_t)value;
    qn_admin_reply(a, &resp.base);
}

void qn_svc_delete_group(qn_call *call, ProtobufCMessage *msg)
{
    struct qn_admin_call *a = qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    Queen__V1__DeleteConsumerGroupRequest *req = (Queen__V1__DeleteConsumerGroupRequest *)msg;
    if (!qn_admin_check_name(a, req->consumer_group, "consumer_group", false) ||
        !qn_admin_check_name(a, req->queue, "queue", true))
        return;
    if (req->queue && *req->queue ? !qn_admin_authorize(a, req->queue)
                                  : !qn_admin_authorize_all(a, "deleting a group on every queue"))
        return;
    qn_admin_audit(a, req->queue ? req->queue : "", "delete consumer group");
    struct qn_call_opts opts = qn_admin_opts(a);
    qn_admin_sent(a, qn_store_delete_consumer_group(a->app->store, req->consumer_group, req->queue,
                                                    req->delete_metadata, &opts, delgroup_done, a,
                                                    &a->sreq[0]));
}
