/*
 * console.h - private to broker/: the web console's built files (console/dist,
 * embedded into the binary at build time) served on the HTTP side port.
 */
#ifndef QN_BROKER_CONSOLE_H
#define QN_BROKER_CONSOLE_H

#include "transport/sideport.h"

struct qn_console;

/* Indexes the embedded files (content types, entity tags). Returns QN_OK or
 * QN_ENOMEM. */
int qn_console_new(struct qn_console **out);
void qn_console_free(struct qn_console *c);

/* The side port handler (ud = the console): "/" and "/index.html" are the
 * page, "/assets/..." its hashed assets; anything else is 404 (the console
 * routes in the URL fragment, so no other path needs the page). */
void qn_console_serve(void *ud, const struct qn_http_request *req, struct qn_http_response *resp);

#endif
