// The load-time half of LayerExecutor: the memory plan and allocation, and
// the ModelInfo it reports.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/sampling.h"
#include "exec/cuda/layer_executor.h"
#include "model/weight_store.h"

namespace strata {
namespace cuda_exec {

StatusOr<std::string> LayerExecutor::BeginLoad(const LoadOptions& options, int64_t vocab,
                                               int64_t config_max_context, int64_t default_slice,
                                               SequencePlan& p) {
  STRATA_ASSIGN_OR_RETURN(const DeviceChoice dev, SelectHopperDevice(options.device_index));
  device_ = dev.index;
  STRATA_RETURN_IF_ERROR(PlanSequences(options, config_max_context, default_slice, p));
  for (int64_t b = 1; b <= p.max_batch + 1; ++b) {
    p.sample_ws = std::max(p.sample_ws, cuda::SampleWorkspaceBytes(b, vocab));
  }
  return dev.name;
}

StatusOr<int64_t> LayerExecutor::AllocateMemory(const std::string& device_name,
                                                double memory_fraction) {
  const SequencePlan& p = plan_;
  std::vector<PoolArray> slot_arrays, block_arrays;
  for (const auto& m : mixers_) {
    for (const PoolArray& a : m->SlotArrays()) slot_arrays.push_back(a);
    for (const PoolArray& a : m->BlockArrays()) block_arrays.push_back(a);
  }
  auto carve_weights = [this](Carver& c) {
    WeightCarver wc(c, is_fp8_, spec_.fp8_block);
    CarveWeights(wc);
  };
  Carver weight_size(nullptr), scratch_size(nullptr);
  carve_weights(weight_size);
  CarveScratch(scratch_size);
  weight_bytes_ = weight_size.size();
  scratch_bytes_ = scratch_size.size();
  size_t slot_bytes = 0, block_bytes = 0;
  for (const PoolArray& a : slot_arrays) slot_bytes += static_cast<size_t>(a.layers) * a.unit_bytes;
  for (const PoolArray& a : block_arrays) {
    block_bytes += static_cast<size_t>(a.layers) * a.unit_bytes;
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  STRATA_ASSIGN_OR_RETURN(blas_, cuda::BlasContext::Create());
  size_t free_bytes = 0, total_bytes = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double budget = memory_fraction * static_cast<double>(free_bytes);
  // Slot arrays hold the sequence slots, then the checkpoint slots.
  const int64_t slot_units = p.max_sequences + p.checkpoint_slots;
  const double fixed = static_cast<double>(weight_bytes_ + scratch_bytes_) +
                       static_cast<double>(slot_bytes) * static_cast<double>(slot_units);
  const double one_sequence = static_cast<double>(block_bytes * static_cast<size_t>(p.max_blocks));
  if (fixed + one_sequence > budget) {
    const std::string slots = slot_bytes > 0
                                  ? absl::StrCat(", ", p.max_sequences, " sequence slots and ",
                                                 p.checkpoint_slots, " checkpoint slots")
                                  : "";
    return absl::ResourceExhaustedError(absl::StrCat(
        device_name, " has ", GiB(static_cast<double>(free_bytes)), " free (",
        static_cast<int>(100 * memory_fraction), "% usable) and the model needs ",
        GiB(fixed + one_sequence), ": weights ", GiB(static_cast<double>(weight_bytes_)),
        ", scratch ", GiB(static_cast<double>(scratch_bytes_)), slots, " and the cache of one ",
        p.max_ctx, "-token sequence"));
  }
  int64_t blocks = 0;
  if (block_bytes > 0) {
    blocks = static_cast<int64_t>((budget - fixed) / static_cast<double>(block_bytes));
    blocks = std::min(blocks, p.max_sequences * p.max_blocks);
    // Block ids are int32 in the block tables.
    blocks = std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max());
  }
  state_pool_bytes_ = slot_bytes * static_cast<size_t>(slot_units);
  kv_pool_bytes_ = block_bytes * static_cast<size_t>(blocks);

  STRATA_RETURN_IF_ERROR(DeviceAlloc(device_name, &weight_mem_, weight_bytes_, "weights"));
  if (weight_bytes_ > 0) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(weight_mem_, 0, weight_bytes_, stream_));
  }
  Carver weights(static_cast<char*>(weight_mem_));
  carve_weights(weights);
  auto carve = [&](Carver& c) {
    CarveScratch(c);
    layout_.slot_regions.clear();
    layout_.block_regions.clear();
    for (const PoolArray& a : slot_arrays) {
      char* base = c.Take<char>(a.layers * slot_units * static_cast<int64_t>(a.unit_bytes));
      layout_.slot_regions.push_back({base, a.layers, slot_units, a.unit_bytes});
    }
    for (const PoolArray& a : block_arrays) {
      char* base = c.Take<char>(a.layers * blocks * static_cast<int64_t>(a.unit_bytes));
      layout_.block_regions.push_back({base, a.layers, blocks, a.unit_bytes});
    }
  };
  Carver runtime_size(nullptr);
  carve(runtime_size);
  STRATA_RETURN_IF_ERROR(
      DeviceAlloc(device_name, &runtime_mem_, runtime_size.size(), "scratch and caches"));
  Carver runtime(static_cast<char*>(runtime_mem_));
  carve(runtime);
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(runtime_mem_, 0, runtime_size.size(), stream_));
  // Loaders may copy on the legacy stream next (cudaMemcpy), which does not
  // wait for stream_.
  STRATA_RETURN_IF_ERROR(Sync("clearing the weights and caches"));
  return blocks;
}

void LayerExecutor::DescribeModel(const std::string& device_name, const WeightStore* weights) {
  const exec::ArchSpec& spec = spec_;
  const SequencePlan& p = plan_;
  ModelInfo& info = info_;
  info.architecture = spec.architecture;
  info.device = device_name;
  info.tuning = tuning_.ToString();
  info.num_layers = static_cast<int32_t>(spec.layers.size());
  info.layer_kinds.clear();
  for (const exec::LayerSpec& layer : spec.layers) {
    info.layer_kinds.push_back(exec::LayerKind(layer));
  }
  info.num_parameters = weights != nullptr ? weights->TotalElements() : 0;
  info.parameter_bytes = weight_bytes_;
  info.vocab_size = static_cast<int32_t>(spec.vocab_size);
  info.hidden_size = static_cast<int32_t>(spec.hidden_size);
  info.max_context = p.max_ctx;
  info.state_bytes_per_token = layout_.BlockBytes() / kBlockTokens;
  info.state_bytes_per_sequence = layout_.SlotBytes();
  // NewState and Clone draw from the slot pool; sampling runs on the device.
  info.max_live_states = p.max_sequences;
  info.checkpoint_slots = p.checkpoint_slots;
  info.device_sampling = true;
  info.bos_token_id = spec.bos_token_id;
  info.eos_token_id = spec.eos_token_id;
}

}  // namespace cuda_exec
}  // namespace strata
