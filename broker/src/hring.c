/*
 * hring.c - see hring.h.
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

#include "hring.h"
#include "queen/error.h"

#define HASH 16u
#define LINE_BYTES 64u                      /* one bloom line = one cache line */
#define PAGE_BYTES (64u * 1024u)
#define LINES_PER_PAGE (PAGE_BYTES / LINE_BYTES)
#define BITS_PER_HASH 16u                   /* bloom bits per hash of capacity */
#define BLOOM_K 7u

struct qn_hring_block {
    uint8_t *hashes;                       /* QN_HRING_BLOCK * 16 bytes, sorted */
    int64_t max_offset;
    int64_t max_created_ms;
    struct qn_hring_gen *gen;
    uint64_t seq;
};

struct qn_hring_gen {
    struct qn_hring_gen *next;
    uint8_t **pages;                        /* npages pages of PAGE_BYTES */
    size_t npages;
    size_t nlines;
    size_t capacity;                        /* hashes it was sized for */
    size_t count;                           /* hashes inserted */
    size_t live_blocks;                     /* sealed blocks still resident */
    uint64_t first_seq;                     /* seq of its oldest sealed block */
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
static struct qn_hring_gen *gen_current(struct qn_hring *r)
{
    if (r->gen_tail != NULL)
        return r->gen_tail;
    struct qn_hring_gen *g = gen_new(r, QN_HRING_BLOCK);
    if (g == NULL)
        return NULL;
    r->gen_head = r->gen_tail = g;
    return g;
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
    size_t cap = (r->hashes + QN_HRING_BLOCK - 1) / QN_HRING_BLOCK * QN_HRING_BLOCK;
    if (cap < QN_HRING_BLOCK)
        cap = QN_HRING_BLOCK;
    if (cap > QN_HRING_GEN_MAX)
        cap = QN_HRING_GEN_MAX;
    struct qn_hring_gen *g = gen_new(r, cap);
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

static int cmp_hash(const void *a, const void *b)
{
    return memcmp(a, b, HASH);
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
    qsort(r->hot, r->nhot, HASH, cmp_hash);
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

static bool block_has(const struct qn_hring_block *b, const uint8_t *h)
{
    size_t lo = 0, hi = QN_HRING_BLOCK;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(b->hashes + mid * HASH, h, HASH);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

bool qn_hring_contains(const struct qn_hring *r, const uint8_t h[16])
{
    /* one bloom test per generation; blocks of a generation are consecutive */
    uint64_t head_seq = r->nblocks ? r->blocks[r->head]->seq : 0;
    for (const struct qn_hring_gen *g = r->gen_head; g != NULL; g = g->next) {
        if (!bloom_has(g, h))
            continue;
        if (g->live_blocks > 0) {
            uint64_t first = g->first_seq > head_seq ? g->first_seq : head_seq;
            for (uint64_t s = first; s < first + g->live_blocks; s++) {
                const struct qn_hring_block *b = r->blocks[(r->head + (s - head_seq)) % r->cap];
                if (block_has(b, h))
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
