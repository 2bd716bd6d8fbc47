/*
 * broker.h - private to broker/: the serving process.
 */
#ifndef QN_BROKER_BROKER_H
#define QN_BROKER_BROKER_H

#include "config.h"

/*
 * Serves until SIGTERM/SIGINT, then drains and returns QN_OK; returns an error
 * when the listeners or the loop cannot be set up (logged).
 */
int qn_broker_run(const struct qn_config *cfg);

#endif
