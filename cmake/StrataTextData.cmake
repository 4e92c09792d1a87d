# The published tokenizer files the text tests and the tokenizer bench read
# (tests/data/text/README.md) are kept in the repository as one xz archive, so
# a fresh clone tests the same bytes as any checkout. Configure unpacks it into
# the build tree and refuses to go on unless every file matches SHA256SUMS; the
# ctest test text_data_sha256 repeats the check (`cmake -P` of this file) so a
# copy changed after configure fails the suite instead of skewing its results.
#
#   strata_unpack_text_data(<archive> <sums> <dir>): unpack when the archive changed
#   cmake -DSTRATA_TEXT_DATA_DIR=<dir> -DSTRATA_TEXT_DATA_SUMS=<sums> -P StrataTextData.cmake

function(strata_check_text_data dir sums)
  file(STRINGS "${sums}" lines)
  set(problems "")
  set(checked 0)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^([0-9a-f]+)  (.+)$")
      message(FATAL_ERROR "${sums}: not a sha256sum line: ${line}")
    endif()
    set(want "${CMAKE_MATCH_1}")
    set(path "${CMAKE_MATCH_2}")
    math(EXPR checked "${checked} + 1")
    if(NOT EXISTS "${dir}/${path}")
      list(APPEND problems "${dir}/${path} is missing")
      continue()
    endif()
    file(SHA256 "${dir}/${path}" got)
    if(NOT got STREQUAL want)
      list(APPEND problems "${dir}/${path}: SHA-256 ${got}, ${sums} says ${want}")
    endif()
  endforeach()
  if(checked EQUAL 0)
    message(FATAL_ERROR "${sums} lists no files")
  endif()
  if(problems)
    list(JOIN problems "\n  " text)
    message(FATAL_ERROR "text test data differs from ${sums}:\n  ${text}")
  endif()
  message(STATUS "text test data: ${checked} files match ${sums}")
endfunction()

function(strata_unpack_text_data archive sums dir)
  # Editing the archive or the sums reconfigures, which unpacks again.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${archive}" "${sums}")
  file(SHA256 "${archive}" archive_sha)
  file(SHA256 "${sums}" sums_sha)
  set(stamp "${dir}.stamp")
  set(want_stamp "${archive_sha} ${sums_sha}")
  set(have_stamp "")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" have_stamp)
  endif()
  if(have_stamp STREQUAL want_stamp AND IS_DIRECTORY "${dir}")
    return()
  endif()
  file(REMOVE "${stamp}")
  file(REMOVE_RECURSE "${dir}")
  # TOUCH: the archive stores mtime 0, which would look older than any output.
  file(ARCHIVE_EXTRACT INPUT "${archive}" DESTINATION "${dir}" TOUCH)
  strata_check_text_data("${dir}" "${sums}")
  file(WRITE "${stamp}" "${want_stamp}")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  if(NOT STRATA_TEXT_DATA_DIR OR NOT STRATA_TEXT_DATA_SUMS)
    message(FATAL_ERROR "usage: cmake -DSTRATA_TEXT_DATA_DIR=<dir> -DSTRATA_TEXT_DATA_SUMS=<sums> -P ${CMAKE_SCRIPT_MODE_FILE}")
  endif()
  strata_check_text_data("${STRATA_TEXT_DATA_DIR}" "${STRATA_TEXT_DATA_SUMS}")
endif()
