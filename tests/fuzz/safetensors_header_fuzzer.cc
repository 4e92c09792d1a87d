// libFuzzer entry point for ParseSafetensorsHeader. Built only with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include <cstdio>
#include <cstdlib>

#include "safetensors_header_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const strata::fuzz::CheckResult r = strata::fuzz::CheckSafetensorsHeader(data, size);
  if (!r.violation.empty()) {
    std::fprintf(stderr, "invariant violated: %s\n", r.violation.c_str());
    std::abort();
  }
  return 0;
}
