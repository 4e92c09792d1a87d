// libFuzzer entry point for tokenizer.json (HfTokenizer: normalizers,
// pre-tokenizers, the BPE model, added tokens, post-processor, decoders).
// Built only with STRATA_BUILD_FUZZERS=ON and clang; run through tools/fuzz.sh.
#include "fuzz_target.h"
#include "tokenizer_json_check.h"

STRATA_FUZZ_TARGET(strata::fuzz::CheckTokenizerJson)
