# The request pre-scan (broker/src/transport/pb_scan.c): its check suite, and
# with -DQN_FUZZ=ON its libFuzzer target. pb_scan.c is compiled into each
# directly (it needs only protobuf-c and the generated queen.v1 descriptors),
# so neither links the broker library, which also lists it (call.c runs it on
# every request message).
set(QN_PB_SCAN_SRC ${PROJECT_SOURCE_DIR}/broker/src/transport/pb_scan.c)
add_executable(test_pb_scan ${CMAKE_CURRENT_LIST_DIR}/test_pb_scan.c ${QN_PB_SCAN_SRC})
target_include_directories(test_pb_scan PRIVATE ${PROJECT_SOURCE_DIR}/broker/src/transport)
target_link_libraries(test_pb_scan PRIVATE qn_proto qn_codec qn_check_main PkgConfig::CHECK)
qn_add_suite(NAME broker_pb_scan RUNNER test_pb_scan)

if(QN_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang")
  add_executable(fuzz_pb_scan ${CMAKE_CURRENT_LIST_DIR}/fuzz_pb_scan.c ${QN_PB_SCAN_SRC})
  target_include_directories(fuzz_pb_scan PRIVATE ${PROJECT_SOURCE_DIR}/broker/src/transport)
  target_compile_options(fuzz_pb_scan PRIVATE
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(fuzz_pb_scan PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_pb_scan PRIVATE qn_proto qn_codec)
endif()
