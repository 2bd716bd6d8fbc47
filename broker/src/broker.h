/*
 * broker.h - private to broker/: the serving process.
 */
#ifndef QN_BROKER_BROKER_H
#define QN_BROKER_BROKER_H

#include "config.h"
#include "module.h"

/*
 * Serves with `modules` (NULL-name terminated; the product's are
 * qn_product_modules of modules.h; health and reflection are always there)
 * until SIGTERM/SIGINT, then drains and returns QN_OK; returns an error when the
 * listeners, the loop or a module cannot be set up (logged). Test binaries pass
 * their own modules to serve test-only services without a database.
 */
int qn_broker_serve(const struct qn_config *cfg, const struct qn_broker_module *modules);

#endif
