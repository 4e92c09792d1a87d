// libFuzzer entry point for ParseSafetensorsHeader. Built only with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include "fuzz_target.h"
#include "safetensors_header_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckSafetensorsHeader)
