// libFuzzer entry point for model.safetensors.index.json (ParseSafetensorsIndex
// and WeightStore::Open of a sharded directory). Built only with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include "fuzz_target.h"
#include "safetensors_index_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckSafetensorsIndex)
