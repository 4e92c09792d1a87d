// UTF-8 primitives and the GPT-2 byte-level alphabet shared by the tokenizers
// and the streaming detokenizer.
#ifndef STRATA_TEXT_UNICODE_H_
#define STRATA_TEXT_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace strata::text {

// Debian's Abseil has its own string_view type: lookups in absl containers
// keyed by std::string and absl string functions need this conversion.
inline absl::string_view AsAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Decodes the well-formed UTF-8 sequence at s[pos]. Returns its length, or 0
// when the bytes there do not start a well-formed sequence (*cp untouched).
size_t DecodeUtf8(std::string_view s, size_t pos, char32_t* cp);
void AppendUtf8(char32_t cp, std::string* out);

// Offset of the first byte that is not part of a well-formed sequence, or
// s.size() when all of s is valid UTF-8.
size_t FirstInvalidUtf8(std::string_view s);

// s with every maximal ill-formed subpart replaced by U+FFFD (what Rust's
// String::from_utf8_lossy and Python's decode("utf-8", "replace") do).
std::string Utf8Lossy(std::string_view s);

// Length of the longest prefix of s after which no byte is held back for
// streaming: s minus a trailing incomplete (but so far well-formed) sequence.
size_t CompleteUtf8PrefixLength(std::string_view s);

// Unicode White_Space (Rust char::is_whitespace).
bool IsUnicodeWhitespace(char32_t c);

// GPT-2 byte-level alphabet: byte b <-> one printable code point.
char32_t ByteToByteLevelChar(uint8_t b);
// The byte of a byte-level code point, or -1 when c is not in the alphabet.
int ByteLevelCharToByte(char32_t c);
// Byte-level form of raw bytes (each byte becomes its alphabet character).
std::string BytesToByteLevel(std::string_view bytes);
// Raw bytes of a byte-level string; false when a character is outside the
// alphabet (then *out is unspecified).
bool ByteLevelToBytes(std::string_view s, std::string* out);

}  // namespace strata::text

#endif  // STRATA_TEXT_UNICODE_H_
