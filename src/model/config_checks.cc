// Shared config.json checks (see config_checks.h).
#include "model/config_checks.h"

#include <vector>

namespace strata {
namespace {

// One special token id: `fallback` when absent, -1 for none, else in [0, vocab).
StatusOr<int32_t> ReadTokenId(const ConfigReader& c, const std::string& key, int64_t vocab_size,
                              int32_t fallback) {
  auto check = [&](const std::string& at, int64_t id, const char* how) -> Status {
    if (id == -1 || (id >= 0 && id < vocab_size)) return OkStatus();
    return c.FieldError(at, absl::StrCat(how, "token id ", id, " is outside the vocabulary [0, ",
                                         vocab_size, ") (vocab_size); -1 means none"));
  };
  if (!c.Has(key)) {
    STRATA_RETURN_IF_ERROR(check(key, fallback, "absent, so the default "));
    return fallback;
  }
  std::vector<int64_t> ids;
  if (c.json().at(key).is_array()) {
    STRATA_ASSIGN_OR_RETURN(ids, c.GetIntList(key));
    if (ids.empty()) return -1;
    for (size_t i = 0; i < ids.size(); ++i) {
      STRATA_RETURN_IF_ERROR(check(absl::StrCat(key, "[", i, "]"), ids[i], ""));
    }
  } else {
    STRATA_ASSIGN_OR_RETURN(int64_t id, c.GetInt(key));
    STRATA_RETURN_IF_ERROR(check(key, id, ""));
    ids.push_back(id);
  }
  return static_cast<int32_t>(ids.front());
}

}  // namespace

StatusOr<SpecialTokenIds> ReadSpecialTokenIds(const ConfigReader& c, int64_t vocab_size,
                                              const SpecialTokenIds& defaults) {
  SpecialTokenIds out;
  STRATA_ASSIGN_OR_RETURN(out.bos, ReadTokenId(c, "bos_token_id", vocab_size, defaults.bos));
  STRATA_ASSIGN_OR_RETURN(out.eos, ReadTokenId(c, "eos_token_id", vocab_size, defaults.eos));
  STRATA_ASSIGN_OR_RETURN(out.pad, ReadTokenId(c, "pad_token_id", vocab_size, defaults.pad));
  return out;
}

StatusOr<int64_t> ReadContextLength(const ConfigReader& c, const std::string& key,
                                    int64_t fallback) {
  if (!c.Has(key)) return fallback;
  STRATA_ASSIGN_OR_RETURN(int64_t v, c.GetInt(key));
  if (v <= 0) return c.FieldError(key, absl::StrCat("must be a positive token count, got ", v));
  return v;
}

Status CheckDivides(const ConfigReader& c, const std::string& divisor_key, int64_t divisor,
                    const std::string& dividend_key, int64_t dividend) {
  if (divisor > 0 && dividend % divisor == 0) return OkStatus();
  return c.FieldError(
      divisor_key, absl::StrCat(divisor, " does not divide ", dividend_key, " (", dividend, ")"));
}

Status CheckAtMost(const ConfigReader& c, const std::string& key, int64_t value,
                   const std::string& limit_key, int64_t limit) {
  if (value <= limit) return OkStatus();
  return c.FieldError(key, absl::StrCat(value, " exceeds ", limit_key, " (", limit, ")"));
}

}  // namespace strata
