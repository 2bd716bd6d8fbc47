/*
 * engine/hring.c - see hring.h.
 *
 * Invariants:
 *   1. Every sealed block holds exactly QN_HRING_BLOCK hashes in ascending
 *      memcmp order and never changes after sealing.
 *   2. Blocks are ordered by time: a block's hashes are all older than or as old
 *      as the next block's and the hot buffer's.
 *   3. Every resident hash (block or hot) is in the bloom of exactly one
 *      generation: the one that was current when it was appended. A generation
 *      changes only when the hot buffer is sealed or dropped, so a block and the
 *      hot buffer each belong to exactly one generation.
 *   4. A generation is freed when it is not current and none of its blocks
 *      survive.
 *   5. No allocation exceeds 64 KiB (one block), the block pointer array aside,
 *      which stays small (8 bytes per block).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/hring.h"
#include "queen/error.h"

#define HASH 16u
#define LINE_BYTES 64u /* one bloom line = one cache line */
#define PAGE_BYTES (64u * 1024u)
#define LINES_PER_PAGE (PAGE_BYTES / LINE_BYTES)
#define BITS_PER_HASH 16u /* bloom bits per hash of capacity */
#define BLOOM_K 7u

struct qn_hring_block {
    uint8_t *hashes; /* QN_HRING_BLOCK * 16 bytes, sorted */
    int64_t max_offset;
    int64_t max_created_ms;
    struct qn_hring_gen *gen;
    uint64_t seq;
};

struct qn_hring_gen {
    struct qn_hring_gen *next;
    uint8_t **pages; /* npages pages of PAGE_BYTES */
    size_t npages;
    size_t nlines;
    size_t capacity;    /* hashes it was sized for */
    size_t count;       /* hashes inserted */
    size_t live_blocks; /* sealed blocks still resident */
    uint64_t first_seq; /* seq of its oldest sealed block */
};

void qn_hring_init(struct qn_hring *r)
{
    memset(r, 0, sizeof *r);
    r->hot_max_offset = -1;
    r->hot_max_created_ms = INT64_MIN;
}

/* ---------------------------------------------------------------- bloom */

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Bytes of page i: full pages, except the last, which holds only the lines
 * left over (a generation smaller than a page does not cost a whole page). */
static size_t page_bytes(const struct qn_hring_gen *g, size_t i)
{
    size_t left = g->nlines - i * LINES_PER_PAGE;
    return (left < LINES_PER_PAGE ? left : LINES_PER_PAGE) * LINE_BYTES;
}

/* Accounted bytes of a generation: its lines, page array and header. */
static size_t gen_bytes(const struct qn_hring_gen *g)
{
    return g->nlines * LINE_BYTES + g->npages * sizeof *g->pages + sizeof *g;
}

static void gen_free(struct qn_hring *r, struct qn_hring_gen *g)
{
    for (size_t i = 0; i < g->npages; i++)
        free(g->pages[i]);
    r->bytes -= gen_bytes(g);
    free(g->pages);
    free(g);
}

static struct qn_hring_gen *gen_new(struct qn_hring *r, size_t capacity)
{
    struct qn_hring_gen *g = calloc(1, sizeof *g);
    if (g == NULL)
        return NULL;
    size_t bytes = capacity * BITS_PER_HASH / 8;
    g->nlines = bytes / LINE_BYTES;
    if (g->nlines == 0)
        g->nlines = 1;
    g->npages = (g->nlines + LINES_PER_PAGE - 1) / LINES_PER_PAGE;
    g->pages = calloc(g->npages, sizeof *g->pages);
    if (g->pages == NULL) {
        free(g);
        return NULL;
    }
    for (size_t i = 0; i < g->npages; i++) {
        g->pages[i] = calloc(1, page_bytes(g, i));
        if (g->pages[i] == NULL) {
            for (size_t j = 0; j < i; j++)
                free(g->pages[j]);
            free(g->pages);
            free(g);
            return NULL;
        }
    }
    g->capacity = capacity;
    g->first_seq = UINT64_MAX;
    r->bytes += gen_bytes(g);
    return g;
}

/* The line and the bit positions of h: the hash bits are already uniform, so
 * they are used directly (low 64 bits pick the line, high 64 the bits). */
static uint8_t *bloom_line(const struct qn_hring_gen *g, const uint8_t *h)
{
    size_t line = (size_t)(rd64(h + 8) % g->nlines);
    return g->pages[line / LINES_PER_PAGE] + (line % LINES_PER_PAGE) * LINE_BYTES;
}

static void bloom_add(struct qn_hring_gen *g, const uint8_t *h)
{
    uint8_t *line = bloom_line(g, h);
    uint64_t bits = rd64(h);
    for (unsigned k = 0; k < BLOOM_K; k++, bits >>= 9) {
        unsigned b = (unsigned)(bits & 511u);
        line[b >> 3] |= (uint8_t)(1u << (b & 7u));
    }
    g->count++;
}

/* Tests h against an already located line (see qn_hring_contains). */
static bool bloom_line_has(const uint8_t *line, const uint8_t *h)
{
    uint64_t bits = rd64(h);
    for (unsigned k = 0; k < BLOOM_K; k++, bits >>= 9) {
        unsigned b = (unsigned)(bits & 511u);
        if (!(line[b >> 3] & (1u << (b & 7u))))
            return false;
    }
    return true;
}

static bool bloom_has(const struct qn_hring_gen *g, const uint8_t *h)
{
    const uint8_t *line = bloom_line(g, h);
    uint64_t bits = rd64(h);
    for (unsigned k = 0; k < BLOOM_K; k++, bits >>= 9) {
        unsigned b = (unsigned)(bits & 511u);
        if (!(line[b >> 3] & (1u << (b & 7u))))
            return false;
    }
    return true;
}

/* The current generation, opened when there is none. */
/* n rounded up to whole blocks, clamped to [one block, QN_HRING_GEN_MAX]. */
static size_t gen_capacity(size_t n)
{
    size_t cap = (n + QN_HRING_BLOCK - 1) / QN_HRING_BLOCK * QN_HRING_BLOCK;
    if (cap < QN_HRING_BLOCK)
        cap = QN_HRING_BLOCK;
    if (cap > QN_HRING_GEN_MAX)
        cap = QN_HRING_GEN_MAX;
    return cap;
}

/* The current generation, opened when there is none (sized by the expect
 * hint, which it consumes). */
static struct qn_hring_gen *gen_current(struct qn_hring *r)
{
    if (r->gen_tail != NULL)
        return r->gen_tail;
    struct qn_hring_gen *g = gen_new(r, gen_capacity(r->expect));
    if (g == NULL)
        return NULL;
    r->expect = 0;
    r->gen_head = r->gen_tail = g;
    return g;
}

void qn_hring_expect(struct qn_hring *r, size_t n)
{
    if (r->gen_tail == NULL)
        r->expect = n;
}

/* At a seal boundary: opens the next generation when the current one is full.
 * Its capacity is the resident hash count (whole blocks, one block to
 * QN_HRING_GEN_MAX): while a partition grows that doubles, and under a steady
 * window of W hashes each generation covers about W, so the live generations
 * (at most about two) cost about 2 x W x 2 bytes. Sizing by the previous
 * generation instead (x8 up to the maximum) left a partition with a small
 * window carrying 2 MiB filters for ever. */
static void gen_maybe_roll(struct qn_hring *r)
{
    struct qn_hring_gen *cur = r->gen_tail;
    if (cur == NULL || cur->count < cur->capacity)
        return;
    struct qn_hring_gen *g = gen_new(r, gen_capacity(r->hashes));
    if (g == NULL)
        return; /* keep filling the current one: only its false-positive rate suffers */
    cur->next = g;
    r->gen_tail = g;
}

/* Frees generations at the front that are no longer current and hold no block. */
static void gen_reap(struct qn_hring *r)
{
    while (r->gen_head != NULL && r->gen_head != r->gen_tail && r->gen_head->live_blocks == 0) {
        struct qn_hring_gen *g = r->gen_head;
        r->gen_head = g->next;
        gen_free(r, g);
    }
}

/* ---------------------------------------------------------------- blocks */

/* Hash order is memcmp order. Compared as two big-endian 64-bit words, inline:
 * qsort's indirect memcmp calls (and glibc's 64 KiB merge buffer per seal) were
 * most of a seal's cost. */
static uint64_t be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#elif !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_BIG_ENDIAN__
    v = (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 | (uint64_t)p[3] << 32 |
        (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 | (uint64_t)p[6] << 8 | (uint64_t)p[7];
#endif
    return v;
}

struct hkey {
    uint64_t hi, lo;
};

static struct hkey hkey_of(const uint8_t *p)
{
    return (struct hkey){be64(p), be64(p + 8)};
}

static int hkey_cmp(struct hkey a, struct hkey b)
{
    if (a.hi != b.hi)
        return a.hi < b.hi ? -1 : 1;
    return (a.lo > b.lo) - (a.lo < b.lo);
}

static void swap16(uint8_t *a, uint8_t *b)
{
    uint8_t t[HASH];
    memcpy(t, a, HASH);
    memcpy(a, b, HASH);
    memcpy(b, t, HASH);
}

static void sift_down(uint8_t *v, size_t root, size_t n)
{
    for (;;) {
        size_t c = 2 * root + 1;
        if (c >= n)
            return;
        if (c + 1 < n && hkey_cmp(hkey_of(v + c * HASH), hkey_of(v + (c + 1) * HASH)) < 0)
            c++;
        if (hkey_cmp(hkey_of(v + root * HASH), hkey_of(v + c * HASH)) >= 0)
            return;
        swap16(v + root * HASH, v + c * HASH);
        root = c;
    }
}

/* Sorts n 16-byte hashes in place: introsort (median-of-three quicksort,
 * heapsort past a depth limit, insertion sort for short runs). No allocation. */
static void sort_hashes(uint8_t *v, size_t n, unsigned depth)
{
    while (n > 16) {
        if (depth-- == 0) {
            for (size_t i = n / 2; i-- > 0;)
                sift_down(v, i, n);
            for (size_t i = n - 1; i > 0; i--) {
                swap16(v, v + i * HASH);
                sift_down(v, 0, i);
            }
            return;
        }
        /* median of first, middle, last moved to the front as the pivot */
        uint8_t *a = v, *m = v + (n / 2) * HASH, *z = v + (n - 1) * HASH;
        if (hkey_cmp(hkey_of(m), hkey_of(a)) < 0)
            swap16(m, a);
        if (hkey_cmp(hkey_of(z), hkey_of(m)) < 0) {
            swap16(z, m);
            if (hkey_cmp(hkey_of(m), hkey_of(a)) < 0)
                swap16(m, a);
        }
        swap16(v, m);
        struct hkey pivot = hkey_of(v);
        size_t i = 0, j = n;
        for (;;) {
            do
                i++;
            while (i < n && hkey_cmp(hkey_of(v + i * HASH), pivot) < 0);
            do
                j--;
            while (hkey_cmp(hkey_of(v + j * HASH), pivot) > 0);
            if (i >= j)
                break;
            swap16(v + i * HASH, v + j * HASH);
        }
        swap16(v, v + j * HASH);
        /* recurse into the smaller side, loop on the larger */
        if (j < n - j - 1) {
            sort_hashes(v, j, depth);
            v += (j + 1) * HASH;
            n -= j + 1;
        } else {
            sort_hashes(v + (j + 1) * HASH, n - j - 1, depth);
            n = j;
        }
    }
    for (size_t i = 1; i < n; i++) {
        uint8_t t[HASH];
        memcpy(t, v + i * HASH, HASH);
        struct hkey k = hkey_of(t);
        size_t j = i;
        while (j > 0 && hkey_cmp(hkey_of(v + (j - 1) * HASH), k) > 0) {
            memcpy(v + j * HASH, v + (j - 1) * HASH, HASH);
            j--;
        }
        memcpy(v + j * HASH, t, HASH);
    }
}

static int ring_reserve(struct qn_hring *r)
{
    if (r->nblocks < r->cap)
        return QN_OK;
    size_t cap = r->cap ? r->cap * 2 : 8;
    struct qn_hring_block **b = malloc(cap * sizeof *b);
    if (b == NULL)
        return QN_ENOMEM;
    for (size_t i = 0; i < r->nblocks; i++)
        b[i] = r->blocks[(r->head + i) % r->cap];
    r->bytes += (cap - r->cap) * sizeof *b;
    free(r->blocks);
    r->blocks = b;
    r->cap = cap;
    r->head = 0;
    return QN_OK;
}

/* Seals the (full) hot buffer: sort in place, hand the array to a new block. */
static int seal(struct qn_hring *r)
{
    if (ring_reserve(r) != QN_OK)
        return QN_ENOMEM;
    struct qn_hring_block *b = malloc(sizeof *b);
    if (b == NULL)
        return QN_ENOMEM;
    sort_hashes(r->hot, r->nhot, 2 * 12); /* 2 log2(QN_HRING_BLOCK) */
    b->hashes = r->hot;
    b->max_offset = r->hot_max_offset;
    b->max_created_ms = r->hot_max_created_ms;
    b->gen = r->gen_tail;
    b->seq = r->next_seq++;
    if (b->gen->first_seq == UINT64_MAX)
        b->gen->first_seq = b->seq;
    b->gen->live_blocks++;
    r->blocks[(r->head + r->nblocks) % r->cap] = b;
    r->nblocks++;
    r->bytes += sizeof *b;
    /* the hot buffer starts over, its memory now belongs to the block */
    r->hot = NULL;
    r->hot_cap = 0;
    r->nhot = 0;
    r->hot_max_offset = -1;
    r->hot_max_created_ms = INT64_MIN;
    gen_maybe_roll(r);
    return QN_OK;
}

static int hot_reserve(struct qn_hring *r)
{
    if (r->nhot < r->hot_cap)
        return QN_OK;
    size_t cap = r->hot_cap ? r->hot_cap * 2 : 16;
    if (cap > QN_HRING_BLOCK)
        cap = QN_HRING_BLOCK;
    uint8_t *h = realloc(r->hot, cap * HASH);
    if (h == NULL)
        return QN_ENOMEM;
    r->bytes += (cap - r->hot_cap) * HASH;
    r->hot = h;
    r->hot_cap = cap;
    return QN_OK;
}

int qn_hring_append(struct qn_hring *r, const uint8_t *hashes, size_t n, int64_t base,
                    int64_t created_ms)
{
    for (size_t i = 0; i < n; i++) {
        /* A full hot buffer is one whose seal failed for memory: seal it now,
         * hot_reserve cannot grow it past a block. */
        if (r->nhot == QN_HRING_BLOCK && seal(r) != QN_OK)
            return QN_ENOMEM;
        struct qn_hring_gen *g = gen_current(r);
        if (g == NULL || hot_reserve(r) != QN_OK)
            return QN_ENOMEM;
        memcpy(r->hot + r->nhot * HASH, hashes + i * HASH, HASH);
        r->nhot++;
        r->hashes++;
        bloom_add(g, hashes + i * HASH);
        int64_t off = base + (int64_t)i;
        if (off > r->hot_max_offset)
            r->hot_max_offset = off;
        if (created_ms > r->hot_max_created_ms)
            r->hot_max_created_ms = created_ms;
        if (r->nhot == QN_HRING_BLOCK && seal(r) != QN_OK)
            return QN_ENOMEM;
    }
    return QN_OK;
}

static bool block_has(const struct qn_hring_block *b, struct hkey k)
{
    size_t lo = 0, hi = QN_HRING_BLOCK;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = hkey_cmp(hkey_of(b->hashes + mid * HASH), k);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

#define PREFETCH_GENS 32

bool qn_hring_contains(const struct qn_hring *r, const uint8_t h[16])
{
    /* One bloom test per generation; blocks of a generation are consecutive.
     * Each test is a cache miss into a different filter: locate and prefetch the
     * lines of the first generations before testing any, so the misses overlap
     * instead of queueing one behind the other. */
    const uint8_t *lines[PREFETCH_GENS];
    size_t nl = 0;
    for (const struct qn_hring_gen *g = r->gen_head; g != NULL && nl < PREFETCH_GENS; g = g->next) {
        lines[nl] = bloom_line(g, h);
        __builtin_prefetch(lines[nl]);
        nl++;
    }
    struct hkey k = hkey_of(h);
    uint64_t head_seq = r->nblocks ? r->blocks[r->head]->seq : 0;
    size_t gi = 0;
    for (const struct qn_hring_gen *g = r->gen_head; g != NULL; g = g->next, gi++) {
        if (!(gi < nl ? bloom_line_has(lines[gi], h) : bloom_has(g, h)))
            continue;
        if (g->live_blocks > 0) {
            uint64_t first = g->first_seq > head_seq ? g->first_seq : head_seq;
            for (uint64_t s = first; s < first + g->live_blocks; s++) {
                const struct qn_hring_block *b = r->blocks[(r->head + (s - head_seq)) % r->cap];
                if (block_has(b, k))
                    return true;
            }
        }
        if (g == r->gen_tail) {
            for (size_t i = 0; i < r->nhot; i++)
                if (memcmp(r->hot + i * HASH, h, HASH) == 0)
                    return true;
        }
    }
    return false;
}

int64_t qn_hring_expire(struct qn_hring *r, int64_t cutoff_ms)
{
    int64_t dropped = -1;
    while (r->nblocks > 0) {
        struct qn_hring_block *b = r->blocks[r->head];
        if (b->max_created_ms >= cutoff_ms)
            break;
        if (b->max_offset > dropped)
            dropped = b->max_offset;
        b->gen->live_blocks--;
        free(b->hashes);
        free(b);
        r->bytes -= QN_HRING_BLOCK * HASH + sizeof *b;
        r->hashes -= QN_HRING_BLOCK;
        r->head = (r->head + 1) % r->cap;
        r->nblocks--;
    }
    /* The hot buffer is younger than every block (invariant 2): it can go only
     * when every block went. */
    if (r->nblocks == 0 && r->nhot > 0 && r->hot_max_created_ms < cutoff_ms) {
        if (r->hot_max_offset > dropped)
            dropped = r->hot_max_offset;
        r->hashes -= r->nhot;
        r->bytes -= r->hot_cap * HASH;
        free(r->hot);
        r->hot = NULL;
        r->nhot = r->hot_cap = 0;
        r->hot_max_offset = -1;
        r->hot_max_created_ms = INT64_MIN;
        /* its generation may now be empty: start afresh so blooms do not
         * accumulate stale bits forever on a slow partition */
        if (r->gen_tail != NULL && r->gen_tail->live_blocks == 0) {
            struct qn_hring_gen *g = r->gen_head;
            while (g) {
                struct qn_hring_gen *next = g->next;
                gen_free(r, g);
                g = next;
            }
            r->gen_head = r->gen_tail = NULL;
        }
    }
    gen_reap(r);
    return dropped;
}

void qn_hring_clear(struct qn_hring *r)
{
    for (size_t i = 0; i < r->nblocks; i++) {
        struct qn_hring_block *b = r->blocks[(r->head + i) % r->cap];
        free(b->hashes);
        free(b);
    }
    free(r->blocks);
    free(r->hot);
    struct qn_hring_gen *g = r->gen_head;
    while (g) {
        struct qn_hring_gen *next = g->next;
        for (size_t i = 0; i < g->npages; i++)
            free(g->pages[i]);
        free(g->pages);
        free(g);
        g = next;
    }
    qn_hring_init(r);
}
