// Unicode data tables for NFC (generated into unicode_tables.cc by
// tests/text/gen_unicode_tables.py). Sorted by the first field.
#ifndef STRATA_TEXT_UNICODE_TABLES_H_
#define STRATA_TEXT_UNICODE_TABLES_H_

#include <cstddef>
#include <cstdint>

namespace strata::text {

struct CccEntry {
  uint32_t cp;
  uint8_t ccc;
};
struct DecompEntry {
  uint32_t cp, first, second;  // second == 0: singleton decomposition
};
struct ComposeEntry {
  uint32_t first, second, composite;
};
struct RangeEntry {
  uint32_t lo, hi;  // inclusive
};

extern const CccEntry kCccTable[];
extern const size_t kCccTableSize;
extern const DecompEntry kDecompTable[];
extern const size_t kDecompTableSize;
extern const ComposeEntry kComposeTable[];
extern const size_t kComposeTableSize;
extern const RangeEntry kNfcUnstableRanges[];
extern const size_t kNfcUnstableRangesSize;

}  // namespace strata::text

#endif  // STRATA_TEXT_UNICODE_TABLES_H_
