// Checks of config.json values that every architecture makes the same way:
// special token ids against the vocabulary, the context length, and fields
// that must divide or bound one another. Architecture-specific checks stay
// in the parsers (src/model/models/*_config.cc); these exist so that the same
// impossibility is refused with the same message everywhere.
#ifndef STRATA_MODEL_CONFIG_CHECKS_H_
#define STRATA_MODEL_CONFIG_CHECKS_H_

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/config_reader.h"

namespace strata {

// config.json's bos_token_id, eos_token_id and pad_token_id. -1: none.
struct SpecialTokenIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;
};

// Reads the three ids; an absent or null key keeps its entry of `defaults`
// (the architecture's transformers default). -1 means none, as transformers
// writes it. eos_token_id may be a list (generation stops at any of them):
// the first entry is the canonical one and every entry is checked. An id
// outside [0, vocab_size), or a default that is, is an InvalidArgument error
// naming the field (and the list index).
StatusOr<SpecialTokenIds> ReadSpecialTokenIds(const ConfigReader& c, int64_t vocab_size,
                                              const SpecialTokenIds& defaults);

// A context length such as max_position_embeddings: `fallback` when absent
// (0 stands for "not stated"); when present it must be positive.
StatusOr<int64_t> ReadContextLength(const ConfigReader& c, const std::string& key,
                                    int64_t fallback);

// InvalidArgument naming `divisor_key` unless `divisor` divides `dividend`
// (e.g. num_key_value_heads and num_attention_heads).
Status CheckDivides(const ConfigReader& c, const std::string& divisor_key, int64_t divisor,
                    const std::string& dividend_key, int64_t dividend);

// InvalidArgument naming `key` when `value` exceeds `limit`, the value of
// `limit_key` (e.g. num_experts_per_tok and the number of experts).
Status CheckAtMost(const ConfigReader& c, const std::string& key, int64_t value,
                   const std::string& limit_key, int64_t limit);

}  // namespace strata

#endif  // STRATA_MODEL_CONFIG_CHECKS_H_
