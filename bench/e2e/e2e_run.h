/*
 * e2e_run.h - private to bench/e2e: the load generator's engine.
 *
 * One run owns a set of connections to one broker and executes phases on
 * them. A phase pushes (closed loop with N requests in flight, or open loop at
 * a target rate), consumes (Pop + Ack by offset, or Consume streams with
 * credits), or both at once, and fills a struct e2e_stats. Everything runs on
 * the caller's thread in a poll loop; nothing blocks but poll.
 */
#ifndef QN_BENCH_E2E_RUN_H
#define QN_BENCH_E2E_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "queen/client_wire.h"
#include "e2e_hist.h"
#include "e2e_payload.h"

enum e2e_ack_mode {
    E2E_ACK_EACH, /* one AckItem per delivered message */
    E2E_ACK_LAST, /* one AckItem per partition: the highest delivered offset */
};

enum e2e_consume_api {
    E2E_CONSUME_POP,    /* unary Pop, then unary Ack */
    E2E_CONSUME_STREAM, /* Consume stream: subscribe, credits, acks on the stream */
};

/* Everything the command line sets. Strings are borrowed from argv. */
struct e2e_opts {
    const char *host;
    const char *port;
    bool tls;
    const char *ca;    /* verify the server against this PEM file (TLS) */
    const char *queue; /* NULL: a fresh name per run / matrix cell */
    const char *group; /* consumer group; "" = queue mode */
    unsigned partitions;
    unsigned batch;
    enum e2e_payload_kind payload;
    size_t size;
    unsigned connections; /* per role: producers and consumers each get this many */
    unsigned inflight;    /* push requests in flight (closed loop; cap in open loop) */
    double duration_s;
    double rate;     /* msg/s; 0 = closed loop */
    double warmup_s; /* push and e2e latencies of messages sent in a phase's first warmup_s are
                        not recorded (they are pushed and consumed all the same) */
    unsigned consumers;
    unsigned pop_batch;
    unsigned pop_wait_ms;
    unsigned pop_partitions; /* PopRequest.max_partitions */
    enum e2e_ack_mode ack_mode;
    enum e2e_consume_api consume_api;
    unsigned credits;  /* Consume stream credits */
    bool txn;          /* give every message a unique transaction id */
    bool spread;       /* spread one request's items over partitions */
    bool keep;         /* keep the queues a run created */
    bool encrypted;    /* configure each queue with encryption_enabled before pushing */
    const char *token; /* bearer token for every call (broker with QUEEN_AUTH=jwt); NULL: none */
    double report_s;   /* soak: print every report_s seconds */
    double drain_s;    /* after pushing stops, let consumers catch up this long */
    size_t max_msg;    /* largest response message accepted */
    bool quiet;
    int broker_pid; /* CPU accounting: the broker's pid (0 = by name) */
    int pg_pid;     /* CPU accounting: the postmaster's pid (0 = by name) */
};

/* Counts of call outcomes of one kind of RPC. */
struct e2e_status_count {
    uint64_t code[QN_CLIENT_GRPC_CODES]; /* grpc-status 0..16 */
    uint64_t other_code;                 /* grpc-status outside 0..16 */
    uint64_t no_status;                  /* stream ended or reset without grpc-status */
    uint64_t bad_frame;                  /* response broke gRPC framing / size limit */
    uint64_t conn_lost;                  /* the connection failed under the call */
    uint64_t bad_decode;                 /* OK status but the message did not unpack */
    uint64_t item_failed;                /* per-item failures inside OK responses */
};

struct e2e_stats {
    /* push */
    uint64_t push_calls; /* push calls that ended */
    uint64_t pushed;     /* items answered QUEUED */
    uint64_t push_dup;   /* items answered DUPLICATE */
    struct e2e_status_count push_st;
    struct e2e_hist push_rtt;             /* per push call, microseconds */
    uint64_t push_first_ns, push_last_ns; /* first call started, last call ended */
    /* consume */
    uint64_t pop_calls;
    uint64_t pop_empty;
    uint64_t delivered; /* messages received by consumers */
    uint64_t acked;     /* delivered messages whose ack was applied */
    struct e2e_status_count pop_st;
    struct e2e_status_count ack_st;
    struct e2e_hist pop_rtt; /* per Pop that delivered (or stream batch gap), microseconds */
    struct e2e_hist ack_rtt; /* per unary Ack applied, past the warm-up, microseconds */
    struct e2e_hist e2e_lat; /* push send -> consumer receipt, microseconds */
    uint64_t consume_first_ns, consume_last_ns; /* first delivery, last ack applied */
    /* phase */
    uint64_t phase_start_ns, phase_end_ns;
    int64_t max_backlog;         /* largest pushed - acked seen at a progress line */
    int64_t backlog_at_push_end; /* pushed - acked when pushing stopped */
    /* connections */
    uint64_t conn_failures;
    char first_error[200]; /* first failure message seen, for the report */
};

struct e2e_phase {
    const char *label; /* for progress lines */
    bool push;
    bool consume;
    double duration_s;       /* push for this long; consume-only: at most this long */
    double rate;             /* push rate, msg/s; 0 = closed loop */
    unsigned inflight;       /* push requests in flight (cap); 0 = opts inflight */
    uint64_t consume_target; /* consume-only: stop after this many acked (0 = none) */
    double report_s;         /* > 0: print progress every report_s seconds */
};

typedef struct e2e_run e2e_run;

/*
 * Resolves the address, makes TLS context if asked, opens o->connections
 * connections for producers and as many for consumers, and waits up to 5 s for at least one to be
 * ready. Returns QN_OK and *out, QN_EINVAL (address or CA file; message printed to stderr),
 * QN_EUNAVAILABLE (no connection became ready), QN_ENOMEM. o is borrowed for
 * the run's life.
 */
int e2e_run_new(const struct e2e_opts *o, e2e_run **out);
void e2e_run_free(e2e_run *r);

/* Sets what the next phases push: queue name (copied), kind, batch, partitions. */
int e2e_run_target(e2e_run *r, const char *queue, enum e2e_payload_kind kind, unsigned batch,
                   unsigned partitions);

/* Runs one phase and fills *st (zeroed first). Returns QN_OK, QN_ENOMEM, or
 * QN_EUNAVAILABLE when calls were still open 30 s after the phase should have
 * ended (they were cancelled, counted as conn-lost, and connections reopened). */
int e2e_run_phase(e2e_run *r, const struct e2e_phase *ph, struct e2e_stats *st);

/* Broker-wide counters from AdminService.GetStats. */
struct e2e_broker_stats {
    int64_t pushed;
    int64_t delivered;
    int64_t rpcs;
    int64_t total_pending;
};

/* Calls GetStats (timeout 10 s). Returns QN_OK, or a negative code with a
 * message in err (e.g. the broker answered UNIMPLEMENTED). */
int e2e_run_broker_stats(e2e_run *r, struct e2e_broker_stats *bs, char *err, size_t errcap);

/* Creates or updates a queue with encryption_enabled through
 * AdminService.ConfigureQueue (timeout 30 s): its payloads are then stored
 * AES-256-GCM encrypted (the broker needs QUEEN_ENCRYPTION_KEYRING). */
int e2e_run_configure_encrypted(e2e_run *r, const char *queue, char *err, size_t errcap);

/* Deletes a queue through AdminService.DeleteQueue (timeout 60 s). */
int e2e_run_delete_queue(e2e_run *r, const char *queue, char *err, size_t errcap);

/* Formats counts as {UNAVAILABLE:3,conn-lost:1} ("{}" when none). */
void e2e_status_format(const struct e2e_status_count *sc, char *buf, size_t cap);
uint64_t e2e_status_errors(const struct e2e_status_count *sc);

/* Builds a gRPC-framed PushRequest (no transaction ids) of batch json/random
 * items spread over partitions p0..p<partitions-1> of queue. *out is malloc'd. */
int e2e_make_push_body(const char *queue, unsigned batch, unsigned partitions,
                       enum e2e_payload_kind kind, size_t size, uint8_t **out, size_t *len);

/* CPU seconds used so far by this process, by the broker (broker_pid, or every
 * process named queen-broker when 0) and by PostgreSQL (the postmaster pg_pid
 * and its children, or every process named postgres when 0), from /proc;
 * -1 where unavailable. Exited children count through their parent's cutime. */
struct e2e_cpu {
    double self;
    double broker;
    double pg;
    double machine; /* busy CPU seconds of the whole machine (all cores) */
    double wall;
};
void e2e_cpu_sample(struct e2e_cpu *c, int broker_pid, int pg_pid);

#endif
