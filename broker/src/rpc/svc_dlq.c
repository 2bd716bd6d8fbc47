/*
 * rpc/svc_dlq.c - AdminService: ListDeadLetters, DeleteDeadLetter and
 * ReplayDeadLetter.
 *
 * Does: validate; check the admin grant (with auth on, a dead letter named by
 * id or address is first found in the caller's tenant: one of another tenant
 * reads as not found); map dead-letter rows to DeadLetter messages (payloads
 * copied into the response's arena, decrypted when the dead letter is stored
 * encrypted); delete by id or by (partition, transaction id); replay one dead
 * letter as a fresh message (sealed again when its target queue is encrypted,
 * stamped with the replaying principal as producer) and remove it in the same
 * transaction, then wake this broker's waiters of its queue.
 * Does not: file dead letters (the ack engine does, ack_apply.c): the DLQ keeps
 * a payload as its queue stored it, encrypted or not.
 *
 * Invariant: every call either finishes with a response or is cancelled; its
 * state owns the request and the storage request it started.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "config.h"
#include "engine/notifier.h"
#include "queen/error.h"
#include "queen/frame.h"
#include "queen/ids.h"
#include "queen/segment.h"
#include "queen/v1/admin.pb-c.h"
#include "rpc/admin_call.h"
#include "rpc/authz.h"
#include "rpc/page_token.h"
#include "rpc/crypt.h"
#include "rpc/svc.h"
#include "rpc/validate.h"

/* ---------------------------------------------------------------- dead letters */

static Queen__V1__DeadLetter *dlq_out(struct qn_app *app, struct qn_arena *ar,
                                      const struct qn_dlq_row *d)
{
    Queen__V1__DeadLetter *x = qn_arena_alloc(ar, sizeof *x);
    char *id = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *pid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    char *mid = qn_arena_alloc(ar, QN_UUID_STR_LEN);
    if (!x || !id || !pid || !mid)
        return NULL;
    queen__v1__dead_letter__init(x);
    qn_uuid_format(d->id, id);
    qn_uuid_format(d->pid, pid);
    qn_uuid_format(d->message_id, mid);
    x->id = id;
    x->partition_id = pid;
    x->message_id = mid;
#define DUP(dst, s) dst = qn_arena_strndup(ar, (s) ? (s) : "", (s) ? strlen(s) : 0)
    DUP(x->queue, d->queue);
    DUP(x->partition, d->partition);
    DUP(x->consumer_group, d->group);
    DUP(x->transaction_id, d->txn);
    DUP(x->error, d->error);
#undef DUP
    if (!x->queue || !x->partition || !x->consumer_group || !x->transaction_id || !x->error)
        return NULL;
    bool enc = false;
    const uint8_t *plain = NULL;
    size_t plen = 0;
    char why[200];
    int rc = qn_crypt_open_dead(app, ar, d->message_id, d->payload, d->payload_len, &enc, &plain,
                                &plen, why, sizeof why);
    if (rc == QN_ENOMEM)
        return NULL;
    x->encrypted = enc;
    if (rc != QN_OK) {
        if ((x->payload_error = qn_arena_strndup(ar, why, strlen(why))) == NULL)
            return NULL;
    } else if (plen > 0) {
        uint8_t *p = qn_arena_alloc(ar, plen);
        if (p == NULL)
            return NULL;
        memcpy(p, plain, plen);
        x->payload.data = p;
        x->payload.len = plen;
    }
    x->offset = d->offset;
    x->retry_count = d->retry_count < 0 ? 0 : (uint32_t)d->retry_count;
    x->failed_at_us = d->failed_at_us;
    return x;
}

/* ListDeadLetters with the name filter of the caller's admin grants: one
 * keyset page, asked one row longer than the page (that row only says another
 * page follows). */
struct listdlq {
    struct qn_admin_call a; /* first: the admin helpers take &l->a */
    struct qn_authz_names names;
    uint32_t page_size;
    uint64_t binding; /* the page token's binding (kind, tenant, filters) */
};

static void listdlq_done(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct qn_admin_call *a = ud;
    struct listdlq *l = ud;
    if (!qn_admin_ok(a, st))
        return;
    Queen__V1__ListDeadLettersResponse resp = QUEEN__V1__LIST_DEAD_LETTERS_RESPONSE__INIT;
    size_t n = r->n > l->page_size ? l->page_size : r->n;
    resp.next_page_token = "";
    if (r->n > n) {
        struct qn_page_key k;
        memset(&k, 0, sizeof k);
        k.ts_us = r->rows[n - 1].failed_at_us;
        memcpy(k.id, r->rows[n - 1].id, 16);
        char *tok = qn_arena_alloc(&a->arena, QN_PAGE_TOKEN_MAX + 1);
        if (tok == NULL || qn_page_token_encode(QN_PAGE_DLQ, l->binding, &k, tok,
                                                QN_PAGE_TOKEN_MAX + 1) != QN_OK) {
            qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
            return;
        }
        resp.next_page_token = tok;
    }
    resp.dead_letters = qn_arena_alloc(&a->arena, (n ? n : 1) * sizeof *resp.dead_letters);
    for (size_t i = 0; resp.dead_letters && i < n; i++) {
        Queen__V1__DeadLetter *d = dlq_out(a->app, &a->arena, &r->rows[i]);
        if (d == NULL) {
            resp.dead_letters = NULL;
            break;
        }
        resp.dead_letters[resp.n_dead_letters++] = d;
    }
    if (resp.dead_letters == NULL) {
        qn_admin_finish(a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    qn_admin_reply(a, &resp.base);
}

static void listdlq_cleanup(struct qn_admin_call *a)
{
    qn_authz_names_free(&((struct listdlq *)a)->names);
}

void qn_svc_list_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct listdlq *l = (struct listdlq *)qn_admin_new(call, msg, sizeof *l);
    if (l == NULL)
        return;
    struct qn_admin_call *a = &l->a;
    a->cleanup = listdlq_cleanup;
    Queen__V1__ListDeadLettersRequest *req = (Queen__V1__ListDeadLettersRequest *)msg;
    if (!qn_admin_check_name(a, req->queue, "queue", true) ||
        !qn_admin_check_name(a, req->consumer_group, "consumer_group", true) ||
        !qn_admin_check_name(a, req->partition, "partition", true))
        return;
    if (req->offset > INT32_MAX) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset is too large");
        return;
    }
    bool has_after = req->page_token != NULL && req->page_token[0] != '\0';
    if (has_after && req->offset > 0) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "offset cannot be combined with page_token");
        return;
    }
    struct qn_call_opts opts = qn_admin_opts(a);
    const char *filters[] = {req->queue, req->consumer_group, req->partition};
    l->binding = qn_page_binding(QN_PAGE_DLQ, opts.tenant, filters, 3);
    l->page_size = qn_page_size(req->page_size, req->limit);
    struct qn_page_key after;
    const char *why = NULL;
    if (has_after &&
        qn_page_token_decode(req->page_token, QN_PAGE_DLQ, l->binding, 0, &after, &why) != QN_OK) {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, why);
        return;
    }
    if (req->queue && *req->queue) {
        if (!qn_admin_authorize(a, req->queue))
            return;
    } else {
        int all = qn_admin_reach(a, &l->names);
        if (all < 0)
            return;
        opts.names = all ? NULL : &l->names.f;
    }
    int32_t ask = (int32_t)l->page_size + 1;
    if (req->offset > 0) /* legacy offset paging: the same order, so a token still follows */
        qn_admin_sent(a, qn_store_list_dlq(a->app->store, req->queue, req->consumer_group,
                                           req->partition, ask, (int32_t)req->offset, &opts,
                                           listdlq_done, a, &a->sreq[0]));
    else
        qn_admin_sent(a, qn_store_list_dlq_page(
                             a->app->store, req->queue, req->consumer_group, req->partition,
                             has_after ? after.ts_us : QN_STORE_NO_TS, has_after ? after.id : NULL,
                             ask, &opts, listdlq_done, a, &a->sreq[0]));
}

static void deldlq_done(void *ud, const struct qn_store_status *st, int64_t value)
{
    struct qn_admin_call *a = ud;
    if (!qn_admin_ok(a, st))
        return;
    if (value == 0) {
        qn_admin_finish(a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    Queen__V1__DeleteDeadLetterResponse resp = QUEEN__V1__DELETE_DEAD_LETTER_RESPONSE__INIT;
    resp.deleted = (uint32_t)value;
    qn_admin_reply(a, &resp.base);
}

/* DeleteDeadLetter: with auth on the dead letter's partition is found in the
 * caller's tenant first (by id: get_dlq_v1 gives it) and its queue's admin
 * grant checked before anything is deleted. */
struct deldlq {
    struct qn_admin_call a; /* first: the admin helpers take &d->a */
    bool by_id;
    uint8_t id[16];
    uint8_t pid[16];
};

static void deldlq_send(struct deldlq *d)
{
    Queen__V1__DeleteDeadLetterRequest *req = (Queen__V1__DeleteDeadLetterRequest *)d->a.req;
    struct qn_call_opts opts = qn_admin_opts(&d->a);
    qn_admin_sent(&d->a, qn_store_delete_dlq(d->a.app->store, d->by_id ? d->id : NULL,
                                             d->by_id ? NULL : d->pid,
                                             d->by_id ? NULL : req->address->transaction_id, &opts,
                                             deldlq_done, &d->a, &d->a.sreq[0]));
}

static void deldlq_owner(void *ud, const struct qn_store_status *st,
                         const struct qn_pid_queues_result *r)
{
    struct deldlq *d = ud;
    if (!qn_admin_ok(&d->a, st))
        return;
    if (r->n == 0) {
        qn_admin_finish(&d->a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    if (!qn_admin_authorize(&d->a, r->rows[0].queue))
        return;
    qn_admin_audit(&d->a, r->rows[0].queue, "delete dead letter");
    deldlq_send(d);
}

static void deldlq_lookup(struct deldlq *d)
{
    struct qn_call_opts opts = qn_admin_opts(&d->a);
    const uint8_t(*pids)[16] = (const uint8_t(*)[16])d->pid;
    qn_admin_sent(&d->a, qn_store_partition_queues(d->a.app->store, pids, 1, &opts, deldlq_owner, d,
                                                   &d->a.sreq[0]));
}

static void deldlq_got(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct deldlq *d = ud;
    if (!qn_admin_ok(&d->a, st))
        return;
    if (r->n == 0) {
        qn_admin_finish(&d->a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    memcpy(d->pid, r->rows[0].pid, 16);
    deldlq_lookup(d);
}

void qn_svc_delete_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct deldlq *d = (struct deldlq *)qn_admin_new(call, msg, sizeof *d);
    if (d == NULL)
        return;
    struct qn_admin_call *a = &d->a;
    Queen__V1__DeleteDeadLetterRequest *req = (Queen__V1__DeleteDeadLetterRequest *)msg;
    if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ID) {
        if (!qn_parse_uuid_str(req->id, d->id)) {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
            return;
        }
        d->by_id = true;
    } else if (req->target_case == QUEEN__V1__DELETE_DEAD_LETTER_REQUEST__TARGET_ADDRESS &&
               req->address != NULL) {
        if (!qn_parse_uuid_str(req->address->partition_id, d->pid)) {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.partition_id is not a UUID");
            return;
        }
        if (req->address->transaction_id == NULL || *req->address->transaction_id == '\0') {
            qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "address.transaction_id is required");
            return;
        }
    } else {
        qn_admin_finish(a, QN_GRPC_INVALID_ARGUMENT, "set id or address");
        return;
    }
    if (qn_authz_principal(call) == NULL) {
        qn_admin_audit(a, "", "delete dead letter");
        deldlq_send(d);
    } else if (d->by_id) {
        struct qn_call_opts opts = qn_admin_opts(a);
        qn_admin_sent(a, qn_store_get_dlq(a->app->store, d->id, &opts, deldlq_got, d, &a->sreq[0]));
    } else {
        deldlq_lookup(d);
    }
}

/* ---------------------------------------------------------------- ReplayDeadLetter */

/*
 * Replay: get the dead letter, (auth: find its partition in the caller's tenant
 * and check admin on its queue and on the target queue), learn whether the
 * target queue is encrypted, pack it as a fresh message (transaction id
 * "dlq:<id>", so a second replay inside the dedup window is a DUPLICATE; the
 * payload decrypted from the DLQ's stored form and sealed again for an
 * encrypted target), then push it and delete the dead letter in one
 * transaction.
 */
struct replay {
    struct qn_admin_call a; /* first: the admin helpers take &r->a */
    struct qn_crypt_wait wait;
    uint8_t dlq_id[16];
    char dlq_txn[64];
    char queue[256], partition[256]; /* the target */
    const char *targets[1];          /* queue, for the encryption wait */
    uint8_t pid[16];                 /* the dead letter's partition */
    uint8_t orig_id[16];             /* the dead letter's message id */
    uint8_t *payload;                /* the dead letter's stored payload (owned) */
    size_t payload_len;
    uint8_t msgid[16];
    uint8_t *sealed;    /* the replayed payload sealed for an encrypted target (owned) */
    struct qn_buf blob; /* the packed segment */
    uint8_t hash[16];
};

static void replay_cleanup(struct qn_admin_call *a)
{
    struct replay *r = (struct replay *)a;
    qn_crypt_cancel(&r->wait);
    free(r->payload);
    free(r->sealed);
    qn_buf_free(&r->blob);
}

static void replay_committed(void *ud, const struct qn_store_status *st,
                             const struct qn_txn_result *r)
{
    struct replay *a = ud;
    a->a.sreq[0] = NULL;
    Queen__V1__ReplayDeadLetterResponse resp = QUEEN__V1__REPLAY_DEAD_LETTER_RESPONSE__INIT;
    Queen__V1__PushResult pr = QUEEN__V1__PUSH_RESULT__INIT;
    char mid[QN_UUID_STR_LEN] = "", pid[QN_UUID_STR_LEN] = "";
    pr.queue = a->queue;
    pr.partition = a->partition;
    pr.transaction_id = a->dlq_txn;
    resp.replayed_as = &pr;
    if (st->code == QN_EDUPLICATE) {
        /* replayed before inside the dedup window: report it, keep the row */
        pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_DUPLICATE;
        pr.message_id = mid;
        pr.partition_id = pid;
        pr.offset = -1;
        qn_admin_reply(&a->a, &resp.base);
        return;
    }
    if (st->code != QN_OK) {
        qn_admin_store_error(&a->a, st);
        return;
    }
    const struct qn_push_result *p = r->n > 0 ? r->steps[0].push : NULL;
    if (p == NULL || p->n != 1) {
        qn_admin_finish(&a->a, QN_GRPC_INTERNAL, "the database returned no push result");
        return;
    }
    qn_uuid_format(a->msgid, mid);
    qn_uuid_format(p->segs[0].pid, pid);
    pr.status = QUEEN__V1__PUSH_STATUS__PUSH_STATUS_QUEUED;
    pr.message_id = mid;
    pr.partition_id = pid;
    pr.offset = p->segs[0].base;
    resp.dead_letter_removed = r->n > 1 && r->steps[1].value > 0;
    a->a.app->pushed++;
    a->a.app->pushed_bytes += a->payload_len;
    qn_notifier_committed(a->a.app->notifier, qn_authz_tenant(a->a.call), a->queue, a->partition);
    qn_admin_reply(&a->a, &resp.base);
}

/* Everything is known: pack and commit. */
static void replay_build(struct replay *a)
{
    struct qn_app *app = a->a.app;
    char why[300];
    struct qn_arena ar;
    qn_arena_init(&ar);
    bool enc = false;
    const uint8_t *plain = NULL;
    size_t plen = 0;
    int rc = qn_crypt_open_dead(app, &ar, a->orig_id, a->payload, a->payload_len, &enc, &plain,
                                &plen, why, sizeof why);
    if (rc != QN_OK) {
        qn_arena_free(&ar);
        qn_admin_finish(
            &a->a, rc == QN_ENOMEM ? QN_GRPC_RESOURCE_EXHAUSTED : QN_GRPC_FAILED_PRECONDITION, why);
        return;
    }
    char idtext[QN_UUID_STR_LEN];
    qn_uuid_format(a->dlq_id, idtext);
    snprintf(a->dlq_txn, sizeof a->dlq_txn, "dlq:%s", idtext);
    qn_app_new_id(app, a->msgid);
    struct qn_frame f;
    memset(&f, 0, sizeof f);
    memcpy(f.message_id, a->msgid, 16);
    f.txn = (const uint8_t *)a->dlq_txn;
    f.txn_len = strlen(a->dlq_txn);
    f.payload = plain;
    f.payload_len = plen;
    const qn_principal *who = qn_authz_principal(a->a.call);
    if (who != NULL) {
        /* the replayed message is the replaying principal's */
        f.psub = (const uint8_t *)qn_principal_sub(who);
        f.psub_len = strlen(qn_principal_sub(who));
        f.flags |= QN_FRAME_FLAG_PSUB;
    }
    const uint8_t *tenant = qn_authz_tenant(a->a.call);
    if (qn_crypt_encrypted(app->crypt, tenant, a->queue)) {
        size_t elen = 0;
        rc = qn_crypt_seal(app, a->msgid, plain, plen, &a->sealed, &elen, why, sizeof why);
        if (rc != QN_OK) {
            qn_arena_free(&ar);
            qn_admin_finish(
                &a->a, rc == QN_ENOTFOUND ? QN_GRPC_FAILED_PRECONDITION : QN_GRPC_INTERNAL, why);
            return;
        }
        f.payload = a->sealed;
        f.payload_len = elen;
        f.flags |= QN_FRAME_FLAG_ENCRYPTED;
    }
    qn_txn_hash(f.txn, f.txn_len, a->hash);
    rc = qn_segment_pack(app->zctx, &f, 1, (int)app->cfg->zstd_level, &a->blob, NULL);
    qn_arena_free(&ar); /* the plaintext is packed (or sealed) by now */
    qn_store_txn *t = NULL;
    if (rc == QN_OK)
        rc = qn_store_txn_new(app->store, &t);
    if (rc == QN_OK) {
        struct qn_push_segment seg = {.queue = a->queue,
                                      .partition = a->partition,
                                      .count = 1,
                                      .hashes = a->hash,
                                      .verified = -1,
                                      .blob = a->blob.data,
                                      .blob_len = a->blob.len};
        rc = qn_store_txn_push(t, &seg, 1);
    }
    if (rc == QN_OK)
        rc = qn_store_txn_delete_dlq(t, a->dlq_id);
    if (rc == QN_OK) {
        struct qn_call_opts opts = qn_admin_opts(&a->a);
        rc = qn_store_txn_commit(t, &opts, replay_committed, a, &a->a.sreq[0]);
        t = NULL;
    }
    if (rc != QN_OK) {
        qn_store_txn_abandon(t);
        qn_admin_sent(&a->a, rc);
    }
}

static void replay_ready(struct qn_crypt_wait *w, int rc)
{
    struct replay *a = (struct replay *)((char *)w - offsetof(struct replay, wait));
    if (rc != QN_OK) {
        qn_admin_sent(&a->a, rc);
        return;
    }
    replay_build(a);
}

/* The source and target are allowed: learn whether the target is encrypted. */
static void replay_allowed(struct replay *a)
{
    qn_admin_audit(&a->a, a->queue, "replay dead letter");
    a->targets[0] = a->queue;
    a->wait.done = replay_ready;
    int rc = qn_crypt_ready(a->a.app->crypt, &a->wait, qn_authz_tenant(a->a.call), a->targets, 1);
    if (rc == 1)
        replay_build(a);
    else if (rc < 0)
        qn_admin_finish(&a->a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
}

static void replay_owner(void *ud, const struct qn_store_status *st,
                         const struct qn_pid_queues_result *r)
{
    struct replay *a = ud;
    if (!qn_admin_ok(&a->a, st))
        return;
    if (r->n == 0) {
        qn_admin_finish(&a->a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    if (!qn_admin_authorize(&a->a, r->rows[0].queue) || !qn_admin_authorize(&a->a, a->queue))
        return;
    replay_allowed(a);
}

static void replay_got(void *ud, const struct qn_store_status *st, const struct qn_dlq_result *r)
{
    struct replay *a = ud;
    if (!qn_admin_ok(&a->a, st))
        return;
    if (r->n == 0) {
        qn_admin_finish(&a->a, QN_GRPC_NOT_FOUND, "dead letter not found");
        return;
    }
    const struct qn_dlq_row *d = &r->rows[0];
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)a->a.req;
    snprintf(a->queue, sizeof a->queue, "%s", req->queue && *req->queue ? req->queue : d->queue);
    snprintf(a->partition, sizeof a->partition, "%s",
             req->partition && *req->partition ? req->partition
             : req->queue && *req->queue       ? QN_DEFAULT_PARTITION
                                               : d->partition);
    memcpy(a->pid, d->pid, 16);
    memcpy(a->orig_id, d->message_id, 16);
    a->payload = malloc(d->payload_len ? d->payload_len : 1);
    if (a->payload == NULL) {
        qn_admin_finish(&a->a, QN_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    if (d->payload_len)
        memcpy(a->payload, d->payload, d->payload_len);
    a->payload_len = d->payload_len;
    if (a->queue[0] == '\0') {
        /* the dead letter's queue is gone and no target was named */
        qn_admin_finish(&a->a, QN_GRPC_NOT_FOUND, "dead letter's queue not found: name a queue");
        return;
    }
    if (qn_authz_principal(a->a.call) == NULL) {
        replay_allowed(a);
        return;
    }
    struct qn_call_opts opts = qn_admin_opts(&a->a);
    const uint8_t(*pids)[16] = (const uint8_t(*)[16])a->pid;
    qn_admin_sent(&a->a, qn_store_partition_queues(a->a.app->store, pids, 1, &opts, replay_owner, a,
                                                   &a->a.sreq[0]));
}

void qn_svc_replay_dlq(qn_call *call, ProtobufCMessage *msg)
{
    struct replay *a = (struct replay *)qn_admin_new(call, msg, sizeof *a);
    if (a == NULL)
        return;
    a->a.cleanup = replay_cleanup;
    Queen__V1__ReplayDeadLetterRequest *req = (Queen__V1__ReplayDeadLetterRequest *)msg;
    if (!qn_parse_uuid_str(req->id, a->dlq_id)) {
        qn_admin_finish(&a->a, QN_GRPC_INVALID_ARGUMENT, "id is not a UUID");
        return;
    }
    if (!qn_admin_check_name(&a->a, req->queue, "queue", true) ||
        !qn_admin_check_name(&a->a, req->partition, "partition", true))
        return;
    struct qn_call_opts opts = qn_admin_opts(&a->a);
    qn_admin_sent(
        &a->a, qn_store_get_dlq(a->a.app->store, a->dlq_id, &opts, replay_got, a, &a->a.sreq[0]));
}
