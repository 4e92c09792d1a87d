// libFuzzer target: JSON texts from the host (host_json_check.h). Built with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh host_json.
#include "fuzz_target.h"
#include "host_json_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckHostJson)
