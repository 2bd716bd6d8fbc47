/*
 * rpc/crypt.h - private to rpc/: encryption at rest for the services: which
 * queues store their payloads encrypted, sealing payloads before they are
 * packed, opening them for readers.
 *
 * A queue with encryption_enabled stores every payload as an AES-256-GCM
 * envelope (codec/SPEC.md section 6) under the active key of the key ring
 * (QUEEN_ENCRYPTION_KEYRING), with frame flag 4; the envelope is bound to its
 * message id (GCM additional data), so it cannot be moved to another message.
 * Readers (Pop, Consume, Fetch, ListDeadLetters, ReplayDeadLetter) get the
 * payload decrypted with whichever key of the ring its envelope names.
 *
 * Which queues are encrypted is learned from the database (queue_encrypted_v1) and
 * remembered per (tenant, queue) for QN_CRYPT_TTL_MS; a stale entry is used
 * while it is refreshed in the background, an unknown one is looked up before
 * the push that needs it. Pushes wait for unknown queues in one FIFO, so the
 * order of pushes to a partition is kept even when an earlier one had to wait
 * (queenctl pipelines pushes and relies on it). ConfigureQueue on this broker
 * updates the entry at once; a change made through another broker is seen
 * here within QN_CRYPT_TTL_MS.
 *
 * One per app (struct qn_app); loop thread only.
 */
#ifndef QN_BROKER_CRYPT_H
#define QN_BROKER_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/frame.h"
#include "rpc/resp_arena.h"

struct qn_app;
struct qn_crypt;

#define QN_CRYPT_TTL_MS 30000
/* (tenant, queue) entries remembered; past it the cache starts over. */
#define QN_CRYPT_MAX 100000

int qn_crypt_new(struct qn_app *app, struct qn_crypt **out);
/* Pending waits are dropped (their owners are gone first). NULL allowed. */
void qn_crypt_free(struct qn_crypt *c);

/* A push-like call waiting to learn whether its queues are encrypted. The
 * owner sets done; the rest is the cache's. */
struct qn_crypt_wait {
    /* rc QN_OK: every queue is known (qn_crypt_encrypted answers for them
     * until the callback returns); otherwise a storage error */
    void (*done)(struct qn_crypt_wait *w, int rc);
    /* private */
    struct qn_crypt *c;
    uint8_t tenant[16];
    const char *const *queues; /* borrowed until done or cancel */
    size_t n;
    struct qn_crypt_wait *prev, *next;
    bool queued;
};

/*
 * Makes sure the encryption flag of queues[0..n) (the tenant's) is known.
 * Returns 1 when it is, now (done will not run), 0 when w was queued (done runs
 * once, from a later loop callback, in FIFO order with other waits), or
 * QN_ENOMEM. queues is borrowed until done runs or the wait is cancelled.
 */
int qn_crypt_ready(struct qn_crypt *c, struct qn_crypt_wait *w, const uint8_t tenant[16],
                   const char *const *queues, size_t n);

/* Takes a queued wait out: its done will not run. Safe on a wait not queued. */
void qn_crypt_cancel(struct qn_crypt_wait *w);

/* Whether the tenant's queue is encrypted, as known (false when unknown). */
bool qn_crypt_encrypted(const struct qn_crypt *c, const uint8_t tenant[16], const char *queue);

/* What a ConfigureQueue on this broker just stored. */
void qn_crypt_learn(struct qn_crypt *c, const uint8_t tenant[16], const char *queue,
                    bool encrypted);

/*
 * Seals a payload for a frame of message msgid: on success *env is a malloc'd
 * envelope of *env_len bytes (caller frees). Errors, with a message for the
 * client in why: QN_ENOTFOUND (no key ring is configured), QN_ELIMIT (payload
 * too large), QN_ECRYPTO, QN_ENOMEM.
 */
int qn_crypt_seal(struct qn_app *app, const uint8_t msgid[16], const uint8_t *payload, size_t len,
                  uint8_t **env, size_t *env_len, char *why, size_t cap);

/*
 * Opens the payload of a frame with flag 4 (our envelope, or Queen MQ's JSON
 * envelope) into arena: on success *out / *out_len (NULL / 0 for an empty
 * payload). On failure returns the codec's error and writes a message naming
 * the problem (a key not in the ring, an envelope that does not authenticate,
 * no key ring) into why; nothing of the envelope is ever returned as payload.
 */
int qn_crypt_open(struct qn_app *app, struct qn_arena *arena, const uint8_t msgid[16],
                  const uint8_t *env, size_t len, const uint8_t **out, size_t *out_len, char *why,
                  size_t cap);

/*
 * A dead letter's payload, which the DLQ keeps as it was stored: when it reads
 * as our envelope (version, key id) it is opened as one; otherwise it is the
 * plaintext. *encrypted tells which. Errors as qn_crypt_open.
 */
int qn_crypt_open_dead(struct qn_app *app, struct qn_arena *arena, const uint8_t msgid[16],
                       const uint8_t *payload, size_t len, bool *encrypted, const uint8_t **out,
                       size_t *out_len, char *why, size_t cap);

#endif
