# qn_embed(OUTPUT <file.c> SYMBOL <name> [BASE <dir>] FILES <f>...)
#
# Generates a C file defining
#   const struct qn_embedded_file <name>[];   (name, data, len)
#   const size_t <name>_count;
# in the order FILES lists them. A file's name is its basename, or with BASE its
# path relative to that directory ("assets/index.js"). Each data array carries a
# trailing NUL (not counted in len) so text files can be used as C strings.
set(QN_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_run.cmake)

function(qn_embed)
  cmake_parse_arguments(E "" "OUTPUT;SYMBOL;BASE" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT ${E_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUT=${E_OUTPUT} -DSYM=${E_SYMBOL} "-DBASE=${E_BASE}"
            "-DFILES=${E_FILES}" -P ${QN_EMBED_SCRIPT}
    DEPENDS ${E_FILES} ${QN_EMBED_SCRIPT}
    COMMENT "Embedding ${E_SYMBOL}"
    VERBATIM)
endfunction()
