// Run-time version queries (the library's side of strata_version.h).
#include "strata/strata.h"

extern "C" {

STRATA_API const char* strata_version_string(void) { return STRATA_VERSION_STRING; }

STRATA_API uint32_t strata_version_number(void) { return static_cast<uint32_t>(STRATA_VERSION_NUMBER); }

STRATA_API uint32_t strata_abi_version(void) { return static_cast<uint32_t>(STRATA_ABI_VERSION); }

}  // extern "C"
