#include "model/config_fields.h"

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"

namespace strata {
namespace {

// Both alias readers: `get` reads one present key.
template <typename T, typename Get>
StatusOr<std::optional<T>> FirstOfAliases(const ConfigReader& c,
                                          std::initializer_list<const char*> keys, Get get) {
  std::optional<T> value;
  std::string first;
  for (const char* key : keys) {
    if (!c.Has(key)) continue;
    STRATA_ASSIGN_OR_RETURN(T v, get(key));
    if (!value) {
      value = v;
      first = key;
    } else if (*value != v) {
      const std::string values =
          std::is_same_v<T, bool> ? std::string() : absl::StrCat(" (", v, " vs ", *value, ")");
      return c.FieldError(key,
                          absl::StrCat("contradicts '", first, "'", values, "; they are aliases"));
    }
  }
  return value;
}

}  // namespace

Status UnsupportedField(const ConfigReader& c, const std::string& key, const std::string& what) {
  return absl::UnimplementedError(c.FieldError(key, what).message());
}

Status ReadDecoderConfig(const ConfigReader& c, const DecoderDefaults& defaults,
                         DecoderConfig& out) {
  STRATA_ASSIGN_OR_RETURN(out.vocab_size, c.GetPositiveInt("vocab_size"));
  STRATA_ASSIGN_OR_RETURN(out.hidden_size, c.GetPositiveInt("hidden_size"));
  STRATA_ASSIGN_OR_RETURN(out.num_layers,
                          c.GetPositiveInt("num_hidden_layers", limits::kMaxModelLayers));
  STRATA_ASSIGN_OR_RETURN(out.rms_norm_eps, c.GetDoubleOr("rms_norm_eps", defaults.rms_norm_eps));
  if (!(out.rms_norm_eps > 0)) return c.FieldError("rms_norm_eps", "must be > 0");
  STRATA_ASSIGN_OR_RETURN(out.tie_word_embeddings, c.GetBoolOr("tie_word_embeddings", false));
  STRATA_ASSIGN_OR_RETURN(out.max_context, ReadContextLength(c, "max_position_embeddings",
                                                             defaults.max_position_embeddings));
  STRATA_ASSIGN_OR_RETURN(SpecialTokenIds ids,
                          ReadSpecialTokenIds(c, out.vocab_size, defaults.token_ids));
  out.bos_token_id = ids.bos;
  out.eos_token_id = ids.eos;
  return OkStatus();
}

StatusOr<std::optional<int64_t>> AliasedInt(const ConfigReader& c,
                                            std::initializer_list<const char*> keys) {
  return FirstOfAliases<int64_t>(c, keys, [&](const char* key) { return c.GetInt(key); });
}

StatusOr<std::optional<bool>> AliasedBool(const ConfigReader& c,
                                          std::initializer_list<const char*> keys) {
  return FirstOfAliases<bool>(c, keys, [&](const char* key) { return c.GetBoolOr(key, false); });
}

StatusOr<int64_t> RequiredAliasedPositiveInt(const ConfigReader& c,
                                             std::initializer_list<const char*> keys) {
  STRATA_ASSIGN_OR_RETURN(std::optional<int64_t> v, AliasedInt(c, keys));
  const char* key = *keys.begin();
  if (!v) {
    std::string names;
    for (const char* k : keys) absl::StrAppend(&names, names.empty() ? "" : " / ", k);
    return c.FieldError(key, absl::StrCat("required but missing (also accepted: ", names, ")"));
  }
  if (*v < 1) return c.FieldError(key, absl::StrCat("expected a positive integer, got ", *v));
  return *v;
}

StatusOr<std::vector<std::string>> PerLayerStrings(const ConfigReader& c, const std::string& key,
                                                   int64_t layers) {
  const nlohmann::json& v = c.json().at(key);
  if (!v.is_array()) return c.FieldError(key, "expected a list of strings");
  std::vector<std::string> out;
  for (const auto& e : v) {
    if (!e.is_string()) return c.FieldError(key, "expected a list of strings");
    out.push_back(e.get<std::string>());
  }
  if (static_cast<int64_t>(out.size()) != layers) {
    return c.FieldError(
        key, absl::StrCat("has ", out.size(), " entries but num_hidden_layers is ", layers));
  }
  return out;
}

StatusOr<std::vector<bool>> ReadMoeLayers(const ConfigReader& c, int64_t layers,
                                          int64_t default_first_dense, bool list_must_match_count) {
  STRATA_ASSIGN_OR_RETURN(int64_t first_dense,
                          c.GetIntOr("first_k_dense_replace", default_first_dense));
  if (first_dense < 0) return c.FieldError("first_k_dense_replace", "must be >= 0");
  std::vector<bool> by_count;
  for (int64_t i = 0; i < layers; ++i) by_count.push_back(i >= first_dense);
  std::vector<bool> is_moe = by_count;
  if (c.Has("mlp_layer_types")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> types,
                            PerLayerStrings(c, "mlp_layer_types", layers));
    is_moe.clear();
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "dense" && types[i] != "sparse") {
        return c.FieldError(
            absl::StrCat("mlp_layer_types[", i, "]"),
            absl::StrCat("unknown MLP type '", types[i], "' (expected dense or sparse)"));
      }
      is_moe.push_back(types[i] == "sparse");
    }
    if (list_must_match_count && c.Has("first_k_dense_replace") && is_moe != by_count) {
      return c.FieldError("mlp_layer_types", "contradicts first_k_dense_replace");
    }
  }
  STRATA_ASSIGN_OR_RETURN(int64_t freq, c.GetIntOr("moe_layer_freq", 1));
  if (freq != 1) return UnsupportedField(c, "moe_layer_freq", "only 1 is supported");
  return is_moe;
}

}  // namespace strata
