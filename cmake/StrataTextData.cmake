# The published tokenizer files the text tests and the tokenizer bench read
# (tests/data/text/README.md) are kept in the repository as one xz archive, so
# a fresh clone tests the same bytes as any checkout. Configure unpacks it into
# the build tree and refuses to go on unless every file matches SHA256SUMS; the
# ctest test text_data_sha256 repeats the check (`cmake -P` of this file) so a
# copy changed after configure fails the suite instead of skewing its results.
#
#   strata_unpack_text_data(<archive> <sums> <dir>): unpack unless <dir> is a good copy
#   cmake -DSTRATA_TEXT_DATA_DIR=<dir> -DSTRATA_TEXT_DATA_SUMS=<sums> -P StrataTextData.cmake

# Sets <problems> to what differs between <dir> and <sums> (empty: all match).
function(strata_check_text_data dir sums problems)
  file(STRINGS "${sums}" lines)
  set(found "")
  set(checked 0)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^([0-9a-f]+)  (.+)$")
      message(FATAL_ERROR "${sums}: not a sha256sum line: ${line}")
    endif()
    set(want "${CMAKE_MATCH_1}")
    set(path "${CMAKE_MATCH_2}")
    math(EXPR checked "${checked} + 1")
    if(NOT EXISTS "${dir}/${path}")
      list(APPEND found "${dir}/${path} is missing")
      continue()
    endif()
    file(SHA256 "${dir}/${path}" got)
    if(NOT got STREQUAL want)
      list(APPEND found "${dir}/${path}: SHA-256 ${got}, ${sums} says ${want}")
    endif()
  endforeach()
  if(checked EQUAL 0)
    message(FATAL_ERROR "${sums} lists no files")
  endif()
  set(${problems} "${found}" PARENT_SCOPE)
endfunction()

function(strata_fail_text_data sums problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "text test data differs from ${sums}:\n  ${text}")
endfunction()

function(strata_unpack_text_data archive sums dir)
  # Editing the archive or the sums reconfigures, which unpacks again.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${archive}" "${sums}")
  file(SHA256 "${archive}" archive_sha)
  set(stamp "${dir}.stamp")
  set(have_sha "")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" have_sha)
  endif()
  # Checked on every configure (a fraction of a second), so a changed or
  # damaged copy is replaced rather than tested.
  if(have_sha STREQUAL archive_sha)
    strata_check_text_data("${dir}" "${sums}" problems)
    if(NOT problems)
      return()
    endif()
  endif()
  file(REMOVE "${stamp}")
  file(REMOVE_RECURSE "${dir}")
  # TOUCH: the archive stores mtime 0, which would look older than any output.
  file(ARCHIVE_EXTRACT INPUT "${archive}" DESTINATION "${dir}" TOUCH)
  strata_check_text_data("${dir}" "${sums}" problems)
  if(problems)
    strata_fail_text_data("${sums}" "${problems}")
  endif()
  file(WRITE "${stamp}" "${archive_sha}")
  message(STATUS "text test data: unpacked into ${dir}, SHA-256 as in ${sums}")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  if(NOT STRATA_TEXT_DATA_DIR OR NOT STRATA_TEXT_DATA_SUMS)
    message(FATAL_ERROR "usage: cmake -DSTRATA_TEXT_DATA_DIR=<dir> -DSTRATA_TEXT_DATA_SUMS=<sums> -P ${CMAKE_SCRIPT_MODE_FILE}")
  endif()
  strata_check_text_data("${STRATA_TEXT_DATA_DIR}" "${STRATA_TEXT_DATA_SUMS}" problems)
  if(problems)
    strata_fail_text_data("${STRATA_TEXT_DATA_SUMS}" "${problems}")
  endif()
  message(STATUS "text test data in ${STRATA_TEXT_DATA_DIR} matches ${STRATA_TEXT_DATA_SUMS}")
endif()
