// strata.hpp, the header-only C++ wrapper, against the shared library only
// (it links Strata::strata, not the core): ownership, errors as exceptions
// with the library's message, callbacks and their exceptions, and that the
// wrapper's calls give what the plain C calls give.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "gtest_util.h"
#include "strata/strata.hpp"

namespace {

using strata::api::Engine;
using strata::api::EngineParams;
using strata::api::Error;
using strata::api::Model;
using strata::api::ModelParams;
using strata::api::RequestParams;
using strata::api::Session;

const std::string kModelDir = strata_capi_test::DemoDir().string();
const std::vector<int32_t> kPrompt = {1, 17, 42, 99, 7};

ModelParams OnCpu() { return ModelParams().Device(STRATA_DEVICE_CPU); }

TEST(StrataHpp, LoadsGeneratesAndReportsTheDevice) {
  Engine engine(EngineParams().Threads(2));
  Model model(engine, kModelDir, OnCpu());
  const strata_model_info info = model.Info();
  EXPECT_STREQ(info.architecture, "kimi_linear");
  EXPECT_STREQ(info.device, "cpu");
  EXPECT_STREQ(info.device_notice, "");
  Session session(model);
  strata_finish_reason reason = STRATA_FINISH_NONE;
  const std::vector<int32_t> out = session.Generate(kPrompt, RequestParams().MaxTokens(8).StopAtEos(false), nullptr,
                                                    &reason);
  ASSERT_EQ(out.size(), 8u);
  EXPECT_EQ(reason, STRATA_FINISH_MAX_TOKENS);
  EXPECT_EQ(session.NumTokens(), kPrompt.size() + out.size());

  // The same prompt through submit + poll gives the same greedy tokens.
  Session other(model);
  strata::api::Request request = other.Submit(kPrompt, RequestParams().MaxTokens(8).StopAtEos(false));
  std::vector<int32_t> polled;
  for (;;) {
    auto ev = engine.Poll(60000);
    ASSERT_TRUE(ev.has_value());
    if (ev->type == STRATA_EVENT_TOKEN) polled.push_back(ev->token);
    if (ev->type == STRATA_EVENT_FINISHED) {
      EXPECT_EQ(ev->status, STRATA_OK);
      break;
    }
  }
  EXPECT_EQ(polled, out);
  EXPECT_GT(engine.Metrics().generated_tokens, 0);
  EXPECT_GT(engine.Stat("scheduler.iterations").value_or(0), 0);
  EXPECT_FALSE(engine.Stat("no.such.stat").has_value());
}

TEST(StrataHpp, FailuresThrowWithTheStatusAndTheMessage) {
  Engine engine;
  try {
    Model missing(engine, kModelDir + "_missing", OnCpu());
    FAIL() << "loaded a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), STRATA_ERR_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("_missing"), std::string::npos) << e.what();
  }
  try {
    Model bad(engine, kModelDir, ModelParams().Options("no.such.option=1"));
    FAIL() << "accepted an unknown option";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), STRATA_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("no.such.option"), std::string::npos) << e.what();
  }
  // An engine with a live model refuses to close; the wrapper reports it.
  Model model(engine, kModelDir, OnCpu());
  try {
    engine.Close();
    FAIL() << "closed an engine with a live model";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), STRATA_ERR_FAILED_PRECONDITION);
  }
}

TEST(StrataHpp, ACallbackExceptionStopsTheGenerationAndReachesTheCaller) {
  Engine engine;
  Model model(engine, kModelDir, OnCpu());
  Session session(model);
  int seen = 0;
  EXPECT_THROW(session.Generate(kPrompt, RequestParams().MaxTokens(32).StopAtEos(false),
                                [&](int32_t) -> bool {
                                  if (++seen == 3) throw std::runtime_error("host failure");
                                  return true;
                                }),
               std::runtime_error);
  EXPECT_EQ(seen, 3);
  // The session stays usable.
  const std::vector<int32_t> more = session.Generate({}, RequestParams().MaxTokens(2).StopAtEos(false));
  EXPECT_EQ(more.size(), 2u);
}

TEST(StrataHpp, HandlesMoveAndForkBranches) {
  Engine engine;
  Model model(engine, kModelDir, OnCpu());
  Session a(model);
  a.Append(kPrompt);
  Session b = a.Fork();
  EXPECT_EQ(b.NumTokens(), kPrompt.size());
  EXPECT_EQ(a.Logits(), b.Logits());
  Session moved = std::move(a);
  EXPECT_EQ(moved.NumTokens(), kPrompt.size());
  EXPECT_EQ(a.get(), nullptr);  // NOLINT(bugprone-use-after-move): the moved-from owner is empty
  const uint64_t mark = moved.Mark();
  moved.Generate({}, RequestParams().MaxTokens(3).StopAtEos(false));
  moved.Rollback(mark);
  EXPECT_EQ(moved.NumTokens(), kPrompt.size());
}

TEST(StrataHpp, TokenizerRoundTrips) {
  Engine engine;
  Model model(engine, kModelDir, OnCpu());
  strata::api::Tokenizer tok = model.OpenTokenizer();
  const std::vector<int32_t> ids = tok.Encode("hello world", /*add_special_tokens=*/false);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok.Decode(ids, /*skip_special_tokens=*/false), "hello world");
  EXPECT_GT(tok.VocabSize(), 0);
}

}  // namespace
