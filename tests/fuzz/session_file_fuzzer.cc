// libFuzzer entry point for saved sessions (DecodeSessionBody and
// DecodeSession). Built only with STRATA_BUILD_FUZZERS=ON and clang; run
// through tools/fuzz.sh.
#include "fuzz_target.h"
#include "session_file_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckSessionFile)
