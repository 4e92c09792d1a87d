// libFuzzer entry point for tiktoken rank files (RankBpeModel and the
// Kimi-layout TiktokenTokenizer on top). Built only with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include "fuzz_target.h"
#include "tiktoken_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckTiktoken)
