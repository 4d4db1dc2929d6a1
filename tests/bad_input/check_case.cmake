# Runs `troupe CMD CASE.yaml [args from CASE.args]` in DIR (CMD: check unless
# given), or `troupe [args from CASE.cmd]` when there is a CASE.cmd, and compares
# its exit code (2) and stderr (byte for byte) with CASE.expected.
if(NOT CMD)
  set(CMD check)
endif()
set(args "")
if(EXISTS "${DIR}/${CASE}.args")
  file(STRINGS "${DIR}/${CASE}.args" args)
endif()
if(EXISTS "${DIR}/${CASE}.cmd")
  file(STRINGS "${DIR}/${CASE}.cmd" command_line)
else()
  set(command_line ${CMD} "${CASE}.yaml" ${args})
endif()
execute_process(COMMAND "${TROUPE}" ${command_line}
  WORKING_DIRECTORY "${DIR}"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 30)
file(READ "${DIR}/${CASE}.expected" expected)
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "${CASE}: exit code ${rc}, expected 2\nstderr:\n${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "${CASE}: printed on stdout for an invalid graph:\n${out}")
endif()
if(NOT err STREQUAL expected)
  message(FATAL_ERROR "${CASE}: stderr differs\n--- expected\n${expected}--- got\n${err}")
endif()
