// Readers of config.json fields that several architectures spell the same
// way: aliased keys, per-layer string lists, the dense/sparse MLP pattern,
// and the error for a value Strata does not run. Each error names the file
// and the field, as ConfigReader's do.
#ifndef STRATA_MODEL_CONFIG_FIELDS_H_
#define STRATA_MODEL_CONFIG_FIELDS_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config_checks.h"
#include "model/config_reader.h"

namespace strata {

// What every decoder-only config.json states the same way; each
// architecture's config extends it.
struct DecoderConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // D
  int64_t num_layers = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  int64_t max_context = 0;  // 0: not stated
  int32_t bos_token_id = -1;
  int32_t eos_token_id = -1;
};

// The architecture's transformers defaults for DecoderConfig's optional fields.
struct DecoderDefaults {
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 0;  // 0: not stated
  SpecialTokenIds token_ids;
};

// vocab_size, hidden_size and num_hidden_layers (required), rms_norm_eps
// (> 0), tie_word_embeddings, max_position_embeddings and the special token
// ids (checked against the vocabulary).
Status ReadDecoderConfig(const ConfigReader& c, const DecoderDefaults& defaults,
                         DecoderConfig& out);

// Unimplemented, naming `key`: a well-formed value this build does not run
// (an activation, a scoring function), as opposed to an impossible one.
Status UnsupportedField(const ConfigReader& c, const std::string& key, const std::string& what);

// The value of the first present key among aliases (nullopt when none is);
// an error naming both keys when two present spellings disagree.
StatusOr<std::optional<int64_t>> AliasedInt(const ConfigReader& c,
                                            std::initializer_list<const char*> keys);
StatusOr<std::optional<bool>> AliasedBool(const ConfigReader& c,
                                          std::initializer_list<const char*> keys);

// AliasedInt that must be present and positive; the error for a missing one
// names the first key and lists the accepted spellings.
StatusOr<int64_t> RequiredAliasedPositiveInt(const ConfigReader& c,
                                             std::initializer_list<const char*> keys);

// `key` (present) as a list of strings with one entry per layer.
StatusOr<std::vector<std::string>> PerLayerStrings(const ConfigReader& c, const std::string& key,
                                                   int64_t layers);

// Which layers run routed experts. mlp_layer_types ("dense" / "sparse") when
// present, else first_k_dense_replace (`default_first_dense` when absent):
// dense below it, sparse from it on. With `list_must_match_count`, a list
// that disagrees with an explicit first_k_dense_replace is an error naming
// mlp_layer_types. moe_layer_freq must be 1.
StatusOr<std::vector<bool>> ReadMoeLayers(const ConfigReader& c, int64_t layers,
                                          int64_t default_first_dense, bool list_must_match_count);

}  // namespace strata

#endif  // STRATA_MODEL_CONFIG_FIELDS_H_
