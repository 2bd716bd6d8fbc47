/*
 * test_store_pool.c - store_pool.c: TCP keepalives and tcp_user_timeout on every
 * connection, and what happens to calls when a connection hangs or drops.
 * The database sits behind a test TCP proxy (test/support/tcpproxy.c) that can
 * silence one connection (no RST: the peer sees nothing) or cut it, and reports
 * what it forwarded and held: tests wait on those counts, never on a sleep.
 *
 * Checked: a push whose commit went through but whose answer is silenced ends
 * QN_EINDOUBT by its deadline, its rows are in the table, a call on another
 * connection is not delayed, the silenced connection is declared hung, logged,
 * closed and replaced; a hang is found without any deadline too (call
 * timeout); a cut after the commit is QN_EINDOUBT at once; a write still queued
 * when the only connection drops was never sent (QN_EUNAVAILABLE, not written);
 * a sent read is QN_EUNAVAILABLE.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/event.h>

#include "pgtest.h"
#include "queen/error.h"
#include "storage_test.h"
#include "store_int.h"
#include "tcpproxy.h"

static struct event_base *B;
static char *CI;  /* the database, directly */
static char *VIA; /* the same database through the proxy */
static struct qt_proxy *P;

static void setup(void)
{
    B = event_base_new();
    ck_assert_ptr_nonnull(B);
    CI = qt_db_schema("qn_storage_pool");
    char host[128];
    int port = 0;
    char *tmp = qt_conninfo_via(CI, 1, host, &port);
    free(tmp);
    ck_assert_int_gt(port, 0);
    ck_assert_int_eq(qt_proxy_start(host[0] ? host : "127.0.0.1", port, &P), 0);
    VIA = qt_conninfo_via(CI, qt_proxy_port(P), NULL, NULL);
}

static void teardown(void)
{
    qt_proxy_stop(P);
    event_base_free(B);
    free(CI);
    free(VIA);
}

/* ---------------------------------------------------------------- helpers */

static char logged[1024];
static int nwarn;

static void on_log(void *ud, int level, const char *msg)
{
    (void)ud;
    if (level >= QN_STORE_LOG_WARN) {
        nwarn++;
        snprintf(logged, sizeof logged, "%s", msg);
    }
}

static qn_store *proxied_store(int pool, int reserve, int call_timeout_ms, int grace_ms)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA;
    cfg.pool_size = pool;
    cfg.write_reserve = reserve;
    cfg.call_timeout_ms = call_timeout_ms;
    cfg.cancel_grace_ms = grace_ms;
    cfg.reconnect_min_ms = 50;
    cfg.log = on_log;
    nwarn = 0;
    logged[0] = '\0';
    return qt_store_cfg(B, &cfg);
}

static int local_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

/* The proxy's id of store connection idx. */
static int proxy_conn_of(qn_store *st, int idx)
{
    int fd = qn__store_conn_socket(st, idx);
    ck_assert_int_ge(fd, 0);
    int id = qt_proxy_find(P, local_port(fd));
    ck_assert_int_ge(id, 0);
    return id;
}

struct call_cap {
    struct qt_status s;
    int64_t at_ms;
};

static void push_cb(void *ud, const struct qn_store_status *st, const struct qn_push_result *res)
{
    struct call_cap *k = ud;
    (void)res;
    qt_copy_status(&k->s, st);
    k->at_ms = qn_store_now_ms();
}

static void raw_cb(void *ud, const struct qn_store_status *st, const PGresult *res)
{
    struct call_cap *k = ud;
    (void)res;
    qt_copy_status(&k->s, st);
    k->at_ms = qn_store_now_ms();
}

static void push_async(qn_store *st, const char *queue, struct qt_seg *seg, int64_t deadline,
                       struct call_cap *k)
{
    memset(k, 0, sizeof *k);
    struct qn_push_segment s = qt_push_seg(seg, queue, "p");
    struct qn_call_opts o = {deadline, NULL, NULL};
    ck_assert_int_eq(qn_store_push(st, &s, 1, false, &o, push_cb, k, NULL), QN_OK);
}

struct resolved {
    struct qt_status s;
    int status;
    size_t ndups;
    int64_t dup_off[8];
};

static void resolve_cb(void *ud, const struct qn_store_status *st, const struct qn_push_result *res)
{
    struct resolved *k = ud;
    qt_copy_status(&k->s, st);
    if (res == NULL || res->n != 1)
        return;
    k->status = res->segs[0].status;
    k->ndups = res->segs[0].ndups;
    for (size_t i = 0; i < k->ndups && i < 8; i++)
        k->dup_off[i] = res->segs[0].dups[i].offset;
}

/* qn_store_push_resolve of one segment, waited for. */
static void resolve(qn_store *st, const char *queue, struct qt_seg *seg, struct resolved *k)
{
    memset(k, 0, sizeof *k);
    k->status = -1;
    struct qn_push_segment s = qt_push_seg(seg, queue, "p");
    ck_assert_int_eq(qn_store_push_resolve(st, &s, 1, NULL, resolve_cb, k, NULL), QN_OK);
    ck_assert(qt_run_until(B, &k->s.done, 10000));
    ck_assert_msg(k->s.code == QN_OK, "%s", k->s.message);
}

/* Frames of queue stored in the database, read directly. */
static long stored(const char *queue)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT coalesce(sum(s.end_offset - s.base_offset + 1), 0) FROM queen.log_segments "
             "s JOIN queen.log_partitions p ON p.id = s.partition_id JOIN queen.queues q ON "
             "q.id = p.queue_id WHERE q.name = '%s'",
             queue);
    char *v = qt_value(CI, sql);
    long n = atol(v);
    free(v);
    return n;
}

/* Runs the loop until the proxy held min bytes of conn in direction dir. */
static bool until_held(int conn, int dir, uint64_t min, int timeout_ms)
{
    int64_t end = qn_store_now_ms() + timeout_ms;
    struct qt_proxy_counts k;
    do {
        qt_run_for(B, 2);
        ck_assert_int_eq(qt_proxy_counts(P, conn, &k), 0);
        if (k.held[dir == QT_UP ? 0 : 1] >= min)
            return true;
    } while (qn_store_now_ms() < end);
    return false;
}

static bool until_up(qn_store *st, uint32_t conns, int timeout_ms)
{
    int64_t end = qn_store_now_ms() + timeout_ms;
    struct qn_store_stats s;
    do {
        qt_run_for(B, 5);
        qn_store_get_stats(st, &s);
    } while (s.connections_up < conns && qn_store_now_ms() < end);
    return s.connections_up >= conns;
}

/* ---------------------------------------------------------------- keepalives */

static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    ck_assert_int_eq(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

START_TEST(keepalives_on_every_connection)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA; /* TCP whatever the cluster's own conninfo says */
    cfg.pool_size = 2;
    cfg.keepalives_idle_s = 11;
    cfg.keepalives_interval_s = 4;
    cfg.keepalives_count = 6;
    cfg.tcp_user_timeout_ms = 12345;
    qn_store *st = qt_store_cfg(B, &cfg);
    for (int i = 0; i < 2; i++) {
        int fd = qn__store_conn_socket(st, i);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(sockopt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE), 11);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL), 4);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_KEEPCNT), 6);
        ck_assert_int_eq(sockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 12345);
    }
    qn_store_free(st);

    /* an explicit setting in the connection string wins */
    size_t n = strlen(VIA) + 64;
    char *ci = malloc(n);
    snprintf(ci, n, "%s keepalives_idle=77", VIA);
    cfg.conninfo = ci;
    cfg.pool_size = 1;
    st = qt_store_cfg(B, &cfg);
    ck_assert_int_eq(sockopt(qn__store_conn_socket(st, 0), IPPROTO_TCP, TCP_KEEPIDLE), 77);
    qn_store_free(st);
    free(ci);

    /* bounds */
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA;
    ck_assert_int_eq(cfg.keepalives_idle_s, 10);
    ck_assert_int_eq(cfg.tcp_user_timeout_ms, 20000);
    cfg.keepalives_interval_s = 0;
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA;
    cfg.tcp_user_timeout_ms = -1;
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA;
    cfg.cancel_grace_ms = 0;
    ck_assert_int_eq(qn_store_new(B, &cfg, &st), QN_EINVAL);
}
END_TEST

/* ---------------------------------------------------------------- hangs */

/* The acceptance case of the silenced connection: the push's commit reaches
 * the server, its answer never comes back. */
START_TEST(silenced_answer_is_in_doubt_and_the_pool_recovers)
{
    /* conn 0 is reserved for writes, so the push goes there and the read to 1 */
    qn_store *st = proxied_store(2, 1, 60000, 300);
    int w = proxy_conn_of(st, 0);
    ck_assert_int_eq(qt_proxy_silence(P, w, QT_DOWN), 0);
    struct qt_seg seg;
    qt_seg_make(&seg, 3, "silenced", 0);
    struct call_cap push, read;
    int64_t t0 = qn_store_now_ms();
    push_async(st, "silenced_q", &seg, t0 + 1500, &push);
    /* the server answered (so the commit happened): the proxy holds the answer */
    ck_assert(until_held(w, QT_DOWN, 1, 5000));
    ck_assert_int_eq(stored("silenced_q"), 3);
    /* a call on the other connection is not delayed by the hung one */
    memset(&read, 0, sizeof read);
    int64_t r0 = qn_store_now_ms();
    ck_assert_int_eq(qn__store_sql(st, -1, "SELECT 1", NULL, NULL, 1, NULL, raw_cb, &read, NULL),
                     QN_OK);
    ck_assert(qt_run_until(B, &read.s.done, 5000));
    ck_assert_int_eq(read.s.code, QN_OK);
    ck_assert_int_lt(read.at_ms - r0, 300);
    ck_assert(!push.s.done);
    /* the push ends by its deadline, in doubt (it did commit) */
    ck_assert(qt_run_until(B, &push.s.done, 5000));
    ck_assert_msg(push.s.code == QN_EINDOUBT, "%d %s", push.s.code, push.s.message);
    ck_assert_int_ge(push.at_ms - t0, 1490);
    ck_assert_int_le(push.at_ms - t0, 2000);
    ck_assert_int_eq(push.s.calls, 1);
    /* the silent connection is declared hung (no answer to the server cancel
     * within the grace), logged, closed and replaced */
    struct qn_store_stats s;
    int64_t end = qn_store_now_ms() + 5000;
    do {
        qt_run_for(B, 5);
        qn_store_get_stats(st, &s);
    } while (s.hung == 0 && qn_store_now_ms() < end);
    ck_assert_uint_eq(s.hung, 1);
    ck_assert_int_eq(nwarn, 1);
    ck_assert_msg(strstr(logged, "connection 0") != NULL && strstr(logged, "qn_push") != NULL, "%s",
                  logged);
    ck_assert(until_up(st, 2, 5000));
    ck_assert_int_ge(qt_proxy_nconns(P), 3);
    /* and it serves: resolving the push finds the rows it stored */
    struct resolved res;
    resolve(st, "silenced_q", &seg, &res);
    ck_assert_int_eq(res.status, QN_PUSH_DUPLICATE);
    ck_assert_uint_eq(res.ndups, 3);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_int_eq(res.dup_off[i], i);
    ck_assert_int_eq(stored("silenced_q"), 3);
    qt_seg_free(&seg);
    qn_store_free(st);
}
END_TEST

/* No deadline at all: the call timeout alone finds the hung connection. */
START_TEST(hang_found_without_a_deadline)
{
    qn_store *st = proxied_store(1, 0, 400, 2000);
    int w = proxy_conn_of(st, 0);
    ck_assert_int_eq(qt_proxy_silence(P, w, QT_BOTH), 0);
    struct qt_seg seg;
    qt_seg_make(&seg, 1, "nodl", 0);
    struct call_cap push;
    int64_t t0 = qn_store_now_ms();
    push_async(st, "nodl_q", &seg, 0, &push);
    ck_assert(until_held(w, QT_UP, 1, 5000));
    ck_assert(qt_run_until(B, &push.s.done, 5000));
    /* silenced both ways: it never reached the server, but nobody can know */
    ck_assert_int_eq(push.s.code, QN_EINDOUBT);
    ck_assert_int_ge(push.at_ms - t0, 390);
    ck_assert_int_le(push.at_ms - t0, 1500);
    ck_assert_int_eq(stored("nodl_q"), 0);
    ck_assert_int_eq(nwarn, 1);
    ck_assert(until_up(st, 1, 5000));
    /* resolving it stores it, once */
    struct resolved res;
    resolve(st, "nodl_q", &seg, &res);
    ck_assert_int_eq(res.status, QN_PUSH_QUEUED);
    ck_assert_int_eq(stored("nodl_q"), 1);
    resolve(st, "nodl_q", &seg, &res);
    ck_assert_int_eq(res.status, QN_PUSH_DUPLICATE);
    ck_assert_int_eq(stored("nodl_q"), 1);
    qt_seg_free(&seg);
    qn_store_free(st);
}
END_TEST

/* The connection drops after the commit went through, before the answer. */
START_TEST(cut_after_commit_is_in_doubt)
{
    qn_store *st = proxied_store(1, 0, 60000, 2000);
    int w = proxy_conn_of(st, 0);
    ck_assert_int_eq(qt_proxy_silence(P, w, QT_DOWN), 0);
    struct qt_seg seg;
    qt_seg_make(&seg, 2, "cut", 0);
    struct call_cap push, read;
    push_async(st, "cut_q", &seg, 0, &push);
    /* a read pipelined behind it on the same connection */
    memset(&read, 0, sizeof read);
    ck_assert_int_eq(qn__store_sql(st, -1, "SELECT 1", NULL, NULL, 1, NULL, raw_cb, &read, NULL),
                     QN_OK);
    ck_assert(until_held(w, QT_DOWN, 1, 5000));
    ck_assert_int_eq(stored("cut_q"), 2);
    int64_t t0 = qn_store_now_ms();
    ck_assert_int_eq(qt_proxy_cut(P, w), 0);
    ck_assert(qt_run_until(B, &push.s.done, 5000));
    ck_assert_msg(push.s.code == QN_EINDOUBT, "%d %s", push.s.code, push.s.message);
    ck_assert_int_lt(push.at_ms - t0, 1000);
    ck_assert(qt_run_until(B, &read.s.done, 5000));
    ck_assert_int_eq(read.s.code, QN_EUNAVAILABLE); /* a read keeps the plain error */
    ck_assert(until_up(st, 1, 5000));
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.in_doubt, 1);
    ck_assert_uint_eq(s.hung, 0);
    qt_seg_free(&seg);
    qn_store_free(st);
}
END_TEST

/* A write still queued when the only connection drops was never sent: nothing
 * was written, and it says so. */
START_TEST(queued_write_of_a_lost_connection_was_not_sent)
{
    struct qn_store_config cfg;
    qn_store_config_defaults(&cfg);
    cfg.conninfo = VIA;
    cfg.pool_size = 1;
    cfg.pipeline_depth = 1;
    cfg.reconnect_min_ms = 2000; /* the queued call must not find a new connection */
    cfg.reconnect_max_ms = 2000;
    qn_store *st = qt_store_cfg(B, &cfg);
    int w = proxy_conn_of(st, 0);
    ck_assert_int_eq(qt_proxy_silence(P, w, QT_DOWN), 0);
    struct qt_seg s1, s2;
    qt_seg_make(&s1, 1, "first", 0);
    qt_seg_make(&s2, 1, "second", 0);
    struct call_cap a, b;
    push_async(st, "q1_q", &s1, 0, &a);
    push_async(st, "q2_q", &s2, 0, &b); /* depth 1: waits for a */
    ck_assert(until_held(w, QT_DOWN, 1, 5000));
    struct qn_store_stats s;
    qn_store_get_stats(st, &s);
    ck_assert_uint_eq(s.waiting, 1);
    ck_assert_int_eq(qt_proxy_cut(P, w), 0);
    ck_assert(qt_run_until(B, &a.s.done, 5000));
    ck_assert(qt_run_until(B, &b.s.done, 5000));
    ck_assert_int_eq(a.s.code, QN_EINDOUBT);
    ck_assert_int_eq(b.s.code, QN_EUNAVAILABLE);
    ck_assert_int_eq(stored("q1_q"), 1);
    ck_assert_int_eq(stored("q2_q"), 0);
    qt_seg_free(&s1);
    qt_seg_free(&s2);
    qn_store_free(st);
}
END_TEST

Suite *qn_test_store_pool_suite(void)
{
    Suite *s = suite_create("store_pool");
    TCase *t = tcase_create("store_pool");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_set_timeout(t, 60);
    tcase_add_test(t, keepalives_on_every_connection);
    tcase_add_test(t, silenced_answer_is_in_doubt_and_the_pool_recovers);
    tcase_add_test(t, hang_found_without_a_deadline);
    tcase_add_test(t, cut_after_commit_is_in_doubt);
    tcase_add_test(t, queued_write_of_a_lost_connection_was_not_sent);
    suite_add_tcase(s, t);
    return s;
}
