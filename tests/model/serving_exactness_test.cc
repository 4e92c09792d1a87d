// Serving exactness on real-architecture fixtures (tests/data: kimi_linear,
// qwen3_next, deepseek_v32 checkpoints with transformers' greedy
// continuations): the engine's greedy output is the same token for token
// whether a request runs alone or batched with others, with any prefill
// chunk size, with the prefix cache on or off, and across preemptions under
// a memory budget; and for the fixture's generation prompt it equals
// transformers' own greedy continuation.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/npy.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "model/model.h"

namespace strata {
namespace {

struct Case {
  std::shared_ptr<const Model> model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> reference;  // transformers' greedy continuation of prompts[0]
};

Case Load(const std::string& name) {
  Case c;
  const std::string dir = std::string(STRATA_TEST_DATA_DIR) + "/" + name;
  auto m = LoadModel(dir);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return c;
  c.model = *std::move(m);
  auto gen = ReadNpyInt32(dir + "/generate.npy");
  auto prompt = ReadNpyInt32(dir + "/prompt.npy");
  EXPECT_TRUE(gen.ok() && prompt.ok());
  std::ifstream meta(dir + "/meta.json");
  const nlohmann::json j = nlohmann::json::parse(meta, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded());
  if (!gen.ok() || !prompt.ok() || j.is_discarded()) return c;
  const size_t g = j["generate"]["prompt_len"].get<size_t>();
  c.prompts.emplace_back(gen->begin(), gen->begin() + static_cast<std::ptrdiff_t>(g));
  c.reference.assign(gen->begin() + static_cast<std::ptrdiff_t>(g), gen->end());
  // More requests: prefixes of the parity prompt (sharing its start with
  // each other) and its tail.
  for (size_t n : {size_t{9}, size_t{40}, size_t{77}}) {
    if (n < prompt->size()) c.prompts.emplace_back(prompt->begin(), prompt->begin() + static_cast<std::ptrdiff_t>(n));
  }
  c.prompts.emplace_back(prompt->end() - 23, prompt->end());
  return c;
}

std::vector<std::vector<int32_t>> Generate(const Case& c, EngineOptions o, bool alone, EngineMetrics* metrics,
                                           int32_t max_new) {
  o.num_threads = 2;
  auto engine = Engine::Create(o);
  EXPECT_TRUE(engine.ok());
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::shared_ptr<Request>> requests;
  GenerationParams p;
  p.max_tokens = max_new;
  p.stop_at_eos = false;
  SessionOptions so;
  so.max_context_tokens = 256;
  for (const auto& prompt : c.prompts) {
    auto s = Session::Create(engine->get(), c.model, so);
    EXPECT_TRUE(s.ok()) << s.status();
    sessions.push_back(*std::move(s));
    auto r = (*engine)->Submit(*sessions.back(), prompt, p, nullptr, /*private_events=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    requests.push_back(*r);
    if (alone) {
      EXPECT_TRUE((*engine)->RunToCompletion(*requests.back(), nullptr, nullptr).ok());
    }
  }
  std::vector<std::vector<int32_t>> out;
  for (const auto& r : requests) {
    if (!alone) {
      EXPECT_TRUE((*engine)->RunToCompletion(*r, nullptr, nullptr).ok());
    }
    out.push_back(r->generated_tokens());
  }
  if (metrics != nullptr) *metrics = (*engine)->Metrics();
  return out;
}

void CheckExact(const std::string& name) {
  const Case c = Load(name);
  ASSERT_NE(c.model, nullptr);
  ASSERT_GE(c.prompts.size(), 3u);
  const auto max_new = static_cast<int32_t>(c.reference.size());
  EngineOptions plain;
  plain.prefix_cache_bytes = 0;
  plain.prefill_chunk_tokens = 4096;
  const auto alone = Generate(c, plain, /*alone=*/true, nullptr, max_new);
  EXPECT_EQ(alone[0], c.reference) << name << ": not transformers' greedy continuation";

  EngineMetrics m;
  EXPECT_EQ(Generate(c, plain, /*alone=*/false, &m, max_new), alone) << name << ": batched";
  EXPECT_GT(m.decode_rows, m.decode_steps);
  for (int64_t chunk : {5, 64}) {
    EngineOptions o = plain;
    o.prefill_chunk_tokens = chunk;
    EXPECT_EQ(Generate(c, o, /*alone=*/false, nullptr, max_new), alone) << name << ": prefill chunk " << chunk;
  }
  EngineOptions cached = plain;
  cached.prefix_cache_bytes = 256ull << 20;
  cached.prefix_block_tokens = 8;
  cached.prefill_chunk_tokens = 32;
  EXPECT_EQ(Generate(c, cached, /*alone=*/true, &m, max_new), alone) << name << ": prefix cache";
  EXPECT_GT(m.prefix_hit_tokens, 0) << name;
  const ModelInfo& info = c.model->info();
  EngineOptions tight = plain;
  tight.prefill_chunk_tokens = 16;
  // The longest request fits alone (< 180 tokens); all five together (~340) do not.
  tight.memory_budget_bytes = 2 * info.state_bytes_per_sequence + info.state_bytes_per_token * 190;
  EXPECT_EQ(Generate(c, tight, /*alone=*/false, &m, max_new), alone) << name << ": under a memory budget";
  EXPECT_GT(m.preemptions, 0) << name;
}

TEST(ServingExactness, KimiLinear) { CheckExact("kimi_a"); }
TEST(ServingExactness, Qwen3Next) { CheckExact("qwen3next_a"); }
TEST(ServingExactness, DeepseekV32) { CheckExact("dsv32_a"); }

}  // namespace
}  // namespace strata
