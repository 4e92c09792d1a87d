// libFuzzer target: the incremental tool-call parsers (tool_call_check.h).
// Built with STRATA_BUILD_FUZZERS=ON and clang; run through
// tools/fuzz.sh tool_call.
#include "fuzz_target.h"
#include "tool_call_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckToolCalls)
