// The tuning registry (base/tuning.h): the table's own consistency, the
// options-string parser and its errors, rollback, layering under
// STRATA_OPTIONS, thread scopes, the listing, and LoadModel's check of
// LoadOptions::options. The arms themselves run on the GPU
// (tests/gpu/cuda_tuning_test.cc).
#include "base/tuning.h"

#include <stdlib.h>

#include <set>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/model.h"

namespace strata::tuning {
namespace {

using ::testing::HasSubstr;

// Sets STRATA_OPTIONS for the test's lifetime.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const char* value) {
    const char* prev = getenv(kEnvironmentVariable);
    had_ = prev != nullptr;
    if (had_) prev_ = prev;
    setenv(kEnvironmentVariable, value, 1);
  }
  ~ScopedEnvironment() {
    if (had_) {
      setenv(kEnvironmentVariable, prev_.c_str(), 1);
    } else {
      unsetenv(kEnvironmentVariable);
    }
  }

 private:
  bool had_ = false;
  std::string prev_;
};

Config Applied(const std::string& options) {
  Config c;
  const Status s = c.Apply(options);
  EXPECT_TRUE(s.ok()) << s;
  return c;
}

void ExpectRejected(const std::string& options, const std::string& mentions) {
  Config c;
  const Status s = c.Apply(options);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << options << ": " << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(mentions)) << options;
  EXPECT_EQ(c, Config()) << options << ": a failed Apply changed the values";
}

TEST(TuningTable, EntriesAreInKeyOrderWithUniqueDottedNamesOfKnownFamilies) {
  ASSERT_EQ(Entries().size(), static_cast<size_t>(kNumKeys));
  std::set<absl::string_view> names, families;
  for (const Family& f : Families()) families.insert(f.name);
  for (int i = 0; i < kNumKeys; ++i) {
    const Entry& e = Entries()[static_cast<size_t>(i)];
    EXPECT_EQ(static_cast<int>(e.key), i) << e.name;
    EXPECT_EQ(&EntryOf(e.key), &e);
    EXPECT_EQ(FindEntry(e.name), &e);
    EXPECT_TRUE(names.insert(e.name).second) << e.name << " twice";
    EXPECT_NE(e.name.find('.'), absl::string_view::npos) << e.name;
    EXPECT_TRUE(families.count(e.family())) << e.name << ": unknown family " << e.family();
    EXPECT_FALSE(e.description.empty()) << e.name;
  }
  EXPECT_EQ(FindEntry("no.such"), nullptr);
  // Every family has an entry.
  for (const Family& f : Families()) {
    bool used = false;
    for (const Entry& e : Entries()) used = used || e.family() == f.name;
    EXPECT_TRUE(used) << f.name;
  }
}

TEST(TuningTable, DefaultsReferencesAndImpliesAreValidValues) {
  for (const Entry& e : Entries()) {
    switch (e.type) {
      case Type::kBool:
        EXPECT_TRUE(e.default_value == 0 || e.default_value == 1) << e.name;
        EXPECT_TRUE(e.reference_value == 0 || e.reference_value == 1) << e.name;
        break;
      case Type::kInt:
        EXPECT_LE(e.min, e.default_value) << e.name;
        EXPECT_GE(e.max, e.default_value) << e.name;
        EXPECT_LE(e.min, e.reference_value) << e.name;
        EXPECT_GE(e.max, e.reference_value) << e.name;
        break;
      case Type::kEnum:
        ASSERT_FALSE(e.choices.empty()) << e.name;
        EXPECT_LT(static_cast<size_t>(e.default_value), e.choices.size()) << e.name;
        EXPECT_LT(static_cast<size_t>(e.reference_value), e.choices.size()) << e.name;
        break;
      case Type::kString:
        break;
    }
    Config c;
    EXPECT_TRUE(c.Apply(e.implies).ok()) << e.name << ": implies '" << e.implies << "'";
    if (!e.implies.empty()) EXPECT_EQ(e.type, Type::kBool) << e.name;
  }
}

TEST(TuningTable, TypedChoicesMatchTheNames) {
  EXPECT_EQ(Applied("moe.gemm=auto").Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kAuto);
  EXPECT_EQ(Applied("moe.gemm=cutlass").Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kCutlass);
  EXPECT_EQ(Applied("moe.gemm=mma").Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kMma);
  EXPECT_EQ(Applied("mla.prefill=wgmma").Choice<MlaPrefill>(Key::kMlaPrefill), MlaPrefill::kWgmma);
  EXPECT_EQ(Applied("mla.prefill=mma").Choice<MlaPrefill>(Key::kMlaPrefill), MlaPrefill::kMma);
  EXPECT_EQ(Applied("kda.prefill=bf16").Choice<KdaPrefill>(Key::kKdaPrefill), KdaPrefill::kBf16);
  EXPECT_EQ(Applied("kda.prefill=tf32").Choice<KdaPrefill>(Key::kKdaPrefill), KdaPrefill::kTf32);
  // moe.cu maps the index through {2, 4, 8}.
  EXPECT_EQ(Applied("moe.gate_up_warps=2").Int(Key::kMoeGateUpWarps), 0);
  EXPECT_EQ(Applied("moe.gate_up_warps=8").Int(Key::kMoeGateUpWarps), 2);
  EXPECT_EQ(Config().ValueText(Key::kMoeGateUpWarps), "4");
}

TEST(TuningConfig, DefaultsAreTheTable) {
  const Config c;
  for (const Entry& e : Entries()) {
    EXPECT_TRUE(c.IsDefault(e.key)) << e.name;
    if (e.type == Type::kString) continue;
    EXPECT_EQ(c.Int(e.key), e.default_value) << e.name;
  }
  EXPECT_EQ(c.ToString(), "");
  EXPECT_TRUE(c.On(Key::kCudaPdl));
  EXPECT_EQ(c.Int(Key::kMoeCutlassMinRows), 4096);
  EXPECT_EQ(c.Text(Key::kCudaCtaProbe), "");
}

TEST(TuningConfig, AppliesKeyValuePairsLeftToRight) {
  const Config c = Applied("cuda.pdl=0,moe.gemm=mma");
  EXPECT_FALSE(c.On(Key::kCudaPdl));
  EXPECT_EQ(c.Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kMma);
  EXPECT_EQ(c.ToString(), "cuda.pdl=0,moe.gemm=mma");
  // Blanks, empty items and boolean spellings.
  const Config d = Applied(" step.poll = off , ,gemv.stage=false,, moe.cutlass_min_rows = 1 ,");
  EXPECT_FALSE(d.On(Key::kStepPoll));
  EXPECT_FALSE(d.On(Key::kGemvStage));
  EXPECT_EQ(d.Int(Key::kMoeCutlassMinRows), 1);
  EXPECT_TRUE(Applied("cuda.pdl=on").On(Key::kCudaPdl));
  EXPECT_TRUE(Applied("cuda.pdl=true").On(Key::kCudaPdl));
  EXPECT_EQ(Applied("").ToString(), "");
}

TEST(TuningConfig, ToStringRoundTrips) {
  const Config c =
      Applied("step.branches=0,moe.gate_up_warps=8,kda.prefill=tf32,moe.cutlass_min_rows=123");
  EXPECT_EQ(Applied(c.ToString()), c);
  // Setting a default value is no difference.
  EXPECT_EQ(Applied("cuda.pdl=1,moe.gemm=auto").ToString(), "");
}

TEST(TuningConfig, ErrorsNameTheKeyAndTheValueAndChangeNothing) {
  ExpectRejected("cuda.pdl=0,moe.gem=mma", "moe.gem");
  ExpectRejected("cuda.pdl=2", "cuda.pdl=2");
  ExpectRejected("cuda.pdl=", "cuda.pdl=");
  ExpectRejected("moe.gemm=cublas", "moe.gemm=cublas");
  ExpectRejected("moe.gemm=cublas", "auto, cutlass, mma");
  ExpectRejected("moe.cutlass_min_rows=0", "moe.cutlass_min_rows=0: out of range");
  ExpectRejected("moe.cutlass_min_rows=99999999999", "out of range");
  ExpectRejected("moe.cutlass_min_rows=12x", "not an integer");
  ExpectRejected("moe.gate_up_warps=3", "moe.gate_up_warps=3");
  ExpectRejected("cuda.pdl", "expected key=value at offset 0");
  ExpectRejected("cuda.pdl=0,cuda.pdl=1", "'cuda.pdl' is given twice (at offset 11)");
  ExpectRejected("rollback=moe,rollback=mla", "'rollback' is given twice");
  ExpectRejected("rollback=moe+gpu", "'gpu' is not a family");
  ExpectRejected("rollback=gpu", "rollback=gpu");
  ExpectRejected("kda.prefill=old", "kda.prefill=old");
  Config c;
  const Status s = c.Apply("cuda.pdl=x", "--options");
  EXPECT_THAT(std::string(s.message()), HasSubstr("--options: cuda.pdl=x"));
}

// Accepted only by builds configured with -DSTRATA_CTA_PROBE=ON (a define
// of the library's own sources, not of this test's).
TEST(TuningConfig, CtaProbePathNeedsAProbeBuild) {
  Config c;
  const Status s = c.Apply("cuda.cta_probe=/tmp/probe.csv");
  if (s.ok()) {
    EXPECT_EQ(c.Text(Key::kCudaCtaProbe), "/tmp/probe.csv");
    EXPECT_EQ(c.ToString(), "cuda.cta_probe=/tmp/probe.csv");
  } else {
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("-DSTRATA_CTA_PROBE=ON"));
  }
  EXPECT_TRUE(c.Apply("cuda.cta_probe=").ok());
  EXPECT_TRUE(c.IsDefault(Key::kCudaCtaProbe));
}

TEST(TuningConfig, RollbackSetsAFamilyToItsReferenceValues) {
  const Config moe = Applied("rollback=moe");
  for (const Entry& e : Entries()) {
    if (e.type == Type::kString) continue;
    const int64_t want = e.family() == "moe" ? e.reference_value : e.default_value;
    EXPECT_EQ(moe.Int(e.key), want) << e.name;
  }
  EXPECT_EQ(moe.Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kMma);
  EXPECT_FALSE(moe.On(Key::kMoeFoldShared));
  EXPECT_TRUE(moe.On(Key::kCudaPdl));
  const Config all = Applied("rollback=all,mla.prefill=wgmma");
  for (const Entry& e : Entries()) {
    if (e.type == Type::kString) continue;
    const int64_t want = e.key == Key::kMlaPrefill ? e.default_value : e.reference_value;
    EXPECT_EQ(all.Int(e.key), want) << e.name;
  }
  EXPECT_FALSE(all.On(Key::kCudaPdl));
  EXPECT_EQ(all.Choice<KdaPrefill>(Key::kKdaPrefill), KdaPrefill::kTf32);
  const Config two = Applied("rollback=moe+mla");
  for (const Entry& e : Entries()) {
    if (e.type == Type::kString) continue;
    const bool rolled = e.family() == "moe" || e.family() == "mla";
    EXPECT_EQ(two.Int(e.key), rolled ? e.reference_value : e.default_value) << e.name;
  }
}

TEST(TuningResolve, ModelOptionsApplyOverTheEnvironment) {
  auto c = Resolve("moe.gemm=mma", "cuda.pdl=0,moe.gemm=cutlass");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->On(Key::kCudaPdl));
  EXPECT_EQ(c->Choice<MoeGemm>(Key::kMoeGemm), MoeGemm::kMma);
  auto bad_env = Resolve("", "cuda.pdl=maybe");
  EXPECT_TRUE(absl::IsInvalidArgument(bad_env.status()));
  EXPECT_THAT(std::string(bad_env.status().message()), HasSubstr("STRATA_OPTIONS: cuda.pdl=maybe"));
  auto bad_model = Resolve("step.poll=2", "");
  EXPECT_THAT(std::string(bad_model.status().message()), HasSubstr("options: step.poll=2"));
}

TEST(TuningResolve, ReadsStrataOptionsOnEachResolve) {
  {
    ScopedEnvironment env("step.branches=0");
    EXPECT_EQ(EnvironmentOptions(), "step.branches=0");
    auto c = Resolve("cuda.pdl=0");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->ToString(), "cuda.pdl=0,step.branches=0");
  }
  {
    ScopedEnvironment env("step.branches=1,nope=1");
    EXPECT_TRUE(absl::IsInvalidArgument(Resolve("").status()));
  }
}

TEST(TuningScope, InstallsPerThreadAndNests) {
  EXPECT_EQ(&Current(), &ProcessDefaults());
  const Config a = Applied("cuda.pdl=0");
  const Config b = Applied("step.poll=0");
  {
    const Scope outer(a);
    EXPECT_EQ(&Current(), &a);
    {
      const Scope inner(b);
      EXPECT_EQ(&Current(), &b);
      const Config* seen = nullptr;
      std::thread other([&] { seen = &Current(); });
      other.join();
      EXPECT_EQ(seen, &ProcessDefaults());
    }
    EXPECT_EQ(&Current(), &a);
  }
  EXPECT_EQ(&Current(), &ProcessDefaults());
}

TEST(TuningScope, ScopedOptionsAppliesOverTheProcessDefaults) {
  {
    const ScopedOptions arm("mla.prefill=mma,step.poll=0");
    ASSERT_TRUE(arm.status().ok()) << arm.status();
    EXPECT_EQ(Current().Choice<MlaPrefill>(Key::kMlaPrefill), MlaPrefill::kMma);
    Config want = ProcessDefaults();
    ASSERT_TRUE(want.Apply("mla.prefill=mma,step.poll=0").ok());
    EXPECT_EQ(Current(), want);
  }
  EXPECT_EQ(&Current(), &ProcessDefaults());
  const ScopedOptions bad("mla.prefill=fast");
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_EQ(Current(), ProcessDefaults());
}

TEST(TuningTable, FormatListsEveryEntryWithItsCurrentValue) {
  const std::string table = FormatTable(Applied("moe.gemm=cutlass"));
  for (const Entry& e : Entries()) EXPECT_THAT(table, HasSubstr(std::string(e.name))) << e.name;
  for (const Family& f : Families()) EXPECT_THAT(table, HasSubstr(std::string(f.what)));
  EXPECT_THAT(table, testing::ContainsRegex("moe\\.gemm +enum +auto +cutlass +mma "));
  EXPECT_THAT(table, testing::ContainsRegex("cuda\\.pdl +bool +1 +1 +0 "));
}

TEST(TuningLoad, LoadModelChecksTheOptionsOnEveryDevice) {
  const std::string dir = std::string(STRATA_TEST_DATA_DIR) + "/kimi_a";
  LoadOptions o;
  o.options = "moe.gemm=fast";
  auto bad = LoadModel(dir, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("moe.gemm=fast"));
  o.options = "moe.gemm=mma,cuda.pdl=0";
  auto good = LoadModel(dir, o);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ((*good)->info().tuning, "");  // no entry applies on the CPU
}

}  // namespace
}  // namespace strata::tuning
