// UTF-8 primitives and the byte-level alphabet (see unicode.h).
#include "text/unicode.h"

#include <array>

namespace strata::text {

size_t DecodeUtf8(std::string_view s, size_t pos, char32_t* cp) {
  const size_t n = s.size();
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  auto cont = [&](size_t i) { return i < n && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80; };
  auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (!cont(pos + 1)) return 0;
    *cp = ((b0 & 0x1F) << 6) | (byte(pos + 1) & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(pos + 1) || !cont(pos + 2)) return 0;
    const uint8_t b1 = byte(pos + 1);
    if ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F)) return 0;
    *cp = ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (byte(pos + 2) & 0x3F);
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(pos + 1) || !cont(pos + 2) || !cont(pos + 3)) return 0;
    const uint8_t b1 = byte(pos + 1);
    if ((b0 == 0xF0 && b1 < 0x90) || (b0 == 0xF4 && b1 > 0x8F)) return 0;
    *cp = ((b0 & 0x07) << 18) | ((b1 & 0x3F) << 12) | ((byte(pos + 2) & 0x3F) << 6) |
          (byte(pos + 3) & 0x3F);
    return 4;
  }
  return 0;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t FirstInvalidUtf8(std::string_view s) {
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t len = DecodeUtf8(s, i, &cp);
    if (len == 0) return i;
    i += len;
  }
  return s.size();
}

namespace {

// Length of the maximal ill-formed subpart starting at s[pos] (>= 1): the
// longest prefix of a well-formed sequence, per the Unicode "substitution of
// maximal subparts" practice.
size_t MaximalSubpart(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  size_t len = 1;
  for (size_t k = 0; k < need; ++k) {
    if (pos + len >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[pos + len]);
    if (b < lo || b > hi) break;
    lo = 0x80;
    hi = 0xBF;
    ++len;
  }
  return len;
}

}  // namespace

std::string Utf8Lossy(std::string_view s) {
  const size_t bad = FirstInvalidUtf8(s);
  if (bad == s.size()) return std::string(s);
  std::string out(s.substr(0, bad));
  size_t i = bad;
  char32_t cp;
  while (i < s.size()) {
    const size_t len = DecodeUtf8(s, i, &cp);
    if (len) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += MaximalSubpart(s, i);
    }
  }
  return out;
}

size_t CompleteUtf8PrefixLength(std::string_view s) {
  // Only the last 3 bytes can belong to an unfinished sequence.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t pos = n - back;
    const auto b = static_cast<uint8_t>(s[pos]);
    if ((b & 0xC0) == 0x80) continue;    // continuation byte: look further back
    if (b < 0xC2 || b > 0xF4) return n;  // ASCII or a byte that never starts a sequence
    // A lead byte: is the tail a proper prefix of a well-formed sequence?
    if (MaximalSubpart(s, pos) == back) {
      const size_t full = b <= 0xDF ? 2 : b <= 0xEF ? 3 : 4;
      if (back < full) return pos;
    }
    return n;
  }
  return n;
}

bool IsUnicodeWhitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

namespace {

struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char;
  std::array<int16_t, 324> char_to_byte;  // all alphabet code points are < 324
  std::array<std::string, 256> byte_to_utf8;
  ByteLevelTables() {
    char_to_byte.fill(-1);
    // Printable Latin-1 bytes map to themselves; the rest to U+0100 + n, in order.
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
      AppendUtf8(byte_to_char[b], &byte_to_utf8[b]);
    }
  }
};

const ByteLevelTables& Tables() {
  static const ByteLevelTables* t = new ByteLevelTables();
  return *t;
}

}  // namespace

char32_t ByteToByteLevelChar(uint8_t b) { return Tables().byte_to_char[b]; }

int ByteLevelCharToByte(char32_t c) {
  return c < Tables().char_to_byte.size() ? Tables().char_to_byte[c] : -1;
}

std::string BytesToByteLevel(std::string_view bytes) {
  const auto& t = Tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(ch)];
  return out;
}

bool ByteLevelToBytes(std::string_view s, std::string* out) {
  out->clear();
  size_t i = 0;
  char32_t cp;
  while (i < s.size()) {
    const size_t len = DecodeUtf8(s, i, &cp);
    if (len == 0) return false;
    const int b = ByteLevelCharToByte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

}  // namespace strata::text
