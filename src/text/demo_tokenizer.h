// Writes a small, real byte-level BPE tokenizer (tokenizer.json plus
// tokenizer_config.json with a Qwen3-style chat template and <tool_call>
// syntax) sized for the demo model's 512-token vocabulary, so the demo model
// directory can chat and tests can build text model directories offline.
#ifndef STRATA_TEXT_DEMO_TOKENIZER_H_
#define STRATA_TEXT_DEMO_TOKENIZER_H_

#include <cstdint>
#include <string>

#include "base/status.h"

namespace strata {

// Total ids the demo tokenizer uses: 256 bytes, merges, then the added tokens.
inline constexpr int32_t kDemoTokenizerVocabSize = 512;

// Creates `dir` if needed and writes tokenizer.json and tokenizer_config.json.
Status WriteDemoTokenizer(const std::string& dir);

}  // namespace strata

#endif  // STRATA_TEXT_DEMO_TOKENIZER_H_
