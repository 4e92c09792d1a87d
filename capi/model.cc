// strata_model_*: loading a model directory and describing it.
#include <algorithm>
#include <string>

#include "guard.h"
#include "handles.h"
#include "model/model.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;

extern "C" {

STRATA_API void strata_model_params_init(strata_model_params* params) {
  if (params == nullptr) return;
  *params = strata_model_params{};
  params->struct_size = sizeof(strata_model_params);
}

STRATA_API strata_status strata_model_load(strata_engine* engine, const char* model_dir,
                                           const strata_model_params* params, strata_model** out_model) {
  const Call call("strata_model_load");
  return Guarded(call, [&]() -> strata_status {
    if (out_model == nullptr) return call.NullArgument("out_model");
    *out_model = nullptr;
    if (strata_status s = CheckHandle(call, engine, strata::capi::kEngineMagic, "engine"); s != STRATA_OK) {
      return s;
    }
    if (model_dir == nullptr) return call.NullArgument("model_dir");
    strata_model_params p;
    strata_model_params_init(&p);
    if (strata_status s = strata::capi::ReadParams(call, params, &p, sizeof(strata_model_params),
                                                   "strata_model_params");
        s != STRATA_OK) {
      return s;
    }
    strata::LoadOptions options;
    options.pool = engine->impl->pool();
    if (p.progress_callback != nullptr) {
      options.progress = [cb = p.progress_callback, ud = p.progress_user_data](float f) {
        return cb(std::clamp(f, 0.0f, 1.0f), ud);
      };
    }
    auto handle = std::make_unique<strata_model>();
    auto model = strata::LoadModel(model_dir, options);
    if (!model.ok()) return call.From(model.status());
    handle->engine = engine;
    handle->impl = std::shared_ptr<const strata::Model>(*std::move(model));
    handle->text = strata::TextModel::FromDirectory(model_dir);
    if (!handle->text.ok() && !absl::IsNotFound(handle->text.status())) {
      engine->impl->Log(strata::LogLevel::kWarning,
                        absl::StrCat("the tokenizer files of ", model_dir, " did not load (",
                                     handle->text.status().message(), "); the model runs on token ids only"));
    }
    const strata::ModelInfo& info = handle->impl->info();
    engine->impl->Log(strata::LogLevel::kInfo,
                      absl::StrCat("loaded ", info.architecture, " model from ", model_dir, ": ", info.num_layers,
                                   " layers, ", info.num_parameters, " parameters"));
    engine->num_models.fetch_add(1);
    *out_model = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_model_get_info(const strata_model* model, strata_model_info* out_info) {
  const Call call("strata_model_get_info");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, model, strata::capi::kModelMagic, "model"); s != STRATA_OK) return s;
    if (out_info == nullptr) return call.NullArgument("out_info");
    const strata::ModelInfo& m = model->impl->info();
    strata_model_info info{};
    info.architecture = m.architecture.c_str();
    info.num_layers = m.num_layers;
    info.vocab_size = m.vocab_size;
    info.hidden_size = m.hidden_size;
    info.bos_token_id = m.bos_token_id;
    info.eos_token_id = m.eos_token_id;
    info.num_parameters = m.num_parameters;
    info.parameter_bytes = m.parameter_bytes;
    info.max_context_tokens = m.max_context;
    info.state_bytes_per_token = m.state_bytes_per_token;
    info.state_bytes_per_sequence = m.state_bytes_per_sequence;
    return strata::capi::WriteOut(call, out_info, info, sizeof(strata_model_info), "strata_model_info");
  });
}

STRATA_API strata_status strata_model_destroy(strata_model* model) {
  const Call call("strata_model_destroy");
  return Guarded(call, [&]() -> strata_status {
    if (strata_status s = CheckHandle(call, model, strata::capi::kModelMagic, "model"); s != STRATA_OK) return s;
    uint32_t expected = strata::capi::kModelMagic;
    if (!model->magic.compare_exchange_strong(expected, strata::capi::kDeadMagic)) {
      return call.Fail(STRATA_ERR_MISUSE, "model was destroyed concurrently");
    }
    model->impl.reset();  // sessions keep their own reference
    model->engine->num_models.fetch_sub(1);
    strata::capi::BuryHandle(model);
    return STRATA_OK;
  });
}

}  // extern "C"
