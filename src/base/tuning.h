// The tuning registry: every switch that picks between kernels or code paths
// computing the same thing (experiment arms, rollback toggles, a few
// numbers), in one table (tuning.cc) with its type, default, what it selects
// and the value that rolls its kernel family back to the reference path.
// docs/tuning.md is the user's page; `strata info --options` prints the table.
//
// Values come from an options string, "key=value,key=value" (strict: an
// unknown key, a bad value or one out of range is InvalidArgument naming
// both), applied over the defaults in two layers: the environment variable
// STRATA_OPTIONS (read here and nowhere else), then the model's own string
// (LoadOptions::options). Each model resolves its Config once at load, so two
// models in one process may differ.
//
// How the code reads them: an executor keeps its Config and reads its own
// switches from it; the CUDA backend's host functions read Current(), the
// Config a Scope installed on the calling thread. Executors install theirs
// around everything that enqueues work (load, prefill, decode, graph capture,
// all under their mutex), so a captured graph holds the choices of the model
// that captured it. With no Scope (op tests, kernel benchmarks) Current() is
// the defaults under STRATA_OPTIONS. A thread-local rather than a field in
// every op's arguments because some switches (cuda.pdl) act inside the launch
// helper every kernel goes through.
//
// Header for the CUDA sources too: C++17.
#ifndef STRATA_BASE_TUNING_H_
#define STRATA_BASE_TUNING_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/status.h"

namespace strata::tuning {

// One per registry entry, in the table's order.
enum class Key : int {
  kCudaPdl,
  kCudaCtaProbe,
  kGemvPreload,
  kGemvStage,
  kGemvRoute,
  kMoeGemm,
  kMoeCutlassMinRows,
  kMoeCtaRoute,
  kMoeDirect,
  kMoeOneRound,
  kMoeGateUpWarps,
  kMoeDownSplit,
  kMoeDownPreload,
  kMoeFoldShared,
  kMoeIntoH,
  kMlaPrefill,
  kMlaCacheEarly,
  kMlaMergeEarly,
  kMlaUvEarly,
  kKdaPrefill,
  kKdaFusedDecode,
  kGqaSplitDecode,
  kIndexerSplitDecode,
  kSamplingScanGreedy,
  kNormEarly,
  kNormPostEarly,
  kStepUpload,
  kStepStartFused,
  kStepPoll,
  kStepBranches,
  kCount
};
inline constexpr int kNumKeys = static_cast<int>(Key::kCount);

// The choices of the enum entries, in their table order.
enum class MoeGemm : int { kAuto, kCutlass, kMma };
enum class MlaPrefill : int { kWgmma, kMma };
enum class KdaPrefill : int { kBf16, kTf32 };

enum class Type { kBool, kInt, kEnum, kString };

struct Entry {
  Key key;
  absl::string_view name;  // "<family>.<switch>", e.g. "moe.gemm"
  Type type;
  int64_t default_value;     // kBool 0/1, kInt the number, kEnum the choice's index
  int64_t reference_value;   // what `rollback=<family>` sets (kString: untouched)
  int64_t min = 0, max = 0;  // kInt: the accepted range
  absl::Span<const absl::string_view> choices;  // kEnum
  // Every value gives the same results bit for bit (only timing differs).
  bool exact = false;
  // What the non-default value turns off too, as an options string (kBool
  // only): the paths that need this one (e.g. moe.direct=0 leaves no path to
  // fold the shared expert into).
  absl::string_view implies;
  absl::string_view description;

  absl::string_view family() const { return name.substr(0, name.find('.')); }
};

struct Family {
  absl::string_view name;
  absl::string_view what;  // the kernels and paths its entries select between
};

absl::Span<const Entry> Entries();
const Entry& EntryOf(Key key);
const Entry* FindEntry(absl::string_view name);  // null: no such entry
absl::Span<const Family> Families();

// One value per entry.
class Config {
 public:
  Config();  // every entry at its default

  // Applies an options string over the current values, left to right (a
  // later key overrides an earlier one). Keys are entry names, plus
  // `rollback=<family>|all`: every entry of the family (or all of them) at
  // its reference value; several families joined by '+' (`rollback=moe+mla`).
  // Items are separated by ','; blanks around keys and values are ignored,
  // and a key may appear once (base/key_value_list.h). On error nothing is changed; the message starts with
  // `source` and names the key and the value.
  Status Apply(absl::string_view options, absl::string_view source = "options");

  bool On(Key key) const { return values_[Index(key)] != 0; }
  int64_t Int(Key key) const { return values_[Index(key)]; }
  template <typename E>
  E Choice(Key key) const {
    return static_cast<E>(values_[Index(key)]);
  }
  const std::string& Text(Key key) const { return texts_[Index(key)]; }

  // The value as an options string writes it ("1", "mma", "4096", a path).
  std::string ValueText(Key key) const;
  bool IsDefault(Key key) const;
  // The entries that differ from their defaults as an options string, in
  // table order ("" when none do); Apply of it to a Config() gives *this.
  std::string ToString() const;

  bool operator==(const Config& o) const { return values_ == o.values_ && texts_ == o.texts_; }
  bool operator!=(const Config& o) const { return !(*this == o); }

 private:
  static size_t Index(Key key) { return static_cast<size_t>(key); }
  Status Set(const Entry& e, absl::string_view value, absl::string_view source);

  std::array<int64_t, kNumKeys> values_;
  std::array<std::string, kNumKeys> texts_;  // kString entries
};

// The environment variable Resolve layers under the model's options.
inline constexpr char kEnvironmentVariable[] = "STRATA_OPTIONS";

// Its value, or "" when unset.
std::string EnvironmentOptions();

// A model's configuration: the defaults, then STRATA_OPTIONS, then `options`.
StatusOr<Config> Resolve(absl::string_view options);
// The same with the environment's value given (tests).
StatusOr<Config> Resolve(absl::string_view options, absl::string_view environment);

// Installs `config` as this thread's Current() until destroyed (nested
// Scopes restore the outer one). `config` must outlive the Scope.
class Scope {
 public:
  explicit Scope(const Config& config);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const Config* previous_;
};

// ProcessDefaults() with `options` applied, installed as this thread's
// Current() for its lifetime: how op tests and kernel benchmarks, which run
// ops without an executor, take an arm. status() says whether `options`
// applied (if not, the Config is ProcessDefaults()).
class ScopedOptions {
 public:
  explicit ScopedOptions(absl::string_view options);
  ScopedOptions(const ScopedOptions&) = delete;
  ScopedOptions& operator=(const ScopedOptions&) = delete;
  const Status& status() const { return status_; }

 private:
  Config config_;
  Status status_;
  Scope scope_;
};

// The innermost Scope's Config on this thread, else ProcessDefaults().
const Config& Current();
// The defaults under STRATA_OPTIONS, read once per process; an invalid value
// is reported on stderr once and ignored here (loads fail on it instead).
const Config& ProcessDefaults();

// The table `strata info --options` prints: every entry with its type,
// default, value in `current`, family rollback value and description, then
// the families.
std::string FormatTable(const Config& current);

}  // namespace strata::tuning

#endif  // STRATA_BASE_TUNING_H_
