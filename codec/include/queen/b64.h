/*
 * queen/b64.h - base64 (RFC 4648), both alphabets, one-shot and streaming.
 *
 * One implementation for every place that speaks base64: gRPC-Web text bodies
 * (standard alphabet, padded, several padded runs may follow each other),
 * Queen MQ's JSON envelope fields (standard, padded, one run), admin page
 * tokens (URL alphabet, unpadded) and queenctl's JSON output.
 *
 * Decoding is strict: a byte outside the alphabet, '=' anywhere but at the end
 * of a quantum, text after the padding (unless runs are allowed), and non-zero
 * unused bits in the last character are all refused, so every byte string has
 * exactly one accepted text per alphabet and padding mode.
 */
#ifndef QUEEN_B64_H
#define QUEEN_B64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum qn_b64_alphabet {
    QN_B64_STD = 0, /* A-Z a-z 0-9 + / */
    QN_B64_URL = 1, /* A-Z a-z 0-9 - _ */
};

/* Decoder flags. */
#define QN_B64_NOPAD 0x1u /* unpadded text: '=' refused; a last quantum of 2 or 3 characters */
#define QN_B64_RUNS 0x2u  /* padded runs may follow each other (gRPC-Web text bodies) */

struct qn_b64_dec {
    uint8_t q[4];  /* sextets of the quantum collected so far */
    uint8_t nq;    /* 0..3 */
    uint8_t alpha; /* enum qn_b64_alphabet */
    uint8_t flags;
    uint8_t ended; /* a padded quantum was seen and runs are not allowed */
};

void qn_b64_dec_init(struct qn_b64_dec *d, enum qn_b64_alphabet alpha, unsigned flags);
/*
 * Decodes in[0..len) into out[0..cap). At most 3 * (d->nq + len) / 4 bytes are
 * written. Returns QN_OK with *outlen, QN_EINVAL when the text is not base64 as
 * described above, or QN_ELIMIT when the bytes would not fit in cap.
 */
int qn_b64_dec_feed(struct qn_b64_dec *d, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                    size_t *outlen);
/*
 * The text ended. Padded: QN_OK when it ended on a quantum boundary, else
 * QN_EINVAL. Unpadded: writes the last 1 or 2 bytes a 2- or 3-character tail
 * carries (QN_ELIMIT when they do not fit); a 1-character tail is QN_EINVAL.
 */
int qn_b64_dec_finish(struct qn_b64_dec *d, uint8_t *out, size_t cap, size_t *outlen);

/* One-shot decode of s[0..len). Returns the decoded length, or -1. */
long qn_b64_decode(enum qn_b64_alphabet alpha, unsigned flags, const char *s, size_t len,
                   uint8_t *out, size_t cap);

struct qn_b64_enc {
    uint8_t carry[2]; /* input bytes not yet encoded (less than a 3-byte group) */
    uint8_t ncarry;
    uint8_t alpha;
    bool pad;
};

void qn_b64_enc_init(struct qn_b64_enc *e, enum qn_b64_alphabet alpha, bool pad);
/* Encodes in[0..len) into out (at least 4 * (len + 2) / 3 + 4 chars); returns
 * the chars written. Keeps up to 2 input bytes for the next call. */
size_t qn_b64_enc_feed(struct qn_b64_enc *e, const uint8_t *in, size_t len, char *out);
/* Writes what is carried (at most 4 chars); returns the chars written. */
size_t qn_b64_enc_finish(struct qn_b64_enc *e, char *out);

/* The text length of n bytes (without a terminating NUL). */
size_t qn_b64_encoded_len(size_t n, bool pad);
/* One-shot encode: writes qn_b64_encoded_len(n, pad) chars and a NUL; returns
 * the chars written (without the NUL). */
size_t qn_b64_encode(enum qn_b64_alphabet alpha, bool pad, const uint8_t *in, size_t n, char *out);

#endif
