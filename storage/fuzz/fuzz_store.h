/*
 * fuzz_store.h - private to storage/fuzz: the input format shared by the
 * decoder fuzz target (fuzz_store.c) and its seed writer (fuzz_store_seed.c).
 *
 * One input is one result and the statement whose decoder reads it:
 *   byte 0        statement id (mod QN_STMT_COUNT)
 *   byte 1        items the call sent (push segments, ack items, fetch
 *                 entries), mod 64
 *   byte 2        column count, mod FZ_MAX_COLS + 1
 *   ncols bytes   per column: bit 7 text format, bits 0-6 an index into
 *                 fz_types (mod FZ_NTYPES)
 *   1 byte        row count, mod FZ_MAX_ROWS + 1
 *   cells         row by row, column by column: a length byte (0xFF SQL NULL;
 *                 0xFE then a big-endian 16-bit length, capped at
 *                 FZ_MAX_CELL), then that many value bytes (fewer when the input
 *                 ends)
 */
#ifndef QN_FUZZ_STORE_H
#define QN_FUZZ_STORE_H

#include <stdint.h>

#define FZ_MAX_COLS 32
#define FZ_MAX_ROWS 16
#define FZ_MAX_CELL 4096

static const uint32_t fz_types[] = {
    16u,   /* bool */
    17u,   /* bytea */
    19u,   /* name */
    20u,   /* int8 */
    21u,   /* int2 */
    23u,   /* int4 */
    25u,   /* text */
    1042u, /* bpchar */
    1043u, /* varchar */
    1184u, /* timestamptz */
    2950u, /* uuid */
    3802u, /* jsonb */
    1016u, /* int8[] */
    2278u, /* void */
};
#define FZ_NTYPES ((int)(sizeof fz_types / sizeof fz_types[0]))

#endif
