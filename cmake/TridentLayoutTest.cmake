# trident_add_layout_test(DP TP PP SCHEDULE V [ZERO [OFFLOAD [SP]]]): one ctest named after the
# layout that checks it against the serial run (tests/e2e/layout_vs_serial.sh): 20 losses and the
# first gradients. ZERO is the ZeRO stage (default 0), OFFLOAD the optimizer offload (default
# none), SP 1 turns on sequence parallelism (default 0). With TRIDENT_LAYOUT_RUN set (a run config
# under inputs/, e.g. llama-tiny) the test runs that model instead of the tiny GPT-2 and its name
# starts with the run's family ("llama_layout.").
function(trident_add_layout_test dp tp pp schedule v)
  set(zero 0)
  set(offload none)
  if(ARGC GREATER 5)
    set(zero ${ARGV5})
  endif()
  if(ARGC GREATER 6)
    set(offload ${ARGV6})
  endif()
  set(sp 0)
  if(ARGC GREATER 7)
    set(sp ${ARGV7})
  endif()
  set(run tiny)
  set(name "layout.dp${dp}_tp${tp}_pp${pp}")
  if(TRIDENT_LAYOUT_RUN)
    set(run ${TRIDENT_LAYOUT_RUN})
    string(REGEX REPLACE "-.*" "" family ${run})
    set(name "${family}_layout.dp${dp}_tp${tp}_pp${pp}")
  endif()
  if(pp GREATER 1)
    string(APPEND name "_${schedule}")
  endif()
  if(v GREATER 1)
    string(APPEND name "_v${v}")
  endif()
  if(zero GREATER 0)
    string(APPEND name "_zero${zero}")
  endif()
  if(NOT offload STREQUAL "none")
    string(APPEND name "_offload_${offload}")
  endif()
  if(sp)
    string(APPEND name "_sp")
  endif()
  add_test(NAME ${name}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/layout_vs_serial.sh ${TRIDENT_EXE}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/${name} ${dp} ${tp} ${pp}
                   ${schedule} ${v} ${zero} ${offload} ${sp})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${TRIDENT_TEST_ENV};TRIDENT_TEST_RUN=${run}"
                                          TIMEOUT 300 LABELS layout)
endfunction()
