# strata_add_gtest(name SOURCES ... LABELS ... [LIBS ...])
# Every test carries labels: unit | model | gpu | slow. GPU tests are built only
# with CUDA and share one device lock.
include(GoogleTest)
function(strata_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    message(FATAL_ERROR "${name}: every test needs LABELS")
  endif()
  if("gpu" IN_LIST T_LABELS AND NOT STRATA_HAVE_CUDA)
    return()
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE strata_core GTest::gtest GTest::gmock GTest::gtest_main ${T_LIBS})
  target_compile_definitions(${name} PRIVATE
    STRATA_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    STRATA_BINARY_DIR="${PROJECT_BINARY_DIR}"
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    STRATA_TEXT_DATA_DIR="${STRATA_TEXT_DATA_DIR}"
    STRATA_REF_PYTHON="${PROJECT_SOURCE_DIR}/.venv-ref/bin/python")
  set(props LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if("gpu" IN_LIST T_LABELS)
    list(APPEND props RESOURCE_LOCK gpu)
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST PROPERTIES ${props})
endfunction()
