/*
 * rpc/methods.h - private to broker/: the queen.v1 method tables.
 */
#ifndef QN_BROKER_METHODS_H
#define QN_BROKER_METHODS_H

struct qn_app;

/*
 * Registers every QueueService and AdminService method with app->rpc, each with
 * data = app (the handlers' only way to their state). The table is allocated and
 * kept in app->methods (freed by the app's owner after the server). Returns
 * QN_OK, QN_ENOMEM or the server's registration error.
 */
int qn_rpc_methods_register(struct qn_app *app);

#endif
