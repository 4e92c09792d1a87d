// Writes a small kimi_linear model with random weights (config.json +
// model.safetensors, original checkpoint names). It is the embedded default
// model of `strata run` until a trained one exists, and the model the C ABI
// tests load. Deterministic for a given seed.
#ifndef STRATA_MODEL_DEMO_MODEL_H_
#define STRATA_MODEL_DEMO_MODEL_H_

#include <cstdint>
#include <string>

#include "base/dtype.h"
#include "base/status.h"

namespace strata {

struct DemoModelOptions {
  uint64_t seed = 1234;
  int32_t vocab_size = 512;
  int32_t hidden_size = 128;
  int32_t num_layers = 4;        // KDA, KDA, MLA, KDA... (layer 0 dense MLP, others MoE)
  int32_t kda_heads = 4;
  int32_t kda_head_dim = 32;
  int32_t mla_heads = 4;
  int32_t num_experts = 6;
  int32_t experts_per_token = 2;
  DType weight_dtype = DType::kBF16;
};

// Creates `dir` if needed and writes config.json and model.safetensors there.
Status WriteDemoKimiLinearModel(const std::string& dir, const DemoModelOptions& options = {});

}  // namespace strata

#endif  // STRATA_MODEL_DEMO_MODEL_H_
