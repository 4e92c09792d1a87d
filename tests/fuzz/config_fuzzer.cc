// libFuzzer entry point for config.json (ConfigReader and every
// architecture's config parser). Built only with STRATA_BUILD_FUZZERS=ON and
// clang; run through tools/fuzz.sh.
#include "config_check.h"
#include "fuzz_target.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckConfig)
