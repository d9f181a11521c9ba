# trident_add_layout_test(DP TP PP SCHEDULE V): one ctest named after the layout that checks it
# against the serial run (tests/e2e/layout_vs_serial.sh): 20 losses and the first gradients.
function(trident_add_layout_test dp tp pp schedule v)
  set(name "layout.dp${dp}_tp${tp}_pp${pp}")
  if(pp GREATER 1)
    string(APPEND name "_${schedule}")
  endif()
  if(v GREATER 1)
    string(APPEND name "_v${v}")
  endif()
  add_test(NAME ${name}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/e2e/layout_vs_serial.sh ${TRIDENT_EXE}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/${name} ${dp} ${tp} ${pp}
                   ${schedule} ${v})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${TRIDENT_TEST_ENV}" TIMEOUT 300
                                          LABELS layout)
endfunction()
