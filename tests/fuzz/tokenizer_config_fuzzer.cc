// libFuzzer entry point for tokenizer_config.json (ParseTokenizerConfig, the
// tokenizers that apply it, and its chat_template). Built only with
// STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include "fuzz_target.h"
#include "tokenizer_config_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckTokenizerConfig)
