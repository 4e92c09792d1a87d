// strata_model_*: loading a model directory and describing it.
#include <algorithm>
#include <string>

#include "base/catch_allocation.h"
#include "guard.h"
#include "handles.h"
#include "model/model.h"

using strata::capi::Call;
using strata::capi::CheckHandle;
using strata::capi::Guarded;

extern "C" {

STRATA_API strata_status strata_model_params_init_sized(strata_model_params* params, size_t struct_size) {
  strata_model_params d{};
  const strata::LoadOptions core;
  d.device = STRATA_DEVICE_AUTO;
  d.device_index = core.device_index;
  d.gpu_memory_fraction = core.gpu_memory_fraction;
  d.cuda_graphs = core.cuda_graphs;
  d.batch_invariant = core.batch_invariant;
  d.check_weights = core.check_weights;
  return strata::capi::InitSized("strata_model_params_init_sized", params, struct_size, d);
}

STRATA_API strata_status strata_model_load(strata_engine* engine, const char* model_dir,
                                           const strata_model_params* params, strata_model** out_model) {
  const Call call("strata_model_load", "loading the model");
  return Guarded(call, [&]() -> strata_status {
    if (out_model == nullptr) return call.NullArgument("out_model");
    *out_model = nullptr;
    if (strata_status s = CheckHandle(call, engine, strata::capi::kEngineMagic, "engine"); s != STRATA_OK) {
      return s;
    }
    if (model_dir == nullptr) return call.NullArgument("model_dir");
    strata_model_params p;
    strata_model_params_init(&p);
    if (strata_status s = strata::capi::ReadParams(call, params, &p); s != STRATA_OK) return s;
    strata::LoadOptions options;
    switch (p.device) {
      case STRATA_DEVICE_AUTO: options.device = strata::Device::kAuto; break;
      case STRATA_DEVICE_CPU: options.device = strata::Device::kCpu; break;
      case STRATA_DEVICE_CUDA:
        options.device = strata::Device::kCuda;
        options.require_device = true;
        break;
      default:
        return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                         absl::StrCat("strata_model_params.device must be STRATA_DEVICE_AUTO (0), _CPU (1) or "
                                      "_CUDA (2), got ", p.device));
    }
    if (p.device_index < 0 || p.max_batch < 0 || p.max_sequences < 0 || p.max_context_tokens < 0 ||
        p.prefill_slice_tokens < 0) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("strata_model_params: device_index (", p.device_index, "), max_batch (",
                                    p.max_batch, "), max_sequences (", p.max_sequences, "), max_context_tokens (",
                                    p.max_context_tokens, ") and prefill_slice_tokens (", p.prefill_slice_tokens,
                                    ") must be >= 0"));
    }
    if (!(p.gpu_memory_fraction > 0.0 && p.gpu_memory_fraction <= 1.0)) {
      return call.Fail(STRATA_ERR_INVALID_ARGUMENT,
                       absl::StrCat("strata_model_params.gpu_memory_fraction must be in (0, 1], got ",
                                    p.gpu_memory_fraction));
    }
    options.device_index = p.device_index;
    options.max_batch = p.max_batch;
    options.max_sequences = p.max_sequences;
    options.max_context_tokens = p.max_context_tokens;
    options.prefill_slice_tokens = p.prefill_slice_tokens;
    options.gpu_memory_fraction = p.gpu_memory_fraction;
    options.cuda_graphs = p.cuda_graphs;
    options.batch_invariant = p.batch_invariant;
    options.load_format = p.dummy_weights ? strata::LoadFormat::kDummy : strata::LoadFormat::kAuto;
    options.dummy_seed = p.dummy_seed;
    if (p.options != nullptr) options.options = p.options;
    options.check_weights = p.check_weights;
    options.pool = engine->impl->pool();
    if (p.progress_callback != nullptr) {
      options.progress = [cb = p.progress_callback, ud = p.progress_user_data](float f) {
        return cb(std::clamp(f, 0.0f, 1.0f), ud) == 0;
      };
    }
    auto handle = std::make_unique<strata_model>();
    call.Doing("loading the model's weights");
    auto model = strata::LoadModel(model_dir, options);
    if (!model.ok()) return call.From(model.status());
    handle->engine = engine;
    handle->impl = std::shared_ptr<const strata::Model>(*std::move(model));
    call.Doing("reading the model's tokenizer files");
    handle->text = strata::TextModel::FromDirectory(model_dir);
    // Out of memory is the host's problem, not the files': fail, never run on
    // without the tokenizer.
    if (!handle->text.ok() && strata::IsOutOfMemory(handle->text.status())) {
      return call.From(handle->text.status());
    }
    if (!handle->text.ok() && !absl::IsNotFound(handle->text.status())) {
      engine->impl->Log(strata::LogLevel::kWarning,
                        absl::StrCat("the tokenizer files of ", model_dir, " did not load (",
                                     handle->text.status().message(), "); the model runs on token ids only"));
    }
    const strata::ModelInfo& info = handle->impl->info();
    engine->impl->Log(strata::LogLevel::kInfo,
                      absl::StrCat("loaded ", info.architecture, " model from ", model_dir, ": ", info.num_layers,
                                   " layers, ", info.num_parameters, " parameters, on ", info.device,
                                   info.notice.empty() ? "" : " (", info.notice, info.notice.empty() ? "" : ")"));
    engine->num_models.fetch_add(1);
    *out_model = handle.release();
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_model_get_info(const strata_model* model, strata_model_info* out_info) {
  const Call call("strata_model_get_info", "describing the model");
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
    info.device = m.device.c_str();
    info.device_notice = m.notice.c_str();
    info.tuning = m.tuning.c_str();
    return strata::capi::WriteOut(call, out_info, info);
  });
}

STRATA_API strata_status strata_model_destroy(strata_model* model) {
  const Call call("strata_model_destroy", "destroying the model");
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
