// Unicode data tables for the normalizers: NFC/NFD/NFKC/NFKD, Lowercase and
// StripAccents (generated into unicode_tables.cc by
// tests/text/gen_unicode_tables.py, as the reference tokenizers library applies
// them). Sorted by the first field.
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
// A code point's mapping: kCompatData[offset, offset + len).
struct MappingEntry {
  uint32_t cp, offset, len;
};

extern const CccEntry kCccTable[];
extern const size_t kCccTableSize;
extern const DecompEntry kDecompTable[];
extern const size_t kDecompTableSize;
extern const ComposeEntry kComposeTable[];
extern const size_t kComposeTableSize;
extern const RangeEntry kNfcUnstableRanges[];
extern const size_t kNfcUnstableRangesSize;
// Code points NFKC may change or combine (a superset of the NFC ones).
extern const RangeEntry kNfkcUnstableRanges[];
extern const size_t kNfkcUnstableRangesSize;
// Full compatibility decompositions (recursive, before canonical ordering) of
// the code points where they differ from the canonical decomposition.
extern const uint32_t kCompatData[];
extern const MappingEntry kCompatTable[];
extern const size_t kCompatTableSize;
// Lowercase mappings (Rust char::to_lowercase) that change the code point;
// `second` is 0 for one-character mappings.
extern const DecompEntry kLowercaseTable[];
extern const size_t kLowercaseTableSize;
// What StripAccents removes (the reference's combining marks).
extern const RangeEntry kCombiningMarkRanges[];
extern const size_t kCombiningMarkRangesSize;

}  // namespace strata::text

#endif  // STRATA_TEXT_UNICODE_TABLES_H_
