# The gRPC wire reader and encoders (broker/src/transport/grpc_wire.c) as a
# libFuzzer target (clang, -DQN_FUZZ=ON), and its seed writer. grpc_wire.c is
# compiled into the target so that it carries the fuzzer's instrumentation and
# the sanitizers; it needs only headers (call.h includes protobuf-c's). The
# check suite of grpc_wire is test/broker/transport/test_grpc_wire.c.
if(QN_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_grpc_wire ${CMAKE_CURRENT_LIST_DIR}/fuzz_grpc_wire.c
                 ${PROJECT_SOURCE_DIR}/broker/src/transport/grpc_wire.c)
  target_include_directories(fuzz_grpc_wire PRIVATE ${PROJECT_SOURCE_DIR}/broker/src)
  target_compile_options(fuzz_grpc_wire PRIVATE
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(fuzz_grpc_wire PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_grpc_wire PRIVATE qn_proto qn_codec)
  add_executable(fuzz_grpc_wire_seed ${CMAKE_CURRENT_LIST_DIR}/fuzz_grpc_wire_seed.c)
endif()
