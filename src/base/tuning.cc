// The registry's table and the options-string parser (tuning.h). A new
// kernel or path lands with its entry here, so that it can be switched off
// by name when it misbehaves.
#include "base/tuning.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/key_value_list.h"

namespace strata::tuning {
namespace {

constexpr absl::string_view kMoeGemmChoices[] = {"auto", "cutlass", "mma"};
constexpr absl::string_view kMlaPrefillChoices[] = {"wgmma", "mma"};
constexpr absl::string_view kKdaPrefillChoices[] = {"bf16", "tf32"};
constexpr absl::string_view kGateUpWarpsChoices[] = {"2", "4", "8"};

Entry Base(Key key, absl::string_view name, Type type, absl::string_view description) {
  Entry e{};
  e.key = key;
  e.name = name;
  e.type = type;
  e.description = description;
  return e;
}

// A switch that is on by default, whose off arm is the family's reference.
Entry Switch(Key key, absl::string_view name, bool exact, absl::string_view description,
             absl::string_view implies = {}) {
  Entry e = Base(key, name, Type::kBool, description);
  e.default_value = 1;
  e.exact = exact;
  e.implies = implies;
  return e;
}

Entry Choice(Key key, absl::string_view name, absl::Span<const absl::string_view> choices,
             int64_t default_index, int64_t reference_index, bool exact,
             absl::string_view description) {
  Entry e = Base(key, name, Type::kEnum, description);
  e.default_value = default_index;
  e.reference_value = reference_index;
  e.choices = choices;
  e.exact = exact;
  return e;
}

// A threshold: no reference of its own (the family's enums pick the path).
Entry Number(Key key, absl::string_view name, int64_t default_value, int64_t min, int64_t max,
             absl::string_view description) {
  Entry e = Base(key, name, Type::kInt, description);
  e.default_value = e.reference_value = default_value;
  e.min = min;
  e.max = max;
  return e;
}

// A diagnostic's path: changes no result.
Entry Text(Key key, absl::string_view name, absl::string_view description) {
  Entry e = Base(key, name, Type::kString, description);
  e.exact = true;
  return e;
}

// Every entry, in Key order (checked once, below).
const std::array<Entry, kNumKeys>& Table() {
  static const std::array<Entry, kNumKeys> table = {
      Switch(Key::kCudaPdl, "cuda.pdl", true,
             "programmatic dependent launch: a kernel starts while its predecessor drains and "
             "waits for its inputs in the kernel (0: plain stream order)"),
      Text(Key::kCudaCtaProbe, "cuda.cta_probe",
           "CSV file for per-CTA timestamps of the probed decode kernels, written at exit; only "
           "in builds configured with -DSTRATA_CTA_PROBE=ON (empty: off)"),
      Switch(Key::kGemvPreload, "gemv.preload", true,
             "the decode GEMV loads its first round of weights into registers before its PDL "
             "wait (0: prefetches that round into L2)",
             "gemv.stage=0"),
      Switch(Key::kGemvStage, "gemv.stage", true,
             "a one-row GEMV copies its second round of weights into shared memory before its "
             "PDL wait"),
      Switch(Key::kGemvRoute, "gemv.route", true,
             "the one-token MoE router GEMV routes in its epilogue (0: the GEMV, then the route "
             "kernel)"),
      Choice(Key::kMoeGemm, "moe.gemm", kMoeGemmChoices, 0, 2, false,
             "grouped GEMM of prefill-sized MoE calls: auto (cutlass from moe.cutlass_min_rows "
             "rows), cutlass (TMA + wgmma, sm_90) or mma (mma.sync kernels, the reference)"),
      Number(Key::kMoeCutlassMinRows, "moe.cutlass_min_rows", 4096, 1,
             std::numeric_limits<int32_t>::max(),
             "rows (tokens x top-k) from which moe.gemm=auto takes the CUTLASS grouped GEMM"),
      Switch(Key::kMoeCtaRoute, "moe.cta_route", true,
             "one token is routed by a whole CTA (sigmoid scores, no groups; moe.direct needs it)",
             "moe.direct=0,moe.fold_shared=0"),
      Switch(Key::kMoeDirect, "moe.direct", true,
             "a one-token MoE call skips the plan kernel (planless gate|up and down+combine)",
             "moe.fold_shared=0"),
      Switch(Key::kMoeOneRound, "moe.one_round", false,
             "gate|up rows of 5 to 9 x 256 elements are read in one group of loads per warp "
             "(moe.fold_shared needs it)",
             "moe.fold_shared=0"),
      Choice(Key::kMoeGateUpWarps, "moe.gate_up_warps", kGateUpWarpsChoices, 1, 1, true,
             "warps per CTA of the decode gate|up kernels"),
      Switch(Key::kMoeDownSplit, "moe.down_split", false,
             "the fused down+combine kernel splits each row's k range between two warps "
             "(moe.fold_shared needs it)",
             "moe.fold_shared=0"),
      Switch(Key::kMoeDownPreload, "moe.down_preload", true,
             "the one-token down+combine kernel loads its first weights before its PDL wait"),
      Switch(Key::kMoeFoldShared, "moe.fold_shared", false,
             "a one-token MoE call computes the shared expert in its gate|up and down kernels "
             "(0: the dense GEMVs on a side stream)",
             "moe.into_h=0,norm.post_early=0"),
      Switch(Key::kMoeIntoH, "moe.into_h", false,
             "kimi_linear: the folded MoE call adds its sum into the residual stream itself (0: "
             "the next norm adds it)"),
      Choice(Key::kMlaPrefill, "mla.prefill", kMlaPrefillChoices, 0, 1, false,
             "MLA prefill attention at production head dims on sm_90: wgmma or mma (the "
             "mma.sync kernel, the reference)"),
      Switch(Key::kMlaCacheEarly, "mla.cache_early", true,
             "MLA decode reads its first cache rows before its PDL wait where the caller allows"),
      Switch(Key::kMlaMergeEarly, "mla.merge_early", true,
             "the MLA decode split merge loads its partials before forming the weights"),
      Switch(Key::kMlaUvEarly, "mla.uv_early", true,
             "MLA decode (Kimi and DSA): o_proj may launch before the W_UV product's PDL wait"),
      Choice(Key::kKdaPrefill, "kda.prefill", kKdaPrefillChoices, 0, 1, false,
             "KDA chunked prefill: bf16 (bf16 workspace and mma state pass) or tf32 (fp32 "
             "workspace, tf32 state pass, the reference)"),
      Switch(Key::kKdaFusedDecode, "kda.fused_decode", false,
             "kimi_linear decode at small batch: conv, gates, the KDA step and the output norm in "
             "one kernel (KdaDecodeFused; 0: the kernel chain)"),
      Switch(Key::kGqaSplitDecode, "gqa.split_decode", false,
             "gated GQA decode cuts each row's keys into up to 128 ranges that run as CTAs of "
             "their own, then merges them (0: one CTA walks all of a row's keys)"),
      Switch(Key::kIndexerSplitDecode, "indexer.split_decode", true,
             "DSA indexer decode: a batch too small to fill the GPU has each row's keys scored "
             "in splits of 256 keys or more, one CTA each, merged by one select (0: splits of "
             "4096 keys)"),
      Switch(Key::kSamplingScanGreedy, "sampling.scan_greedy", true,
             "greedy rows take their token from the chunked scan kernel (0: they wait for the "
             "sampling kernel)"),
      Switch(Key::kNormEarly, "norm.early", true,
             "decode input and final norms let the next GEMV launch before their PDL wait",
             "norm.post_early=0"),
      Switch(Key::kNormPostEarly, "norm.post_early", true,
             "kimi_linear decode with the shared expert folded: the post-attention norm lets the "
             "router launch early too"),
      Switch(Key::kStepUpload, "step.upload", true,
             "a decode step's kernels read its inputs from and write its tokens to pinned host "
             "memory (0: cudaMemcpyAsync before and after)",
             "step.start_fused=0,step.poll=0"),
      Switch(Key::kStepStartFused, "step.start_fused", true,
             "a decode step's first kernel uploads the inputs, embeds and forms the first input "
             "norm (0: three kernels)"),
      Switch(Key::kStepPoll, "step.poll", true,
             "the host waits for a sampling step's tokens to land in pinned memory (0: "
             "cudaStreamSynchronize)"),
      Switch(Key::kStepBranches, "step.branches", true,
             "decode steps of up to 16 rows run independent work on a second stream (0: one "
             "stream)"),
  };
  return table;
}

constexpr Family kFamilies[] = {
    {"cuda", "how every kernel is launched; diagnostics"},
    {"gemv", "the weight-streaming GEMV of decode steps (up to 16 rows) and the router GEMV"},
    {"moe",
     "routed experts: routing, the one-token paths, gate|up and down kernels, prefill "
     "grouped GEMMs"},
    {"mla", "MLA attention: prefill kernels, decode and its split merge"},
    {"kda", "KDA linear attention: chunked prefill, the fused decode step"},
    {"gqa", "gated GQA attention: the split decode"},
    {"indexer", "DSA's lightning indexer: the decode split"},
    {"sampling", "token selection on the device"},
    {"norm", "early launch triggers of the decode steps' RMSNorms"},
    {"step", "the decode-step driver: input upload, fused start, completion wait, branches"},
};

bool CheckTable() {
  const auto& t = Table();
  for (int i = 0; i < kNumKeys; ++i) {
    if (static_cast<int>(t[static_cast<size_t>(i)].key) != i) return false;
  }
  return true;
}

absl::string_view TypeName(const Entry& e) {
  switch (e.type) {
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kEnum:
      return "enum";
    case Type::kString:
      return "string";
  }
  return "";
}

std::string ValueName(const Entry& e, int64_t v, const std::string& text) {
  switch (e.type) {
    case Type::kBool:
      return v != 0 ? "1" : "0";
    case Type::kInt:
      return absl::StrCat(v);
    case Type::kEnum:
      return std::string(e.choices[static_cast<size_t>(v)]);
    case Type::kString:
      return text;
  }
  return "";
}

// What the entry accepts, for error messages and the table.
std::string Accepted(const Entry& e) {
  switch (e.type) {
    case Type::kBool:
      return "0 or 1";
    case Type::kInt:
      return absl::StrCat("an integer in [", e.min, ", ", e.max, "]");
    case Type::kEnum:
      return absl::StrCat("one of ", absl::StrJoin(e.choices, ", "));
    case Type::kString:
      return "a path without ','";
  }
  return "";
}

bool IsFamily(absl::string_view name) {
  for (const Family& f : kFamilies) {
    if (f.name == name) return true;
  }
  return false;
}

thread_local const Config* current = nullptr;

}  // namespace

absl::Span<const Entry> Entries() {
  static const bool ok = CheckTable();
  if (!ok) std::abort();  // a table out of Key order is a build mistake
  return Table();
}

const Entry& EntryOf(Key key) { return Entries()[static_cast<size_t>(key)]; }

const Entry* FindEntry(absl::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

absl::Span<const Family> Families() { return kFamilies; }

Config::Config() {
  for (const Entry& e : Entries()) values_[Index(e.key)] = e.default_value;
}

Status Config::Set(const Entry& e, absl::string_view value, absl::string_view source) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", e.name, "=", value, ": ", why, " (expected ", Accepted(e), ")"));
  };
  int64_t& slot = values_[Index(e.key)];
  switch (e.type) {
    case Type::kBool:
      if (value == "1" || value == "true" || value == "on") {
        slot = 1;
      } else if (value == "0" || value == "false" || value == "off") {
        slot = 0;
      } else {
        return bad("not a boolean");
      }
      return OkStatus();
    case Type::kInt: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(value, &v)) return bad("not an integer");
      if (v < e.min || v > e.max) return bad("out of range");
      slot = v;
      return OkStatus();
    }
    case Type::kEnum:
      for (size_t i = 0; i < e.choices.size(); ++i) {
        if (e.choices[i] == value) {
          slot = static_cast<int64_t>(i);
          return OkStatus();
        }
      }
      return bad("not a choice");
    case Type::kString:
#ifndef STRATA_CTA_PROBE
      if (e.key == Key::kCudaCtaProbe && !value.empty()) {
        return bad("this build has no CTA probe (configure with -DSTRATA_CTA_PROBE=ON)");
      }
#endif
      texts_[Index(e.key)] = std::string(value);
      return OkStatus();
  }
  return bad("unknown type");
}

Status Config::Apply(absl::string_view options, absl::string_view source) {
  Config next = *this;
  STRATA_ASSIGN_OR_RETURN(std::vector<KeyValue> items, ParseKeyValueList(options, source));
  for (const KeyValue& item : items) {
    const std::string& key = item.key;
    const std::string& value = item.value;
    if (key == "rollback") {
      // Several families as one value (`moe+mla`): a key appears once per
      // options string.
      for (absl::string_view family : absl::StrSplit(value, '+')) {
        const bool all = family == "all";
        if (!all && !IsFamily(family)) {
          std::vector<absl::string_view> names;
          for (const Family& f : kFamilies) names.push_back(f.name);
          return absl::InvalidArgumentError(absl::StrCat(source, ": rollback=", value, ": '", family,
                                                         "' is not a family (expected all or one of ",
                                                         absl::StrJoin(names, ", "), ", joined by +)"));
        }
        for (const Entry& e : Entries()) {
          if (e.type != Type::kString && (all || e.family() == family)) {
            next.values_[Index(e.key)] = e.reference_value;
          }
        }
      }
      continue;
    }
    const Entry* e = FindEntry(key);
    if (e == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": unknown key '", key, "' (strata info --options lists them)"));
    }
    STRATA_RETURN_IF_ERROR(next.Set(*e, value, source));
  }
  *this = std::move(next);
  return OkStatus();
}

std::string Config::ValueText(Key key) const {
  return ValueName(EntryOf(key), values_[Index(key)], texts_[Index(key)]);
}

bool Config::IsDefault(Key key) const {
  const Entry& e = EntryOf(key);
  if (e.type == Type::kString) return texts_[Index(key)].empty();
  return values_[Index(key)] == e.default_value;
}

std::string Config::ToString() const {
  std::vector<std::string> items;
  for (const Entry& e : Entries()) {
    if (!IsDefault(e.key)) items.push_back(absl::StrCat(e.name, "=", ValueText(e.key)));
  }
  return absl::StrJoin(items, ",");
}

std::string EnvironmentOptions() {
  const char* v = std::getenv(kEnvironmentVariable);
  return v != nullptr ? std::string(v) : std::string();
}

StatusOr<Config> Resolve(absl::string_view options, absl::string_view environment) {
  Config c;
  STRATA_RETURN_IF_ERROR(c.Apply(environment, kEnvironmentVariable));
  STRATA_RETURN_IF_ERROR(c.Apply(options, "options"));
  return c;
}

StatusOr<Config> Resolve(absl::string_view options) {
  return Resolve(options, EnvironmentOptions());
}

Scope::Scope(const Config& config) : previous_(current) { current = &config; }

Scope::~Scope() { current = previous_; }

const Config& ProcessDefaults() {
  static const Config* defaults = [] {
    StatusOr<Config> c = Resolve("");
    if (!c.ok()) {
      std::fprintf(stderr, "strata: ignoring %s: %s\n", kEnvironmentVariable,
                   std::string(c.status().message()).c_str());
      return new Config();
    }
    return new Config(*std::move(c));
  }();
  return *defaults;
}

ScopedOptions::ScopedOptions(absl::string_view options)
    : config_(ProcessDefaults()), status_(config_.Apply(options)), scope_(config_) {}

const Config& Current() { return current != nullptr ? *current : ProcessDefaults(); }

std::string FormatTable(const Config& current_config) {
  size_t width = 0;
  for (const Entry& e : Entries()) width = std::max(width, e.name.size());
  std::string out =
      absl::StrFormat("%-*s  %-6s  %-8s  %-8s  %-8s  %s\n", static_cast<int>(width), "name", "type",
                      "default", "current", "rollback", "what it selects");
  for (const Entry& e : Entries()) {
    const std::string def = ValueName(e, e.default_value, "");
    const std::string ref = e.type == Type::kString ? "-" : ValueName(e, e.reference_value, "");
    std::string cur = current_config.ValueText(e.key);
    if (cur.empty()) cur = "\"\"";
    // `implies` belongs to switches: their one non-default value.
    const std::string implies =
        e.implies.empty() ? ""
                          : absl::StrCat("; ", e.name, "=", e.default_value != 0 ? "0" : "1",
                                         " also means ", e.implies);
    absl::StrAppendFormat(&out, "%-*s  %-6s  %-8s  %-8s  %-8s  %s%s; %s%s\n",
                          static_cast<int>(width), e.name, TypeName(e), def.empty() ? "\"\"" : def,
                          cur, ref, e.description, e.exact ? " [same results]" : "", Accepted(e),
                          implies);
  }
  absl::StrAppend(&out,
                  "\nfamilies (rollback=<family> sets its entries to their rollback "
                  "values; rollback=all does every family):\n");
  for (const Family& f : kFamilies) {
    absl::StrAppendFormat(&out, "  %-8s  %s\n", f.name, f.what);
  }
  return out;
}

}  // namespace strata::tuning
