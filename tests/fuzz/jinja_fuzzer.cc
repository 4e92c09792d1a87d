// libFuzzer target: chat-template parsing and rendering under a budget
// (jinja_check.h). Built with STRATA_BUILD_FUZZERS=ON and clang; run through
// tools/fuzz.sh jinja.
#include "fuzz_target.h"
#include "jinja_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckJinja)
