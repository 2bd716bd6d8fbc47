# qn_embed(OUTPUT <file.c> SYMBOL <name> FILES <f>...)
#
# Generates a C file defining
#   const struct qn_embedded_file <name>[];   (name = file's basename, data, len)
#   const size_t <name>_count;
# in the order FILES lists them. Each data array carries a trailing NUL (not
# counted in len) so text files can be used as C strings.
set(QN_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_run.cmake)

function(qn_embed)
  cmake_parse_arguments(E "" "OUTPUT;SYMBOL" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT ${E_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUT=${E_OUTPUT} -DSYM=${E_SYMBOL} "-DFILES=${E_FILES}"
            -P ${QN_EMBED_SCRIPT}
    DEPENDS ${E_FILES} ${QN_EMBED_SCRIPT}
    COMMENT "Embedding ${E_SYMBOL}"
    VERBATIM)
endfunction()
