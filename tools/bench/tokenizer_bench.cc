// Google Benchmark: tokenizer encode throughput on the mixed corpus that
// tests/text/make_bench_corpus.py writes (JSONL, one document per line), one
// thread, one Encode call per document. The corpus path comes from
// STRATA_TOKENIZER_CORPUS and the tokenizer files from STRATA_TEXT_DATA
// (default: the copy this build unpacked from tests/data/text); compare with
// tests/text/time_reference.py.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace strata {
namespace {

std::string TextData() {
  const char* d = std::getenv("STRATA_TEXT_DATA");
  return d ? d : STRATA_TEXT_DATA_DIR;
}

const std::vector<std::string>* Corpus() {
  static const std::vector<std::string>* docs = [] {
    auto* v = new std::vector<std::string>();
    const char* path = std::getenv("STRATA_TOKENIZER_CORPUS");
    if (!path) return v;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) v->push_back(nlohmann::json::parse(line).get<std::string>());
    return v;
  }();
  return docs;
}

void RunEncode(benchmark::State& state, const std::unique_ptr<Tokenizer>& tok) {
  const auto* docs = Corpus();
  if (docs->empty()) {
    state.SkipWithError(
        "set STRATA_TOKENIZER_CORPUS to a corpus from tests/text/make_bench_corpus.py");
    return;
  }
  int64_t bytes = 0, tokens = 0;
  for (auto _ : state) {
    for (const std::string& d : *docs) {
      auto ids = tok->Encode(d);
      if (!ids.ok()) {
        state.SkipWithError(std::string(ids.status().message()).c_str());
        return;
      }
      tokens += static_cast<int64_t>(ids->size());
      bytes += static_cast<int64_t>(d.size());
    }
  }
  state.SetBytesProcessed(bytes);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void BM_EncodeTokenizerJson(benchmark::State& state, const char* vocab) {
  static std::unique_ptr<Tokenizer> tok[2];
  auto& t = tok[std::string(vocab) == "qwen3" ? 0 : 1];
  if (!t) {
    auto r = Tokenizer::FromDirectory(TextData() + "/tokenizers/" + vocab);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    t = std::move(r).value();
  }
  RunEncode(state, t);
}

// Patterns and specials as tiktoken defines them (tiktoken_ext/openai_public.py).
const char kO200kPattern[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kCl100kPattern[] =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s)";

void BM_EncodeTiktoken(benchmark::State& state, const char* vocab) {
  static std::unique_ptr<Tokenizer> tok[2];
  const bool o200k = std::string(vocab) == "o200k_base";
  auto& t = tok[o200k ? 0 : 1];
  if (!t) {
    std::vector<std::pair<std::string, int32_t>> specials =
        o200k ? std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 199999},
                                                             {"<|endofprompt|>", 200018}}
              : std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 100257},
                                                             {"<|fim_prefix|>", 100258},
                                                             {"<|fim_middle|>", 100259},
                                                             {"<|fim_suffix|>", 100260},
                                                             {"<|endofprompt|>", 100276}};
    auto r = Tokenizer::FromTiktoken(TextData() + "/tiktoken/" + vocab + ".tiktoken",
                                     o200k ? kO200kPattern : kCl100kPattern, specials);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    t = std::move(r).value();
  }
  RunEncode(state, t);
}

BENCHMARK_CAPTURE(BM_EncodeTokenizerJson, qwen3, "qwen3")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeTokenizerJson, deepseek_v3, "deepseek_v3")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeTiktoken, o200k_base, "o200k_base")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK_CAPTURE(BM_EncodeTiktoken, cl100k_base, "cl100k_base")
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace strata
