/*
 * modules.h - private to broker/: the product's modules, in start order.
 */
#ifndef QN_BROKER_MODULES_H
#define QN_BROKER_MODULES_H

#include "module.h"

/* "queue": the storage pool, the engines (fusion, waiters, wake-ups, the dedup
 * cache, the maintenance loop) and the queen.v1 services. NULL-name terminated. */
extern const struct qn_broker_module qn_product_modules[];

#endif
