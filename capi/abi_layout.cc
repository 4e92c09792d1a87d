// strata_abi_struct_size / strata_abi_field_offset: the library's own view of
// every public struct, for bindings that mirror them. tests/unit/abi_layout_test.cc
// checks that this table names every field the header declares.
#include <cstddef>
#include <cstring>

#include "guard.h"

using strata::capi::Call;
using strata::capi::Guarded;

namespace {

struct FieldLayout {
  const char* name;
  size_t offset;
};

struct StructLayout {
  const char* name;
  size_t size;
  const FieldLayout* fields;
  size_t num_fields;
};

#define STRATA_FIELD(T, f) FieldLayout{#f, offsetof(T, f)}

constexpr FieldLayout k_strata_latency[] = {
    STRATA_FIELD(strata_latency, count),
    STRATA_FIELD(strata_latency, mean_ms),
    STRATA_FIELD(strata_latency, p50_ms),
    STRATA_FIELD(strata_latency, p90_ms),
    STRATA_FIELD(strata_latency, p99_ms),
    STRATA_FIELD(strata_latency, max_ms),
};

constexpr FieldLayout k_strata_metrics[] = {
    STRATA_FIELD(strata_metrics, struct_size),
    STRATA_FIELD(strata_metrics, requests_submitted),
    STRATA_FIELD(strata_metrics, requests_finished),
    STRATA_FIELD(strata_metrics, requests_running),
    STRATA_FIELD(strata_metrics, requests_waiting),
    STRATA_FIELD(strata_metrics, preemptions),
    STRATA_FIELD(strata_metrics, deadline_misses),
    STRATA_FIELD(strata_metrics, ttft),
    STRATA_FIELD(strata_metrics, tpot),
    STRATA_FIELD(strata_metrics, queue),
    STRATA_FIELD(strata_metrics, prefix_lookup_tokens),
    STRATA_FIELD(strata_metrics, prefix_hit_tokens),
    STRATA_FIELD(strata_metrics, prefill_tokens),
    STRATA_FIELD(strata_metrics, generated_tokens),
    STRATA_FIELD(strata_metrics, decode_steps),
    STRATA_FIELD(strata_metrics, decode_rows),
    STRATA_FIELD(strata_metrics, memory_budget_bytes),
    STRATA_FIELD(strata_metrics, state_resident_bytes),
    STRATA_FIELD(strata_metrics, state_attention_bytes),
    STRATA_FIELD(strata_metrics, state_recurrent_bytes),
    STRATA_FIELD(strata_metrics, state_swapped_bytes),
    STRATA_FIELD(strata_metrics, prefix_cache_bytes),
    STRATA_FIELD(strata_metrics, prefix_cache_entries),
    STRATA_FIELD(strata_metrics, state_active_bytes),
};

constexpr FieldLayout k_strata_engine_params[] = {
    STRATA_FIELD(strata_engine_params, struct_size),
    STRATA_FIELD(strata_engine_params, num_threads),
    STRATA_FIELD(strata_engine_params, log_callback),
    STRATA_FIELD(strata_engine_params, log_user_data),
    STRATA_FIELD(strata_engine_params, log_level),
    STRATA_FIELD(strata_engine_params, memory_budget_bytes),
    STRATA_FIELD(strata_engine_params, max_batch),
    STRATA_FIELD(strata_engine_params, prefix_cache_bytes),
    STRATA_FIELD(strata_engine_params, prefix_block_tokens),
    STRATA_FIELD(strata_engine_params, metrics_callback),
    STRATA_FIELD(strata_engine_params, metrics_user_data),
    STRATA_FIELD(strata_engine_params, metrics_interval_ms),
    STRATA_FIELD(strata_engine_params, options),
};

constexpr FieldLayout k_strata_event[] = {
    STRATA_FIELD(strata_event, struct_size),
    STRATA_FIELD(strata_event, type),
    STRATA_FIELD(strata_event, request),
    STRATA_FIELD(strata_event, token),
    STRATA_FIELD(strata_event, status),
    STRATA_FIELD(strata_event, finish_reason),
    STRATA_FIELD(strata_event, num_generated_tokens),
    STRATA_FIELD(strata_event, text),
    STRATA_FIELD(strata_event, text_len),
    STRATA_FIELD(strata_event, tool_call_id),
    STRATA_FIELD(strata_event, tool_name),
    STRATA_FIELD(strata_event, tool_arguments),
    STRATA_FIELD(strata_event, tool_arguments_len),
};

constexpr FieldLayout k_strata_model_params[] = {
    STRATA_FIELD(strata_model_params, struct_size),
    STRATA_FIELD(strata_model_params, progress_callback),
    STRATA_FIELD(strata_model_params, progress_user_data),
    STRATA_FIELD(strata_model_params, device),
    STRATA_FIELD(strata_model_params, device_index),
    STRATA_FIELD(strata_model_params, max_batch),
    STRATA_FIELD(strata_model_params, max_sequences),
    STRATA_FIELD(strata_model_params, max_context_tokens),
    STRATA_FIELD(strata_model_params, prefill_slice_tokens),
    STRATA_FIELD(strata_model_params, gpu_memory_fraction),
    STRATA_FIELD(strata_model_params, cuda_graphs),
    STRATA_FIELD(strata_model_params, batch_invariant),
    STRATA_FIELD(strata_model_params, dummy_weights),
    STRATA_FIELD(strata_model_params, dummy_seed),
    STRATA_FIELD(strata_model_params, options),
    STRATA_FIELD(strata_model_params, check_weights),
};

constexpr FieldLayout k_strata_model_info[] = {
    STRATA_FIELD(strata_model_info, struct_size),
    STRATA_FIELD(strata_model_info, architecture),
    STRATA_FIELD(strata_model_info, num_layers),
    STRATA_FIELD(strata_model_info, vocab_size),
    STRATA_FIELD(strata_model_info, hidden_size),
    STRATA_FIELD(strata_model_info, bos_token_id),
    STRATA_FIELD(strata_model_info, eos_token_id),
    STRATA_FIELD(strata_model_info, num_parameters),
    STRATA_FIELD(strata_model_info, parameter_bytes),
    STRATA_FIELD(strata_model_info, max_context_tokens),
    STRATA_FIELD(strata_model_info, state_bytes_per_token),
    STRATA_FIELD(strata_model_info, state_bytes_per_sequence),
    STRATA_FIELD(strata_model_info, device),
    STRATA_FIELD(strata_model_info, device_notice),
    STRATA_FIELD(strata_model_info, tuning),
};

constexpr FieldLayout k_strata_session_params[] = {
    STRATA_FIELD(strata_session_params, struct_size),
    STRATA_FIELD(strata_session_params, max_context_tokens),
};

constexpr FieldLayout k_strata_request_params[] = {
    STRATA_FIELD(strata_request_params, struct_size),
    STRATA_FIELD(strata_request_params, max_tokens),
    STRATA_FIELD(strata_request_params, stop_tokens),
    STRATA_FIELD(strata_request_params, num_stop_tokens),
    STRATA_FIELD(strata_request_params, stop_at_eos),
    STRATA_FIELD(strata_request_params, temperature),
    STRATA_FIELD(strata_request_params, top_k),
    STRATA_FIELD(strata_request_params, top_p),
    STRATA_FIELD(strata_request_params, min_p),
    STRATA_FIELD(strata_request_params, repetition_penalty),
    STRATA_FIELD(strata_request_params, presence_penalty),
    STRATA_FIELD(strata_request_params, frequency_penalty),
    STRATA_FIELD(strata_request_params, seed),
    STRATA_FIELD(strata_request_params, token_callback),
    STRATA_FIELD(strata_request_params, user_data),
    STRATA_FIELD(strata_request_params, priority),
    STRATA_FIELD(strata_request_params, deadline_ms),
    STRATA_FIELD(strata_request_params, max_context_tokens),
};

constexpr FieldLayout k_strata_chat_message[] = {
    STRATA_FIELD(strata_chat_message, struct_size),
    STRATA_FIELD(strata_chat_message, role),
    STRATA_FIELD(strata_chat_message, content),
    STRATA_FIELD(strata_chat_message, content_len),
    STRATA_FIELD(strata_chat_message, reasoning_content),
    STRATA_FIELD(strata_chat_message, reasoning_content_len),
    STRATA_FIELD(strata_chat_message, tool_call_id),
    STRATA_FIELD(strata_chat_message, name),
    STRATA_FIELD(strata_chat_message, tool_calls_json),
};

constexpr FieldLayout k_strata_tool[] = {
    STRATA_FIELD(strata_tool, struct_size),
    STRATA_FIELD(strata_tool, name),
    STRATA_FIELD(strata_tool, description),
    STRATA_FIELD(strata_tool, parameters_json),
    STRATA_FIELD(strata_tool, callback),
    STRATA_FIELD(strata_tool, user_data),
};

constexpr FieldLayout k_strata_chat_params[] = {
    STRATA_FIELD(strata_chat_params, struct_size),
    STRATA_FIELD(strata_chat_params, stop_strings),
    STRATA_FIELD(strata_chat_params, num_stop_strings),
    STRATA_FIELD(strata_chat_params, max_tool_rounds),
    STRATA_FIELD(strata_chat_params, skip_special_tokens),
    STRATA_FIELD(strata_chat_params, template_variables_json),
    STRATA_FIELD(strata_chat_params, event_callback),
    STRATA_FIELD(strata_chat_params, user_data),
};

#undef STRATA_FIELD

#define STRATA_STRUCT(T) StructLayout{#T, sizeof(T), k_##T, sizeof(k_##T) / sizeof(k_##T[0])}
constexpr StructLayout kStructs[] = {
    STRATA_STRUCT(strata_latency),
    STRATA_STRUCT(strata_metrics),
    STRATA_STRUCT(strata_engine_params),
    STRATA_STRUCT(strata_event),
    STRATA_STRUCT(strata_model_params),
    STRATA_STRUCT(strata_model_info),
    STRATA_STRUCT(strata_session_params),
    STRATA_STRUCT(strata_request_params),
    STRATA_STRUCT(strata_chat_message),
    STRATA_STRUCT(strata_tool),
    STRATA_STRUCT(strata_chat_params),
};
#undef STRATA_STRUCT

const StructLayout* FindStruct(const char* name) {
  for (const StructLayout& s : kStructs) {
    if (std::strcmp(s.name, name) == 0) return &s;
  }
  return nullptr;
}

}  // namespace

extern "C" {

STRATA_API strata_status strata_abi_struct_size(const char* struct_name, size_t* out_size) {
  const Call call("strata_abi_struct_size", "looking up the struct");
  return Guarded(call, [&]() -> strata_status {
    if (struct_name == nullptr) return call.NullArgument("struct_name");
    if (out_size == nullptr) return call.NullArgument("out_size");
    const StructLayout* s = FindStruct(struct_name);
    if (s == nullptr) return call.Fail(STRATA_ERR_NOT_FOUND, absl::StrCat("no public struct '", struct_name, "'"));
    *out_size = s->size;
    return STRATA_OK;
  });
}

STRATA_API strata_status strata_abi_field_offset(const char* struct_name, const char* field_name,
                                                 size_t* out_offset) {
  const Call call("strata_abi_field_offset", "looking up the field");
  return Guarded(call, [&]() -> strata_status {
    if (struct_name == nullptr) return call.NullArgument("struct_name");
    if (field_name == nullptr) return call.NullArgument("field_name");
    if (out_offset == nullptr) return call.NullArgument("out_offset");
    const StructLayout* s = FindStruct(struct_name);
    if (s == nullptr) return call.Fail(STRATA_ERR_NOT_FOUND, absl::StrCat("no public struct '", struct_name, "'"));
    for (size_t i = 0; i < s->num_fields; ++i) {
      if (std::strcmp(s->fields[i].name, field_name) == 0) {
        *out_offset = s->fields[i].offset;
        return STRATA_OK;
      }
    }
    return call.Fail(STRATA_ERR_NOT_FOUND, absl::StrCat(struct_name, " has no field '", field_name, "'"));
  });
}

}  // extern "C"
