// Unicode Normalization Forms C and D (canonical), from the generated tables
// in unicode_tables.cc. Input must be valid UTF-8.
#ifndef STRATA_TEXT_UNICODE_NFC_H_
#define STRATA_TEXT_UNICODE_NFC_H_

#include <string>
#include <string_view>

namespace strata::text {

// True when s is certainly unchanged by NFC (no code point that NFC could
// alter or combine): the fast path for nearly all real text.
bool IsNfcStable(std::string_view s);
std::string ToNfc(std::string_view s);
std::string ToNfd(std::string_view s);

}  // namespace strata::text

#endif  // STRATA_TEXT_UNICODE_NFC_H_
