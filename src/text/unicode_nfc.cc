// NFC/NFD/NFKC/NFKD: full canonical (or compatibility) decomposition (tables +
// Hangul arithmetic), canonical ordering by combining class, then canonical
// composition. Also Lowercase and the combining marks StripAccents removes.
#include "text/unicode_nfc.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "text/unicode.h"
#include "text/unicode_tables.h"

namespace strata::text {
namespace {

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
              kSCount = kLCount * kNCount;

uint8_t Ccc(char32_t c) {
  if (c < 0x300) return 0;
  const CccEntry* end = kCccTable + kCccTableSize;
  const CccEntry* it =
      std::lower_bound(kCccTable, end, c, [](const CccEntry& e, char32_t v) { return e.cp < v; });
  return (it != end && it->cp == c) ? it->ccc : 0;
}

const DecompEntry* FindDecomp(char32_t c) {
  const DecompEntry* end = kDecompTable + kDecompTableSize;
  const DecompEntry* it = std::lower_bound(
      kDecompTable, end, c, [](const DecompEntry& e, char32_t v) { return e.cp < v; });
  return (it != end && it->cp == c) ? it : nullptr;
}

const MappingEntry* FindCompat(char32_t c) {
  const MappingEntry* end = kCompatTable + kCompatTableSize;
  const MappingEntry* it = std::lower_bound(
      kCompatTable, end, c, [](const MappingEntry& e, char32_t v) { return e.cp < v; });
  return (it != end && it->cp == c) ? it : nullptr;
}

bool InRanges(const RangeEntry* table, size_t size, char32_t c) {
  const RangeEntry* end = table + size;
  const RangeEntry* it =
      std::upper_bound(table, end, c, [](char32_t v, const RangeEntry& e) { return v < e.lo; });
  if (it == table) return false;
  --it;
  return c <= it->hi;
}

void Decompose(char32_t c, std::vector<char32_t>* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const int s = static_cast<int>(c - kSBase);
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out->push_back(kTBase + s % kTCount);
    return;
  }
  const DecompEntry* d = c >= 0xC0 ? FindDecomp(c) : nullptr;
  if (!d) {
    out->push_back(c);
    return;
  }
  Decompose(d->first, out);
  if (d->second) Decompose(d->second, out);
}

const absl::flat_hash_map<uint64_t, char32_t>& ComposeMap() {
  static const auto* map = [] {
    auto* m = new absl::flat_hash_map<uint64_t, char32_t>();
    for (size_t i = 0; i < kComposeTableSize; ++i) {
      const ComposeEntry& e = kComposeTable[i];
      (*m)[(static_cast<uint64_t>(e.first) << 32) | e.second] = e.composite;
    }
    return m;
  }();
  return *map;
}

// 0 when a and b do not compose.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto& m = ComposeMap();
  auto it = m.find((static_cast<uint64_t>(a) << 32) | b);
  return it == m.end() ? 0 : it->second;
}

// `compat`: compatibility decomposition (NFKD) instead of canonical (NFD).
std::vector<char32_t> DecomposeAndOrder(std::string_view s, bool compat) {
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  size_t i = 0;
  char32_t c;
  while (i < s.size()) {
    const size_t len = DecodeUtf8(s, i, &c);
    if (len == 0) {  // callers pass valid UTF-8; keep going defensively
      c = 0xFFFD;
      i += 1;
    } else {
      i += len;
    }
    if (compat && c >= 0xA0) {
      if (const MappingEntry* m = FindCompat(c)) {
        cps.insert(cps.end(), kCompatData + m->offset, kCompatData + m->offset + m->len);
        continue;
      }
    }
    Decompose(c, &cps);
  }
  // Canonical ordering: stable sort of every run of non-starters by class.
  size_t k = 0;
  while (k < cps.size()) {
    if (Ccc(cps[k]) == 0) {
      ++k;
      continue;
    }
    size_t e = k;
    while (e < cps.size() && Ccc(cps[e]) != 0) ++e;
    if (e - k > 1) {
      std::stable_sort(cps.begin() + k, cps.begin() + e,
                       [](char32_t a, char32_t b) { return Ccc(a) < Ccc(b); });
    }
    k = e;
  }
  return cps;
}

// Canonical composition of a decomposed, ordered sequence, as UTF-8.
std::string ComposeAll(const std::vector<char32_t>& d, size_t size_hint) {
  std::vector<char32_t> out;
  out.reserve(d.size());
  std::ptrdiff_t starter = -1;
  for (char32_t c : d) {
    const uint8_t cc = Ccc(c);
    if (starter >= 0) {
      // c is blocked from the starter when something between them is a
      // starter or has a class >= c's.
      const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
      const uint8_t prev_cc = adjacent ? 0 : Ccc(out.back());
      const bool blocked = !adjacent && (prev_cc == 0 || prev_cc >= cc);
      if (!blocked) {
        const char32_t comp = Compose(out[starter], c);
        if (comp) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(c);
  }
  std::string r;
  r.reserve(size_hint);
  for (char32_t c : out) AppendUtf8(c, &r);
  return r;
}

std::string ToUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

// True when no code point of s is in the ranges; lead bytes below `first_lead`
// start code points that are in none.
bool Stable(std::string_view s, const RangeEntry* table, size_t size, uint8_t first_lead) {
  size_t i = 0;
  char32_t c;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < first_lead) {  // a code point below the first unstable one
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    const size_t len = DecodeUtf8(s, i, &c);
    if (len == 0) return false;
    if (InRanges(table, size, c)) return false;
    i += len;
  }
  return true;
}

const DecompEntry* FindLower(char32_t c) {
  const DecompEntry* end = kLowercaseTable + kLowercaseTableSize;
  const DecompEntry* it = std::lower_bound(
      kLowercaseTable, end, c, [](const DecompEntry& e, char32_t v) { return e.cp < v; });
  return (it != end && it->cp == c) ? it : nullptr;
}

}  // namespace

// Every code point below U+0300 (lead bytes below 0xCC) is NFC-stable; every
// one below U+00A0 (lead bytes below 0xC2) is NFKC-stable.
bool IsNfcStable(std::string_view s) {
  return Stable(s, kNfcUnstableRanges, kNfcUnstableRangesSize, 0xCC);
}

bool IsNfkcStable(std::string_view s) {
  return Stable(s, kNfkcUnstableRanges, kNfkcUnstableRangesSize, 0xC2);
}

std::string ToNfd(std::string_view s) { return ToUtf8(DecomposeAndOrder(s, /*compat=*/false)); }

std::string ToNfkd(std::string_view s) { return ToUtf8(DecomposeAndOrder(s, /*compat=*/true)); }

std::string ToNfc(std::string_view s) {
  if (IsNfcStable(s)) return std::string(s);
  return ComposeAll(DecomposeAndOrder(s, /*compat=*/false), s.size());
}

std::string ToNfkc(std::string_view s) {
  if (IsNfkcStable(s)) return std::string(s);
  return ComposeAll(DecomposeAndOrder(s, /*compat=*/true), s.size());
}

std::string ToLowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  char32_t c;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    if (b < 0x80) {
      out += static_cast<char>(b >= 'A' && b <= 'Z' ? b + ('a' - 'A') : b);
      ++i;
      continue;
    }
    size_t len = DecodeUtf8(s, i, &c);
    if (len == 0) {  // callers pass valid UTF-8; keep the byte
      out += s[i++];
      continue;
    }
    if (const DecompEntry* e = FindLower(c)) {
      AppendUtf8(e->first, &out);
      if (e->second) AppendUtf8(e->second, &out);
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  return out;
}

bool IsCombiningMark(char32_t c) {
  return c >= 0x300 && InRanges(kCombiningMarkRanges, kCombiningMarkRangesSize, c);
}

}  // namespace strata::text
