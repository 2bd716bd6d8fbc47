/*
 * transport/reflection.h - private to broker/: gRPC server reflection (grpc.reflection.v1
 * and v1alpha ServerReflectionInfo) over the FileDescriptorSet embedded at build
 * time (qn_descriptor_set, proto/CMakeLists.txt).
 *
 * Answers list_services (the services of the set that have a registered method),
 * file_by_filename and file_containing_symbol (packages' services, methods,
 * messages, fields, oneofs, enums and enum values, nested at any depth) with the
 * file and all its transitive dependencies; all_extension_numbers_of_type with an
 * empty list (the contract declares no extensions). Anything unknown gets an
 * error_response NOT_FOUND on the stream, which stays open.
 */
#ifndef QN_BROKER_REFLECTION_H
#define QN_BROKER_REFLECTION_H

#include <stddef.h>
#include <stdint.h>

#include "transport/call.h"

typedef struct qn_reflection qn_reflection;

/*
 * Indexes the embedded descriptor set and registers both reflection services
 * with s. r must outlive s. Returns QN_OK, QN_ENOMEM, QN_EINTERNAL (the embedded
 * set does not parse: a build problem) or the registration error.
 */
int qn_reflection_new(qn_rpc_server *s, qn_reflection **out);

/* NULL allowed. Call after qn_rpc_server_free(). */
void qn_reflection_free(qn_reflection *r);

/* ------------------------------------------------ the index (unit-tested alone) */

struct qn_refl_index;

/* Parses a serialized google.protobuf.FileDescriptorSet (borrowed: must outlive the
 * index). Returns QN_OK, QN_ENOMEM or QN_EINVAL (malformed). */
int qn_refl_index_build(const uint8_t *set, size_t len, struct qn_refl_index **out);
void qn_refl_index_free(struct qn_refl_index *ix);

size_t qn_refl_index_nfiles(const struct qn_refl_index *ix);
/* The file's name and serialized FileDescriptorProto (borrowed). */
const char *qn_refl_index_file_name(const struct qn_refl_index *ix, size_t file);
const uint8_t *qn_refl_index_file_data(const struct qn_refl_index *ix, size_t file, size_t *len);
/* File index by file name or fully-qualified symbol (no leading dot), or -1. */
int qn_refl_index_find_file(const struct qn_refl_index *ix, const char *name);
int qn_refl_index_find_symbol(const struct qn_refl_index *ix, const char *symbol);
/* True when symbol names a message type (for all_extension_numbers_of_type). */
int qn_refl_index_is_message(const struct qn_refl_index *ix, const char *symbol);
/* Writes file, then every file it depends on transitively, each once, into out
 * (cap entries); returns how many. */
size_t qn_refl_index_closure(const struct qn_refl_index *ix, size_t file, size_t *out, size_t cap);
/* Services, fully qualified, in the set's order. */
size_t qn_refl_index_nservices(const struct qn_refl_index *ix);
const char *qn_refl_index_service(const struct qn_refl_index *ix, size_t i);

#endif
