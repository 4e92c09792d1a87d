// Unicode Normalization Forms C, D, KC and KD, Lowercase and combining marks,
// from the generated tables in unicode_tables.cc (as the reference tokenizers
// library applies them). Input must be valid UTF-8.
#ifndef STRATA_TEXT_UNICODE_NFC_H_
#define STRATA_TEXT_UNICODE_NFC_H_

#include <string>
#include <string_view>

namespace strata::text {

// True when s is certainly unchanged by NFC (no code point that NFC could
// alter or combine): the fast path for nearly all real text.
bool IsNfcStable(std::string_view s);
// The same for NFKC.
bool IsNfkcStable(std::string_view s);
std::string ToNfc(std::string_view s);
std::string ToNfd(std::string_view s);
std::string ToNfkc(std::string_view s);
std::string ToNfkd(std::string_view s);

// Every character lowercased on its own (Rust char::to_lowercase, what
// tokenizers' Lowercase does: no context, so Σ is always σ; İ is i + U+0307).
std::string ToLowercase(std::string_view s);

// A combining mark (general category M) as the reference's StripAccents sees it.
bool IsCombiningMark(char32_t c);

}  // namespace strata::text

#endif  // STRATA_TEXT_UNICODE_NFC_H_
