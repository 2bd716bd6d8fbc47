/*
 * queen/envelope.h - payload encryption at rest: AES-256-GCM under a key ring.
 *
 * A queue with encryption on stores each payload as an envelope (frame flag
 * QN_FRAME_FLAG_ENCRYPTED). The byte layout is codec/SPEC.md section 6:
 *   u8 version (1) | u8 key_id_len | key_id | u8[12] iv | ciphertext | u8[16] tag
 * The version byte and the key id are authenticated (GCM additional data),
 * together with optional caller data (e.g. nothing, or a message id).
 *
 * A key ring holds up to QN_KEYRING_MAX_KEYS keys, each a 32-byte key with an id.
 * It is parsed from the bytes of a key ring file (the codec does no file I/O):
 *   # comment
 *   <id> <64 hex digits>
 * one key per line; the LAST key line is the active key, the one that encrypts
 * (rotation = append a new line); every key in the ring decrypts. A key ring is
 * immutable once made, so one ring may be shared by any number of threads;
 * reloading means parsing a new ring and swapping pointers.
 *
 * Queen MQ's JSON envelope {"encrypted","iv","authTag"} (base64) is also read,
 * never written: qn_envelope_decrypt_queen_json(), SPEC.md section 6.4.
 *
 * Nothing here prints, aborts or keeps global state. Key bytes are wiped when a
 * ring is freed; a failed decryption wipes whatever it had written to the
 * caller's buffer, so unauthenticated bytes are never left there.
 */
#ifndef QUEEN_ENVELOPE_H
#define QUEEN_ENVELOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QN_ENVELOPE_VERSION 1u
#define QN_ENVELOPE_IV_LEN 12u
#define QN_ENVELOPE_TAG_LEN 16u
#define QN_ENVELOPE_KEY_LEN 32u
/* Key ids: 1..32 bytes of [A-Za-z0-9._-]. */
#define QN_KEY_ID_MAX 32u
#define QN_KEYRING_MAX_KEYS 64u
/* Largest key ring file accepted (bytes). */
#define QN_KEYRING_TEXT_MAX 65536u
/* Largest payload encrypted or decrypted (2^28 bytes = 256 MiB; above the
 * broker's largest payload, far below GCM's limit). */
#define QN_ENVELOPE_PAYLOAD_MAX (256u * 1024u * 1024u)
/* Largest additional authenticated data. */
#define QN_ENVELOPE_AAD_MAX 1024u
/* Bytes an envelope adds to a payload encrypted under a key id of n bytes. */
#define QN_ENVELOPE_OVERHEAD(n) (2u + (n) + QN_ENVELOPE_IV_LEN + QN_ENVELOPE_TAG_LEN)

typedef struct qn_keyring qn_keyring;

/*
 * Parses a key ring file's bytes text[0..len) (need not be NUL-terminated).
 * Grammar (SPEC.md 6.1): lines end with LF (a CR before it is ignored); blank
 * lines and lines whose first non-blank character is '#' are skipped; every
 * other line is  <id> <spaces or tabs> <64 hex digits> [spaces or tabs].
 * On success writes a new ring to *out (caller frees with qn_keyring_free).
 * Errors, writing nothing to *out:
 *   QN_EKEYRING_PARSE   a line is malformed, an id is invalid or repeated, a key
 *                       is not 64 hex digits, the text has no key, more than
 *                       QN_KEYRING_MAX_KEYS keys, or len > QN_KEYRING_TEXT_MAX;
 *                       *err_line (may be NULL) receives the 1-based line
 *                       number (0 when the problem is not one line's)
 *   QN_EINVAL           out is NULL, or text is NULL with len > 0
 *   QN_ENOMEM
 */
int qn_keyring_parse(const uint8_t *text, size_t len, qn_keyring **out, size_t *err_line);

/* Frees a ring and wipes its keys. NULL is fine. */
void qn_keyring_free(qn_keyring *kr);

/* Number of keys (>= 1). */
size_t qn_keyring_count(const qn_keyring *kr);

/* The active key's id, NUL-terminated, borrowed from kr (valid while kr is). */
const char *qn_keyring_active_id(const qn_keyring *kr);

/* True when the ring holds a key with this id (id[0..id_len)). */
bool qn_keyring_has(const qn_keyring *kr, const uint8_t *id, size_t id_len);

/*
 * Envelope size for a payload of payload_len bytes under kr's active key.
 * Returns QN_OK and writes *size, QN_ELIMIT when payload_len is over
 * QN_ENVELOPE_PAYLOAD_MAX, QN_EINVAL for NULL arguments.
 */
int qn_envelope_size(const qn_keyring *kr, size_t payload_len, size_t *size);

/*
 * Encrypts payload[0..payload_len) under kr's active key with a fresh random
 * 96-bit IV (OpenSSL's RAND_bytes) into out[0..cap). aad[0..aad_len) is bound
 * to the envelope (decryption must pass the same bytes); NULL/0 for none.
 * Returns QN_OK and writes *written (== qn_envelope_size), or:
 *   QN_ELIMIT    payload over QN_ENVELOPE_PAYLOAD_MAX or aad over QN_ENVELOPE_AAD_MAX
 *   QN_ERANGE    cap too small (nothing written)
 *   QN_EINVAL    NULL kr/written, NULL payload with payload_len > 0, NULL aad
 *                with aad_len > 0, NULL out with cap > 0
 *   QN_ECRYPTO   the random generator or the cipher failed (out is wiped)
 *   QN_ENOMEM
 * Borrows every argument.
 */
int qn_envelope_encrypt(const qn_keyring *kr, const uint8_t *aad, size_t aad_len,
                        const uint8_t *payload, size_t payload_len, uint8_t *out, size_t cap,
                        size_t *written);

/*
 * Reads an envelope's header without decrypting: its key id (pointing into env)
 * and the payload size decryption will produce. Either out pointer may be NULL.
 * Returns QN_OK, or QN_EENVELOPE_MALFORMED (too short, unknown version, key id
 * length 0 or over QN_KEY_ID_MAX, a key id byte outside [A-Za-z0-9._-], payload
 * over QN_ENVELOPE_PAYLOAD_MAX), or QN_EINVAL (NULL env with len > 0).
 */
int qn_envelope_inspect(const uint8_t *env, size_t len, const uint8_t **key_id, size_t *key_id_len,
                        size_t *payload_len);

/*
 * Decrypts and authenticates env[0..len) into out[0..cap). aad as given to
 * qn_envelope_encrypt. On success writes *written (the payload length).
 * Errors, checked in this order (out is untouched or wiped on every one):
 *   QN_EENVELOPE_MALFORMED    as qn_envelope_inspect
 *   QN_EENVELOPE_UNKNOWN_KEY  the key id is not in kr (qn_envelope_inspect
 *                             gives the id for a message naming it)
 *   QN_ERANGE                 cap smaller than the payload
 *   QN_ELIMIT                 aad over QN_ENVELOPE_AAD_MAX
 *   QN_EENVELOPE_AUTH         the tag does not verify: wrong key, tampered
 *                             bytes, or different aad
 *   QN_ECRYPTO, QN_ENOMEM, QN_EINVAL (NULL kr/written/out with cap > 0, NULL aad
 *                             with aad_len > 0)
 */
int qn_envelope_decrypt(const qn_keyring *kr, const uint8_t *aad, size_t aad_len,
                        const uint8_t *env, size_t len, uint8_t *out, size_t cap, size_t *written);

/*
 * Decrypts a Queen MQ JSON envelope: an object with exactly the members
 * "encrypted", "iv" and "authTag" (any order, JSON whitespace allowed), each a
 * standard padded base64 string; iv is 12 or 16 bytes, authTag 16 bytes. Queen
 * MQ envelopes carry no key id, so every key of kr is tried, active key first;
 * a 16-byte iv is tried as a full GCM IV and then as its first 12 bytes (the two
 * readings Queen MQ's writers have produced; SPEC.md 6.4).
 * On success writes the payload to out[0..cap) and *written. Errors:
 *   QN_EENVELOPE_MALFORMED  not that object, bad base64, wrong iv/tag sizes,
 *                           text over QN_ENVELOPE_PAYLOAD_MAX * 4 / 3 + 1024
 *   QN_ERANGE               cap smaller than the payload
 *   QN_EENVELOPE_AUTH       no key of the ring authenticates it
 *   QN_ECRYPTO, QN_ENOMEM, QN_EINVAL
 */
int qn_envelope_decrypt_queen_json(const qn_keyring *kr, const uint8_t *text, size_t len,
                                   uint8_t *out, size_t cap, size_t *written);

#endif
