// Unicode case tables matching Python's str methods (generated into
// case_tables.cc by gen_case_tables.py), so upper/lower/title/capitalize give
// the bytes transformers' Python renders.
#ifndef STRATA_TEXT_JINJA_CASE_TABLES_H_
#define STRATA_TEXT_JINJA_CASE_TABLES_H_

#include <cstddef>
#include <cstdint>

namespace strata::jinja {

struct CaseMapping {
  uint32_t code_point;
  const char* utf8;  // may be several code points ("ß" -> "SS")
};

struct CaseRange {
  uint32_t first;
  uint32_t last;
};

// Sorted by code point.
extern const CaseMapping kUpper[];
extern const size_t kUpperSize;
extern const CaseMapping kLower[];
extern const size_t kLowerSize;
extern const CaseMapping kTitle[];
extern const size_t kTitleSize;
extern const CaseRange kCased[];
extern const size_t kCasedSize;

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_CASE_TABLES_H_
