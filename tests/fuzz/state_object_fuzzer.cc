// libFuzzer entry point for stored state objects (DecodeStateObjectBody and
// DecodeStateObject). Built only with STRATA_BUILD_FUZZERS=ON and clang; run
// through tools/fuzz.sh.
#include "fuzz_target.h"
#include "state_object_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckStateObject)
