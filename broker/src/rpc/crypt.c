/*
 * rpc/crypt.c - encryption at rest for the services (see crypt.h): the
 * per-(tenant, queue) encryption flag with its lookups and the FIFO of pushes
 * waiting for them, and sealing / opening payloads with the key ring.
 *
 * Entry lifecycle (struct entry):
 *
 *   (absent) --a push needs it--> LOOKING (queue_encrypted_v1 in flight)
 *   LOOKING --answer--> KNOWN (flag, learned_at)
 *   LOOKING --error--> (removed; the waits that needed it fail)
 *   KNOWN --older than the TTL and needed--> KNOWN + refreshing (answers the
 *           old flag meanwhile) --answer--> KNOWN (new flag)
 *
 * Invariants:
 *   1. A wait is served only when it is the head of the FIFO and every queue it
 *      names is KNOWN, so pushes leave in the order they arrived.
 *   2. At most one lookup per entry is in flight.
 *   3. A payload is sealed or opened only with the key ring in force at that
 *      moment (qn_security_keyring), never one kept across loop turns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "app.h"
#include "engine/map.h"
#include "log.h"
#include "queen/envelope.h"
#include "queen/error.h"
#include "queen/store.h"
#include "rpc/crypt.h"
#include "security.h"

enum entry_state { E_LOOKING = 1, E_KNOWN = 2 };

struct entry {
    struct qn_map_node node;
    struct qn_crypt *c;
    enum entry_state state;
    bool encrypted;
    bool refreshing;    /* a lookup for a stale KNOWN entry is in flight */
    int64_t learned_ms; /* KNOWN: monotonic time of the answer */
    qn_store_req *req;  /* the lookup in flight, or NULL */
    size_t klen;
    char key[]; /* tenant (16 bytes), queue name, NUL */
};

struct qn_crypt {
    struct qn_app *app;
    struct qn_map map;
    struct qn_crypt_wait *head, *tail; /* the FIFO (invariant 1) */
    struct event *pump;                /* serves the FIFO from a loop callback */
};

static size_t make_key(const uint8_t tenant[16], const char *queue, char *buf)
{
    size_t ql = strnlen(queue, 255);
    memcpy(buf, tenant, 16);
    memcpy(buf + 16, queue, ql);
    buf[16 + ql] = '\0';
    return 16 + ql;
}

static struct entry *find(const struct qn_crypt *c, const uint8_t tenant[16], const char *queue)
{
    char k[16 + 256];
    struct qn_map_node *n = qn_map_get(&c->map, k, make_key(tenant, queue, k));
    return n ? qn_container_of(n, struct entry, node) : NULL;
}

static void entry_free(struct qn_map_node *n, void *ud)
{
    struct qn_crypt *c = ud;
    struct entry *e = qn_container_of(n, struct entry, node);
    qn_store_cancel(e->req);
    qn_map_remove(&c->map, n);
    free(e);
}

static void schedule_pump(struct qn_crypt *c)
{
    if (c->head != NULL)
        event_active(c->pump, 0, 0);
}

static void lookup_done(void *ud, const struct qn_store_status *st, bool encrypted)
{
    struct entry *e = ud;
    struct qn_crypt *c = e->c;
    e->req = NULL;
    if (st->code != QN_OK) {
        if (e->state == E_KNOWN) {
            e->refreshing = false; /* keep the old flag; the next need retries */
            return;
        }
        /* the waits needing it fail: one error for every wait at the head */
        int rc = st->code;
        const char *queue = e->key + 16;
        QN_WARN("cannot learn whether queue %s is encrypted: %s", queue,
                st->message && *st->message ? st->message : qn_strerror(rc));
        uint8_t tenant[16];
        char qcopy[256];
        memcpy(tenant, e->key, 16);
        snprintf(qcopy, sizeof qcopy, "%s", queue);
        qn_map_remove(&c->map, &e->node);
        free(e);
        for (struct qn_crypt_wait *w = c->head, *next; w != NULL; w = next) {
            next = w->next;
            bool named = false;
            for (size_t i = 0; i < w->n && memcmp(w->tenant, tenant, 16) == 0; i++)
                named |= strcmp(w->queues[i], qcopy) == 0;
            if (!named)
                continue;
            qn_crypt_cancel(w);
            w->done(w, rc); /* may cancel others: next is re-read below */
            next = c->head;
        }
        schedule_pump(c);
        return;
    }
    e->encrypted = encrypted;
    e->state = E_KNOWN;
    e->refreshing = false;
    e->learned_ms = qn_store_now_ms();
    schedule_pump(c);
}

/* Starts a lookup for e (new, or stale and needed). */
static int lookup(struct qn_crypt *c, struct entry *e)
{
    struct qn_call_opts opts = {0, (const uint8_t *)e->key, NULL};
    int rc = qn_store_queue_encrypted(c->app->store, e->key + 16, &opts, lookup_done, e, &e->req);
    if (rc != QN_OK)
        e->req = NULL;
    return rc;
}

static void drop_known(struct qn_map_node *n, void *ud)
{
    struct entry *e = qn_container_of(n, struct entry, node);
    if (e->state == E_KNOWN) /* LOOKING entries stay: waits depend on them */
        entry_free(n, ud);
}

/* A new entry (LOOKING, no lookup yet) in the map, or NULL. */
static struct entry *entry_make(struct qn_crypt *c, const uint8_t tenant[16], const char *queue)
{
    if (c->map.count >= QN_CRYPT_MAX)
        qn_map_each(&c->map, drop_known, c); /* start over */
    char k[16 + 256];
    size_t klen = make_key(tenant, queue, k);
    struct entry *e = calloc(1, sizeof *e + klen + 1);
    if (e == NULL)
        return NULL;
    memcpy(e->key, k, klen + 1);
    e->klen = klen;
    e->c = c;
    e->state = E_LOOKING;
    if (qn_map_put(&c->map, &e->node, e->key, klen) != QN_OK) {
        free(e);
        return NULL;
    }
    return e;
}

/* The entry of (tenant, queue) made known or on its way; *known when KNOWN. A
 * stale KNOWN entry counts as known and is refreshed in the background. */
static int need(struct qn_crypt *c, const uint8_t tenant[16], const char *queue, bool *known)
{
    struct entry *e = find(c, tenant, queue);
    int64_t now = qn_store_now_ms();
    if (e != NULL) {
        *known = e->state == E_KNOWN;
        if (e->state == E_KNOWN && !e->refreshing && now - e->learned_ms > QN_CRYPT_TTL_MS) {
            e->refreshing = true;
            if (lookup(c, e) != QN_OK)
                e->refreshing = false;
        }
        return QN_OK;
    }
    *known = false;
    e = entry_make(c, tenant, queue);
    if (e == NULL)
        return QN_ENOMEM;
    int rc = lookup(c, e);
    if (rc != QN_OK) {
        qn_map_remove(&c->map, &e->node);
        free(e);
        return rc;
    }
    return QN_OK;
}

static bool all_known(struct qn_crypt *c, const struct qn_crypt_wait *w)
{
    for (size_t i = 0; i < w->n; i++) {
        const struct entry *e = find(c, w->tenant, w->queues[i]);
        if (e == NULL || e->state != E_KNOWN)
            return false;
    }
    return true;
}

static void pump_cb(evutil_socket_t fd, short what, void *ud)
{
    (void)fd;
    (void)what;
    struct qn_crypt *c = ud;
    while (c->head != NULL && all_known(c, c->head)) {
        struct qn_crypt_wait *w = c->head;
        qn_crypt_cancel(w);
        w->done(w, QN_OK);
    }
}

int qn_crypt_ready(struct qn_crypt *c, struct qn_crypt_wait *w, const uint8_t tenant[16],
                   const char *const *queues, size_t n)
{
    bool known_all = true;
    for (size_t i = 0; i < n; i++) {
        bool known;
        int rc = need(c, tenant, queues[i], &known);
        if (rc != QN_OK)
            return rc;
        known_all &= known;
    }
    if (known_all && c->head == NULL)
        return 1;
    w->c = c;
    memcpy(w->tenant, tenant, 16);
    w->queues = queues;
    w->n = n;
    w->next = NULL;
    w->prev = c->tail;
    if (c->tail)
        c->tail->next = w;
    else
        c->head = w;
    c->tail = w;
    w->queued = true;
    schedule_pump(c); /* the head may already be servable */
    return 0;
}

void qn_crypt_cancel(struct qn_crypt_wait *w)
{
    if (w == NULL || !w->queued)
        return;
    struct qn_crypt *c = w->c;
    if (w->prev)
        w->prev->next = w->next;
    else
        c->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        c->tail = w->prev;
    w->prev = w->next = NULL;
    w->queued = false;
    schedule_pump(c); /* the next one may be servable now */
}

bool qn_crypt_encrypted(const struct qn_crypt *c, const uint8_t tenant[16], const char *queue)
{
    const struct entry *e = find(c, tenant, queue);
    return e != NULL && e->state == E_KNOWN && e->encrypted;
}

void qn_crypt_learn(struct qn_crypt *c, const uint8_t tenant[16], const char *queue, bool encrypted)
{
    struct entry *e = find(c, tenant, queue);
    if (e == NULL && (e = entry_make(c, tenant, queue)) == NULL)
        return; /* forgotten: the next push looks it up */
    /* an answer in flight is older than what was just stored */
    qn_store_cancel(e->req);
    e->req = NULL;
    e->refreshing = false;
    e->state = E_KNOWN;
    e->encrypted = encrypted;
    e->learned_ms = qn_store_now_ms();
    schedule_pump(c);
}

int qn_crypt_new(struct qn_app *app, struct qn_crypt **out)
{
    struct qn_crypt *c = calloc(1, sizeof *c);
    if (c == NULL)
        return QN_ENOMEM;
    c->app = app;
    qn_map_init(&c->map, QN_CRYPT_MAX + 1);
    c->pump = event_new(app->base, -1, 0, pump_cb, c);
    if (c->pump == NULL) {
        free(c);
        return QN_ENOMEM;
    }
    *out = c;
    return QN_OK;
}

void qn_crypt_free(struct qn_crypt *c)
{
    if (c == NULL)
        return;
    qn_map_each(&c->map, entry_free, c);
    qn_map_destroy(&c->map);
    event_free(c->pump);
    free(c);
}

/* ---------------------------------------------------------------- payloads */

int qn_crypt_seal(struct qn_app *app, const uint8_t msgid[16], const uint8_t *payload, size_t len,
                  uint8_t **env, size_t *env_len, char *why, size_t cap)
{
    const qn_keyring *kr = qn_security_keyring(app->security);
    if (kr == NULL) {
        snprintf(why, cap,
                 "the queue has encryption_enabled but this broker has no key ring "
                 "(QUEEN_ENCRYPTION_KEYRING): nothing was written");
        return QN_ENOTFOUND;
    }
    size_t size;
    int rc = qn_envelope_size(kr, len, &size);
    if (rc != QN_OK) {
        snprintf(why, cap, "payload too large to encrypt");
        return rc;
    }
    uint8_t *b = malloc(size ? size : 1);
    if (b == NULL)
        return QN_ENOMEM;
    rc = qn_envelope_encrypt(kr, msgid, 16, payload, len, b, size, env_len);
    if (rc != QN_OK) {
        free(b);
        snprintf(why, cap, "encryption failed: %s", qn_strerror(rc));
        return rc;
    }
    *env = b;
    return QN_OK;
}

/* A message for a payload that cannot be opened. */
static void open_problem(int rc, const uint8_t *env, size_t len, char *why, size_t cap)
{
    const uint8_t *id = NULL;
    size_t idl = 0;
    if (rc == QN_EENVELOPE_UNKNOWN_KEY && qn_envelope_inspect(env, len, &id, &idl, NULL) == QN_OK)
        snprintf(why, cap, "cannot decrypt: key \"%.*s\" is not in the broker's key ring", (int)idl,
                 (const char *)id);
    else if (rc == QN_EENVELOPE_AUTH)
        snprintf(why, cap,
                 "cannot decrypt: the envelope does not authenticate (wrong key or "
                 "altered bytes)");
    else if (rc == QN_EENVELOPE_MALFORMED)
        snprintf(why, cap, "cannot decrypt: the stored payload is not an envelope");
    else
        snprintf(why, cap, "cannot decrypt: %s", qn_strerror(rc));
}

int qn_crypt_open(struct qn_app *app, struct qn_arena *arena, const uint8_t msgid[16],
                  const uint8_t *env, size_t len, const uint8_t **out, size_t *out_len, char *why,
                  size_t cap)
{
    const qn_keyring *kr = qn_security_keyring(app->security);
    if (kr == NULL) {
        snprintf(why, cap,
                 "cannot decrypt: the payload is stored encrypted and this broker has no key ring "
                 "(QUEEN_ENCRYPTION_KEYRING)");
        return QN_EENVELOPE_UNKNOWN_KEY;
    }
    size_t plen = 0;
    int rc = qn_envelope_inspect(env, len, NULL, NULL, &plen);
    if (rc != QN_OK && len > 0 && env[0] == '{') {
        /* Queen MQ's JSON envelope: its plaintext is shorter than its text */
        uint8_t *b = qn_arena_alloc(arena, len);
        size_t w = 0;
        if (b == NULL)
            return QN_ENOMEM;
        rc = qn_envelope_decrypt_queen_json(kr, env, len, b, len, &w);
        if (rc == QN_OK) {
            *out = w ? b : NULL;
            *out_len = w;
            return QN_OK;
        }
        open_problem(rc, env, len, why, cap);
        return rc;
    }
    if (rc != QN_OK) {
        open_problem(rc, env, len, why, cap);
        return rc;
    }
    uint8_t *b = qn_arena_alloc(arena, plen ? plen : 1);
    if (b == NULL)
        return QN_ENOMEM;
    size_t w = 0;
    rc = qn_envelope_decrypt(kr, msgid, 16, env, len, b, plen ? plen : 1, &w);
    if (rc != QN_OK) {
        open_problem(rc, env, len, why, cap);
        return rc;
    }
    *out = w ? b : NULL;
    *out_len = w;
    return QN_OK;
}

int qn_crypt_open_dead(struct qn_app *app, struct qn_arena *arena, const uint8_t msgid[16],
                       const uint8_t *payload, size_t len, bool *encrypted, const uint8_t **out,
                       size_t *out_len, char *why, size_t cap)
{
    *encrypted = qn_envelope_inspect(payload, len, NULL, NULL, NULL) == QN_OK;
    if (!*encrypted) {
        *out = payload;
        *out_len = len;
        return QN_OK;
    }
    return qn_crypt_open(app, arena, msgid, payload, len, out, out_len, why, cap);
}
