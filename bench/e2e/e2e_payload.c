/*
 * e2e_payload.c - JSON-like and random payloads (see e2e_payload.h).
 *
 * Deliberately cheap: no snprintf on the hot path, a table-driven writer and a
 * xorshift generator, because the load generator shares two cores with the
 * broker and PostgreSQL. Invariants:
 *   1. e2e_payload_fill writes exactly g->size bytes, never more.
 *   2. a json payload is valid JSON and starts with {"ts":DDDDDDDDDDDDDDDD.
 */
#include "e2e_payload.h"

#include <string.h>

#define TS_DIGITS 16
#define JSON_TS_OFF 6 /* strlen("{\"ts\":") */

static uint64_t next(struct e2e_payload_gen *g)
{
    uint64_t x = g->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    g->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

void e2e_payload_init(struct e2e_payload_gen *g, enum e2e_payload_kind kind, size_t size,
                      uint64_t seed)
{
    g->kind = kind;
    g->size = size < E2E_PAYLOAD_MIN ? E2E_PAYLOAD_MIN : size;
    g->rng = seed ^ 0x9E3779B97F4A7C15ULL;
    if (g->rng == 0)
        g->rng = 1;
    g->seq = 0;
}

/* ---------------------------------------------------------------- writer */

struct w {
    uint8_t *p;
    size_t cap; /* bytes that may be written */
    size_t len;
    bool over; /* a write did not fit; len unchanged by it */
};

static void put(struct w *w, const char *s, size_t n)
{
    if (w->over || n > w->cap - w->len) {
        w->over = true;
        return;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
}

#define PUTL(w, lit) put((w), (lit), sizeof(lit) - 1)

static void puts_(struct w *w, const char *s)
{
    put(w, s, strlen(s));
}

static void put_u64(struct w *w, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[sizeof tmp - 1 - n] = (char)('0' + v % 10);
        v /= 10;
        n++;
    } while (v != 0);
    put(w, tmp + sizeof tmp - n, n);
}

static void put_u64_fixed(struct w *w, uint64_t v, unsigned digits)
{
    char tmp[20];
    if (digits > sizeof tmp)
        digits = sizeof tmp;
    for (unsigned i = digits; i-- > 0;) {
        tmp[i] = (char)('0' + v % 10);
        v /= 10;
    }
    put(w, tmp, digits);
}

static void put_hex(struct w *w, uint64_t v, unsigned digits)
{
    static const char hx[] = "0123456789abcdef";
    char tmp[16];
    if (digits > sizeof tmp)
        digits = sizeof tmp;
    for (unsigned i = digits; i-- > 0;) {
        tmp[i] = hx[v & 15];
        v >>= 4;
    }
    put(w, tmp, digits);
}

/* ---------------------------------------------------------------- vocabulary */

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const first_names[] = {
    "Maria", "Jose",   "Wei",   "Aiko",   "Olga", "Liam",  "Noah",  "Emma",   "Sofia", "Mateo",
    "Chen",  "Fatima", "Yusuf", "Ingrid", "Lars", "Priya", "Arjun", "Zanele", "Kofi",  "Ana",
};
static const char *const last_names[] = {
    "Rossi",  "Garcia", "Zhang",    "Sato",   "Ivanova", "Smith",  "Muller",
    "Dubois", "Silva",  "Kowalski", "Nguyen", "Haddad",  "Yilmaz", "Larsen",
    "Sharma", "Okafor", "Mensah",   "Novak",  "Costa",   "Berg",
};
static const char *const countries[] = {"IT", "ES", "CN", "JP", "RU", "US", "DE", "FR",
                                        "BR", "PL", "VN", "LB", "TR", "NO", "IN", "NG"};
static const char *const events[] = {"order.created",    "order.paid",    "order.shipped",
                                     "order.cancelled",  "cart.updated",  "user.signup",
                                     "payment.refunded", "invoice.issued"};
static const char *const currencies[] = {"EUR", "USD", "GBP", "JPY", "BRL", "INR"};
static const char *const statuses[] = {"pending",   "paid",      "shipped",
                                       "delivered", "cancelled", "on_hold"};
static const char *const tags[] = {"web",     "mobile", "promo", "vip",   "gift",
                                   "express", "b2b",    "retry", "first", "bulk"};
static const char *const words[] = {
    "please", "deliver", "before",  "noon",   "leave", "at",   "the",      "door", "call",
    "on",     "arrival", "fragile", "handle", "with",  "care", "gift",     "wrap", "thanks",
    "second", "floor",   "ring",    "bell",   "twice", "back", "entrance", "no",   "invoice",
};

static const char *pick(struct e2e_payload_gen *g, const char *const *tab, size_t n)
{
    return tab[next(g) % n];
}

/* Appends one field; if it does not fit (leaving one byte for the closing
 * brace) the writer is rolled back and false returned. */
typedef void (*field_fn)(struct e2e_payload_gen *g, struct w *w);

static bool field(struct e2e_payload_gen *g, struct w *w, field_fn fn)
{
    size_t saved = w->len;
    size_t cap = w->cap;
    w->cap = cap - 1;
    fn(g, w);
    w->cap = cap;
    if (w->over) {
        w->over = false;
        w->len = saved;
        return false;
    }
    return true;
}

static void f_seq(struct e2e_payload_gen *g, struct w *w)
{
    PUTL(w, ",\"seq\":");
    put_u64(w, g->seq);
}

static void f_type(struct e2e_payload_gen *g, struct w *w)
{
    PUTL(w, ",\"type\":\"");
    puts_(w, pick(g, events, COUNT(events)));
    PUTL(w, "\"");
}

static void f_user(struct e2e_payload_gen *g, struct w *w)
{
    PUTL(w, ",\"user\":{\"id\":");
    put_u64(w, next(g) % 5000000u);
    PUTL(w, ",\"name\":\"");
    puts_(w, pick(g, first_names, COUNT(first_names)));
    PUTL(w, " ");
    puts_(w, pick(g, last_names, COUNT(last_names)));
    PUTL(w, "\",\"country\":\"");
    puts_(w, pick(g, countries, COUNT(countries)));
    PUTL(w, "\"}");
}

static void f_order(struct e2e_payload_gen *g, struct w *w)
{
    uint64_t r = next(g);
    PUTL(w, ",\"order\":{\"id\":\"ord-");
    put_hex(w, r, 8);
    PUTL(w, "\",\"amount\":");
    put_u64(w, (r >> 32) % 2000u);
    PUTL(w, ".");
    put_u64_fixed(w, (r >> 44) % 100u, 2);
    PUTL(w, ",\"currency\":\"");
    puts_(w, pick(g, currencies, COUNT(currencies)));
    PUTL(w, "\",\"items\":");
    put_u64(w, 1 + (r >> 56) % 12u);
    PUTL(w, "}");
}

static void f_status(struct e2e_payload_gen *g, struct w *w)
{
    PUTL(w, ",\"status\":\"");
    puts_(w, pick(g, statuses, COUNT(statuses)));
    PUTL(w, "\"");
}

static void f_tags(struct e2e_payload_gen *g, struct w *w)
{
    unsigned n = (unsigned)(next(g) % 3u);
    PUTL(w, ",\"tags\":[");
    for (unsigned i = 0; i < n; i++) {
        if (i > 0)
            PUTL(w, ",");
        PUTL(w, "\"");
        puts_(w, pick(g, tags, COUNT(tags)));
        PUTL(w, "\"");
    }
    PUTL(w, "]");
}

static void json_fill(struct e2e_payload_gen *g, uint8_t *out, uint64_t ts_us)
{
    struct w w = {.p = out, .cap = g->size, .len = 0, .over = false};
    /* size >= E2E_PAYLOAD_MIN == strlen("{\"ts\":") + 16 + strlen("}") + 1. */
    PUTL(&w, "{\"ts\":");
    put_u64_fixed(&w, ts_us, TS_DIGITS);
    static const field_fn fields[] = {f_seq, f_type, f_user, f_order, f_status, f_tags};
    for (size_t i = 0; i < COUNT(fields); i++)
        (void)field(g, &w, fields[i]);
    /* Fill the rest with a free-text note so the object is exactly size bytes. */
    size_t room = w.cap - 1 - w.len; /* before the closing brace */
    if (room >= 10) {
        PUTL(&w, ",\"note\":\"");
        size_t text = room - 10;
        size_t end = w.len + text;
        while (w.len < end) {
            const char *word = pick(g, words, COUNT(words));
            size_t n = strlen(word);
            if (n > end - w.len)
                n = end - w.len;
            put(&w, word, n);
            if (w.len < end)
                PUTL(&w, " ");
        }
        PUTL(&w, "\"");
    } else {
        while (room-- > 0)
            PUTL(&w, " ");
    }
    PUTL(&w, "}");
}

static void random_fill(struct e2e_payload_gen *g, uint8_t *out, uint64_t ts_us)
{
    for (unsigned i = 0; i < 8; i++)
        out[i] = (uint8_t)(ts_us >> (8 * i));
    size_t off = 8;
    while (off < g->size) {
        uint64_t r = next(g);
        size_t n = g->size - off < 8 ? g->size - off : 8;
        memcpy(out + off, &r, n);
        off += n;
    }
}

void e2e_payload_fill(struct e2e_payload_gen *g, uint8_t *out, uint64_t ts_us)
{
    g->seq++;
    if (g->kind == E2E_PAYLOAD_JSON)
        json_fill(g, out, ts_us);
    else
        random_fill(g, out, ts_us);
}

bool e2e_payload_ts(enum e2e_payload_kind kind, const uint8_t *p, size_t len, uint64_t *ts_us)
{
    uint64_t v = 0;
    if (kind == E2E_PAYLOAD_JSON) {
        if (len < JSON_TS_OFF + TS_DIGITS || memcmp(p, "{\"ts\":", JSON_TS_OFF) != 0)
            return false;
        for (unsigned i = 0; i < TS_DIGITS; i++) {
            uint8_t c = p[JSON_TS_OFF + i];
            if (c < '0' || c > '9')
                return false;
            v = v * 10 + (uint64_t)(c - '0');
        }
    } else {
        if (len < 8)
            return false;
        for (unsigned i = 0; i < 8; i++)
            v |= (uint64_t)p[i] << (8 * i);
    }
    *ts_us = v;
    return true;
}

bool e2e_payload_kind_parse(const char *s, enum e2e_payload_kind *out)
{
    if (strcmp(s, "json") == 0) {
        *out = E2E_PAYLOAD_JSON;
        return true;
    }
    if (strcmp(s, "random") == 0) {
        *out = E2E_PAYLOAD_RANDOM;
        return true;
    }
    return false;
}

const char *e2e_payload_kind_name(enum e2e_payload_kind kind)
{
    return kind == E2E_PAYLOAD_JSON ? "json" : "random";
}
