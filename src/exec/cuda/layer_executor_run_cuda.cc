// The GPU executor's states, prefill and decode (layer_executor.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_common.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/norm.h"
#include "exec/cuda/layer_executor.h"

namespace strata {
namespace cuda_exec {

using cuda::ActType;

namespace {

// Carves 256-byte aligned host pieces (as the device Carver).
template <typename T>
T* TakeAligned(char*& at, int64_t count) {
  T* p = reinterpret_cast<T*>(at);
  at += cuda::AlignUp(sizeof(T) * static_cast<size_t>(count > 0 ? count : 0));
  return p;
}

// Whether a decode step's kernels move its host-side inputs and outputs
// through pinned memory themselves: the first kernel reads the inputs
// (UploadWords) and the sampling kernel writes the tokens into h_sampled_,
// instead of cudaMemcpyAsync before and after the launch; step.upload=0
// restores the copies (the same results).
bool StepIoInKernels(const tuning::Config& t) { return t.On(tuning::Key::kStepUpload); }

static_assert(sizeof(cuda::GpuSamplingRow) % sizeof(uint32_t) == 0,
              "sampling rows are uploaded as 32-bit words");

// step.start_fused=0: the input upload, the embedding and the first input
// norm as three kernels again (same results).
bool StepStartFused(const tuning::Config& t) { return t.On(tuning::Key::kStepStartFused); }

// Whether a sampling step's caller waits for its tokens to land in pinned
// memory (AwaitSampledTokens) rather than for the stream to drain:
// step.poll=0 restores cudaStreamSynchronize.
bool StepPoll(const tuning::Config& t) { return t.On(tuning::Key::kStepPoll); }

cuda::GpuSamplingRow GpuRowOf(const DecodeSampling& d) {
  return {.temperature = d.temperature,
          .top_k = d.top_k,
          .top_p = d.top_p,
          .seed = d.seed,
          .step = d.step};
}

Status CheckSampling(const DecodeSampling& d, const char* what, size_t row) {
  if (!(d.temperature >= 0.f) || d.top_k < 0 || !(d.top_p > 0.f && d.top_p <= 1.f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": sampling[", row, "] needs temperature >= 0, top_k >= 0 and top_p in (0, 1]"));
  }
  return OkStatus();
}

}  // namespace

LayerExecutor::~LayerExecutor() {
  // Teardown cannot report errors; a failing call here leaves nothing to do.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  for (auto& [key, entry] : graphs_) {
    if (entry.exec != nullptr) cudaGraphExecDestroy(entry.exec);
  }
  blas_.reset();
  if (weight_mem_ != nullptr) cudaFree(weight_mem_);
  if (runtime_mem_ != nullptr) cudaFree(runtime_mem_);
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (side_ != nullptr) cudaStreamDestroy(side_);
  if (fork_ev_ != nullptr) cudaEventDestroy(fork_ev_);
  if (join_ev_ != nullptr) cudaEventDestroy(join_ev_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  cudaGetLastError();
}

Status LayerExecutor::InitRuntime(int64_t slots, int64_t checkpoint_slots, int64_t blocks,
                                  bool cuda_graphs, size_t extra_pinned, char** extra) {
  const size_t sizes[] = {
      cuda::AlignUp(sizeof(int32_t) * static_cast<size_t>(4 * plan_.max_batch)),
      cuda::AlignUp(sizeof(int32_t) *
                    static_cast<size_t>((plan_.max_batch + 1) * plan_.max_blocks)),
      // Sampling rows: a decode batch and a prefill's last position.
      cuda::AlignUp(sizeof(cuda::GpuSamplingRow) * static_cast<size_t>(plan_.max_batch + 1)),
      cuda::AlignUp(sizeof(int32_t) * static_cast<size_t>(plan_.max_batch + 1)),
      cuda::AlignUp(sizeof(float) * static_cast<size_t>(plan_.max_batch * V_)),
      cuda::AlignUp(extra_pinned)};
  size_t total = 0;
  for (size_t s : sizes) total += s;
  STRATA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned_, total));
  char* at = static_cast<char*>(pinned_);
  h_step_ = TakeAligned<int32_t>(at, 4 * plan_.max_batch);
  h_block_table_ = TakeAligned<int32_t>(at, (plan_.max_batch + 1) * plan_.max_blocks);
  h_sampling_ = TakeAligned<cuda::GpuSamplingRow>(at, plan_.max_batch + 1);
  h_sampled_ = TakeAligned<int32_t>(at, plan_.max_batch + 1);
  h_logits_ = TakeAligned<float>(at, plan_.max_batch * V_);
  char* rest = TakeAligned<char>(at, static_cast<int64_t>(extra_pinned));
  if (extra != nullptr) *extra = extra_pinned > 0 ? rest : nullptr;
  std::memset(h_step_, 0, sizeof(int32_t) * static_cast<size_t>(4 * plan_.max_batch));
  std::memset(h_block_table_, 0,
              sizeof(int32_t) * static_cast<size_t>((plan_.max_batch + 1) * plan_.max_blocks));
  row_owner_.assign(static_cast<size_t>(plan_.max_batch), RowOwner{});
  book_ = std::make_shared<PagedStateBook>(slots, blocks, checkpoint_slots);
  graphs_enabled_ = cuda_graphs;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&fork_ev_, cudaEventDisableTiming));
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&join_ev_, cudaEventDisableTiming));
  return OkStatus();
}

Status LayerExecutor::ReadOptions(const LoadOptions& options) {
  STRATA_ASSIGN_OR_RETURN(tuning_, tuning::Resolve(options.options));
  invariant_ = options.batch_invariant;
  prefill_single_tokens_ = invariant_;
  return OkStatus();
}

LayerExecutor::Turn::Turn(const LayerExecutor& model) : lock_(model.mu_), tuned_(model.tuning_) {
  cudaSetDevice(model.device_);
}

// step.branches=0 keeps a decode step on one stream (results are identical
// either way).
CudaOps LayerExecutor::Ops() const {
  CudaOps o;
  o.stream = stream_;
  o.side = side_;
  o.fork_ev = fork_ev_;
  o.join_ev = join_ev_;
  o.blas = blas_.get();
  o.tuning = &tuning_;
  o.fp8_tile = fp8_tile_;
  o.fp8_tile_elems = fp8_tile_elems_;
  return o;
}

bool LayerExecutor::Branching(int64_t n) const { return Ops().Branching(n); }
Status LayerExecutor::Fork() const { return Ops().Fork(); }
Status LayerExecutor::Join() const { return Ops().Join(); }

PoolUsage LayerExecutor::Usage() const {
  PoolUsage u;
  u.slots_total = book_->total_slots();
  u.slots_free = book_->FreeSlots();
  u.blocks_total = book_->total_blocks();
  u.blocks_free = book_->FreeBlocks();
  u.checkpoint_slots_total = book_->total_checkpoint_slots();
  u.checkpoint_slots_free = book_->FreeCheckpointSlots();
  return u;
}

// ----------------------------------------------------------------------------
// Small helpers

Status LayerExecutor::AwaitSampledTokens(int64_t batch) const {
  const volatile int32_t* tokens = h_sampled_;
  auto landed = [&]() {
    for (int64_t b = 0; b < batch; ++b) {
      if (tokens[b] < 0) return false;
    }
    return true;
  };
  for (uint32_t spin = 1; !landed(); ++spin) {
    // Now and then ask the stream, so that a failed step cannot hang the
    // caller: an error is returned, and a finished step without its tokens
    // is reported as such.
    if (spin % 512 != 0) continue;
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) return cuda::CudaError(q, "decode step");
    if (landed()) break;
    return absl::InternalError("decode step: the step ended without writing its sampled tokens");
  }
  // The tokens are read after the flag loads above.
  std::atomic_thread_fence(std::memory_order_acquire);
  return OkStatus();
}

Status LayerExecutor::Sync(const char* what) const {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return cuda::CudaError(e, what);
  return OkStatus();
}

Status LayerExecutor::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m, const bf16* w,
                         int64_t n, int64_t k, void* y, ActType y_type, int64_t ldy, float beta,
                         float alpha) const {
  return Ops().Mm(stream_, x, x_type, ldx, m, w, n, k, y, y_type, ldy, beta, alpha);
}

Status LayerExecutor::Mm(const void* x, ActType x_type, int64_t ldx, int64_t m, const Mat& w,
                         int64_t n, int64_t k, void* y, ActType y_type, int64_t ldy, float beta,
                         float alpha) const {
  return Ops().Mm(stream_, x, x_type, ldx, m, w, n, k, y, y_type, ldy, beta, alpha);
}

Status LayerExecutor::MmOn(cudaStream_t stream, const void* x, cuda::ActType x_type, int64_t ldx,
                           int64_t m, const bf16* w, int64_t n, int64_t k, void* y,
                           cuda::ActType y_type, int64_t ldy, float beta, float alpha) const {
  return Ops().Mm(stream, x, x_type, ldx, m, w, n, k, y, y_type, ldy, beta, alpha);
}

Status LayerExecutor::CheckState(SequenceState* s, CudaSequenceState** out,
                                 const char* what) const {
  auto* st = dynamic_cast<CudaSequenceState*>(s);
  if (st == nullptr || st->owner_ != this) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the state was not created by this model's NewState"));
  }
  if (st->on_host()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the state is in host memory (MoveToHost); MoveToDevice it first"));
  }
  *out = st;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// States

StatusOr<std::unique_ptr<SequenceState>> LayerExecutor::NewState(int64_t max_tokens) const {
  if (max_tokens <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens must be positive, got ", max_tokens));
  }
  if (max_tokens > plan_.max_ctx) {
    return absl::InvalidArgumentError(
        absl::StrCat("NewState: max_tokens ", max_tokens, " exceeds the model's context of ",
                     plan_.max_ctx, " (the CUDA plan; raise LoadOptions.max_context_tokens)"));
  }
  const Turn turn(*this);
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) {
    return absl::ResourceExhaustedError(absl::StrCat("NewState: all ", book_->total_slots(),
                                                     " sequence slots are in use "
                                                     "(LoadOptions.max_sequences)"));
  }
  auto st = std::make_unique<CudaSequenceState>(this, book_, book_->NextId(), slot, max_tokens);
  STRATA_RETURN_IF_ERROR(ZeroSlot(layout_, slot, stream_));
  return std::unique_ptr<SequenceState>(std::move(st));
}

void LayerExecutor::ResetState(CudaSequenceState& st) const {
  const Turn turn(*this);
  st.tokens_ = 0;
  ++st.generation_;
  if (st.on_host()) {
    // An empty sequence: a zero slot and no blocks, still on the host.
    std::memset(st.host_->data(), 0, layout_.SlotBytes());
    st.host_blocks_ = 0;
    return;
  }
  book_->Release(st.blocks_);
  // Reset cannot report; a failure here resurfaces at the next Sync.
  ZeroSlot(layout_, st.slot_, stream_).IgnoreError();
}

std::unique_ptr<SequenceState> LayerExecutor::CloneState(const CudaSequenceState& src) const {
  const Turn turn(*this);
  if (src.on_host()) {
    // A host copy of the host image: no device memory involved.
    auto st =
        std::make_unique<CudaSequenceState>(this, book_, book_->NextId(), -1, src.max_tokens_);
    StatusOr<std::unique_ptr<PinnedBuffer>> buf = PinnedBuffer::Create(src.host_->size());
    if (!buf.ok()) return nullptr;
    std::memcpy((*buf)->data(), src.host_->data(), src.host_->size());
    st->host_ = std::move(*buf);
    st->host_blocks_ = src.host_blocks_;
    st->tokens_ = src.tokens_;
    return st;
  }
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) return nullptr;
  auto st =
      std::make_unique<CudaSequenceState>(this, book_, book_->NextId(), slot, src.max_tokens_);
  // Blocks whose 64 rows are all below tokens_ are never written again
  // (append-only caches): both states hold the same ones. The rest (the
  // partial tail, and any block taken ahead by a failed call) is copied, so
  // that each side owns the block its next row goes to.
  const size_t nb = src.blocks_.size();
  const size_t full = std::min(nb, static_cast<size_t>(src.tokens_ / kBlockTokens));
  const std::span<const int32_t> shared(src.blocks_.data(), full);
  book_->Share(shared);
  st->blocks_.assign(shared.begin(), shared.end());
  if (!book_->TakeBlocks(static_cast<int64_t>(nb - full), st->blocks_)) return nullptr;
  const std::span<const int32_t> from(src.blocks_.data() + full, nb - full);
  const std::span<const int32_t> to(st->blocks_.data() + full, nb - full);
  if (!CopySlot(layout_, slot, src.slot_, stream_).ok() ||
      !CopyBlocks(layout_, to, from, stream_).ok() || !Sync("Clone").ok()) {
    cudaGetLastError();
    return nullptr;
  }
  st->tokens_ = src.tokens_;
  return st;
}

StatusOr<std::unique_ptr<StateCheckpoint>> LayerExecutor::Checkpoint(
    const SequenceState& state) const {
  CudaSequenceState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckState(const_cast<SequenceState*>(&state), &st, "Checkpoint"));
  const Turn turn(*this);
  // The blocks holding rows below tokens_: the full ones are shared, the
  // partial last one (if any) is copied with the slot.
  const size_t used =
      std::min(st->blocks_.size(), static_cast<size_t>(CeilDiv(st->tokens_, kBlockTokens)));
  const size_t full = std::min(used, static_cast<size_t>(st->tokens_ / kBlockTokens));
  const std::span<const int32_t> tail(st->blocks_.data() + full, used - full);
  auto cp = std::make_unique<CudaCheckpoint>(this, book_);
  cp->tokens_ = st->tokens_;
  cp->slot_ = book_->TakeCheckpointSlot();
  if (cp->slot_ >= 0 && book_->TakeBlocks(static_cast<int64_t>(tail.size()), cp->tail_)) {
    // Device copies on the stream every later use of either side is ordered
    // behind: no wait.
    STRATA_RETURN_IF_ERROR(CopySlot(layout_, cp->slot_, st->slot_, stream_));
    STRATA_RETURN_IF_ERROR(CopyBlocks(layout_, cp->tail_, tail, stream_));
  } else {
    book_->GiveCheckpointSlot(cp->slot_);
    cp->slot_ = -1;
    const size_t bytes = layout_.SlotBytes() + tail.size() * layout_.BlockBytes();
    STRATA_ASSIGN_OR_RETURN(cp->host_, PinnedBuffer::Create(std::max<size_t>(bytes, 1)));
    STRATA_RETURN_IF_ERROR(
        SlotAndBlocksToHost(layout_, st->slot_, tail, cp->host_->data(), stream_));
    STRATA_RETURN_IF_ERROR(Sync("Checkpoint"));
    cp->host_blocks_ = static_cast<int64_t>(tail.size());
  }
  cp->blocks_.assign(st->blocks_.begin(), st->blocks_.begin() + static_cast<std::ptrdiff_t>(full));
  book_->Share(cp->blocks_);
  cp->block_bytes_ = layout_.BlockBytes();
  cp->own_bytes_ = layout_.SlotBytes() + tail.size() * layout_.BlockBytes();
  return std::unique_ptr<StateCheckpoint>(std::move(cp));
}

Status LayerExecutor::Restore(const StateCheckpoint& checkpoint,
                              std::unique_ptr<SequenceState>& state) const {
  const auto* cp = dynamic_cast<const CudaCheckpoint*>(&checkpoint);
  if (cp == nullptr || cp->owner_ != this) {
    return absl::InvalidArgumentError("Restore: the checkpoint was made by another model");
  }
  std::unique_ptr<SequenceState> fresh;
  if (state == nullptr) {
    STRATA_ASSIGN_OR_RETURN(fresh, NewState(plan_.max_ctx));
  }
  CudaSequenceState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckState(state ? state.get() : fresh.get(), &st, "Restore"));
  if (cp->tokens_ > st->max_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat("Restore: the checkpoint holds ", cp->tokens_,
                                                   " tokens, the state only ", st->max_tokens_));
  }
  const Turn turn(*this);
  const bool on_device = cp->slot_ >= 0;
  const int64_t tail_blocks = on_device ? static_cast<int64_t>(cp->tail_.size()) : cp->host_blocks_;
  std::vector<int32_t> tail;
  if (!book_->TakeBlocks(tail_blocks, tail)) {
    return absl::ResourceExhaustedError(absl::StrCat("Restore: ", tail_blocks, " block needed, ",
                                                     book_->FreeBlocks(), " of ",
                                                     book_->total_blocks(), " free"));
  }
  // Every byte of the slot and of the fresh block is overwritten, so the
  // state's old contents need no clearing. Device copies need no wait (the
  // stream orders them before the state's next use); a host copy must land
  // before the caller may drop the checkpoint.
  Status s;
  if (on_device) {
    s = CopySlot(layout_, st->slot_, cp->slot_, stream_);
    if (s.ok()) s = CopyBlocks(layout_, tail, cp->tail_, stream_);
  } else {
    s = SlotAndBlocksFromHost(layout_, st->slot_, tail, cp->host_->data(), stream_);
    if (s.ok()) s = Sync("Restore");
  }
  if (!s.ok()) {
    book_->Release(tail);
    return s;
  }
  book_->Release(st->blocks_);
  book_->Share(cp->blocks_);
  st->blocks_ = cp->blocks_;
  st->blocks_.insert(st->blocks_.end(), tail.begin(), tail.end());
  st->tokens_ = cp->tokens_;
  ++st->generation_;
  if (fresh != nullptr) state = std::move(fresh);
  return OkStatus();
}

Status LayerExecutor::MoveStateToHost(CudaSequenceState& st) const {
  const Turn turn(*this);
  if (st.on_host()) return OkStatus();
  const size_t bytes = layout_.SlotBytes() + st.blocks_.size() * layout_.BlockBytes();
  // Never an empty buffer: host_ != null is what on_host() reads.
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<PinnedBuffer> buf,
                          PinnedBuffer::Create(std::max<size_t>(bytes, 1)));
  STRATA_RETURN_IF_ERROR(SlotAndBlocksToHost(layout_, st.slot_, st.blocks_, buf->data(), stream_));
  STRATA_RETURN_IF_ERROR(Sync("MoveToHost"));
  // The contents are on the host now; shared blocks stay with their other
  // holders (Release only drops this state's reference).
  st.host_blocks_ = static_cast<int64_t>(st.blocks_.size());
  book_->Release(st.blocks_);
  book_->GiveSlot(st.slot_);
  st.slot_ = -1;
  st.host_ = std::move(buf);
  ++st.generation_;
  return OkStatus();
}

Status LayerExecutor::MoveStateToDevice(CudaSequenceState& st) const {
  const Turn turn(*this);
  if (!st.on_host()) return OkStatus();
  const int32_t slot = book_->TakeSlot();
  if (slot < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("MoveToDevice: all ", book_->total_slots(), " sequence slots are in use"));
  }
  std::vector<int32_t> blocks;
  if (!book_->TakeBlocks(st.host_blocks_, blocks)) {
    book_->GiveSlot(slot);
    return absl::ResourceExhaustedError(absl::StrCat("MoveToDevice: ", st.host_blocks_,
                                                     " blocks needed, ", book_->FreeBlocks(),
                                                     " of ", book_->total_blocks(), " free"));
  }
  Status s = SlotAndBlocksFromHost(layout_, slot, blocks, st.host_->data(), stream_);
  if (s.ok()) s = Sync("MoveToDevice");
  if (!s.ok()) {
    // Still on the host, unchanged.
    book_->Release(blocks);
    book_->GiveSlot(slot);
    return s;
  }
  st.slot_ = slot;
  st.blocks_ = std::move(blocks);
  st.host_.reset();
  st.host_blocks_ = 0;
  ++st.generation_;
  return OkStatus();
}

Status LayerExecutor::EnsureBlocks(CudaSequenceState& st, int64_t tokens) const {
  if (!layout_.has_blocks()) return OkStatus();
  // The copy-on-write invariant: the block the next row goes to is this
  // state's alone (Clone copies partial blocks; full ones are never written).
  const size_t next = static_cast<size_t>(st.tokens_ / kBlockTokens);
  if (tokens > st.tokens_ && next < st.blocks_.size() && book_->RefCount(st.blocks_[next]) != 1) {
    return absl::InternalError(absl::StrCat("cache block ", st.blocks_[next], " (row ", st.tokens_,
                                            ") is shared with another state and cannot be "
                                            "written"));
  }
  const int64_t need = CeilDiv(tokens, kBlockTokens) - static_cast<int64_t>(st.blocks_.size());
  if (need <= 0) return OkStatus();
  if (!book_->TakeBlocks(need, st.blocks_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the paged attention cache is full: ", need, " more blocks of ", kBlockTokens,
        " tokens needed, ", book_->FreeBlocks(), " of ", book_->total_blocks(),
        " free (the cache gets LoadOptions.gpu_memory_fraction of the device's free memory "
        "after weights and scratch)"));
  }
  return OkStatus();
}

Status LayerExecutor::UploadPrefillTable(const CudaSequenceState& st, int64_t tokens) const {
  if (!layout_.has_blocks()) return OkStatus();
  const int64_t n = CeilDiv(tokens, kBlockTokens);
  const int64_t off = plan_.max_batch * plan_.max_blocks;
  std::memcpy(h_block_table_ + off, st.blocks_.data(), sizeof(int32_t) * static_cast<size_t>(n));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.block_table + off, h_block_table_ + off,
                                              sizeof(int32_t) * static_cast<size_t>(n),
                                              cudaMemcpyHostToDevice, stream_));
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Decode steps and graphs

// ----------------------------------------------------------------------------
// The layer stack

CudaExecutorStats LayerExecutor::Stats() const {
  const Turn turn(*this);
  CudaExecutorStats s;
  s.weight_bytes = weight_bytes_;
  s.scratch_bytes = scratch_bytes_;
  s.state_pool_bytes = state_pool_bytes_;
  s.kv_pool_bytes = kv_pool_bytes_;
  s.slots_total = book_->total_slots();
  s.kv_blocks_total = book_->total_blocks();
  s.slots_free = book_->FreeSlots();
  s.kv_blocks_free = book_->FreeBlocks();
  s.max_batch = plan_.max_batch;
  s.max_context_tokens = plan_.max_ctx;
  s.prefill_slice_tokens = plan_.slice;
  s.graph_captures = graph_captures_;
  s.graph_launches = graph_launches_;
  s.eager_steps = eager_steps_;
  s.mixed_steps = mixed_steps_;
  s.graph_error = graph_error_;
  s.fp8_weight_bytes = fp8_.bytes;
  s.fp8_matrices = fp8_.matrices;
  for (const auto& m : mixers_) m->AddCounters(s.counters);
  return s;
}

Status LayerExecutor::LoadTimeCheck(int64_t vocab) const {
  auto fail = [](const Status& s) {
    if (absl::IsResourceExhausted(s) || absl::IsUnavailable(s)) return s;
    return absl::UnimplementedError(
        absl::StrCat("the CUDA executor failed its load-time check (", s.message(), ")"));
  };
  StatusOr<std::unique_ptr<SequenceState>> st = NewState(3);
  if (!st.ok()) return fail(st.status());
  std::vector<float> logits(static_cast<size_t>(vocab));
  const int32_t prompt[2] = {0, static_cast<int32_t>(vocab - 1)};
  if (Status s = Forward(std::span(prompt, 2), **st, logits.data(), false); !s.ok()) return fail(s);
  const int32_t next = 1 % static_cast<int32_t>(vocab);
  if (Status s = Forward(std::span(&next, 1), **st, logits.data(), false); !s.ok()) return fail(s);
  for (float v : logits) {
    if (!std::isfinite(v)) {
      return absl::InternalError("the CUDA executor's load-time check produced non-finite logits");
    }
  }
  return OkStatus();
}

LayerExecutor::DecodeStart LayerExecutor::FusedDecodeStart() const {
  if (w_.layers.empty() || w_.embed == nullptr) return {};
  return DecodeStart{w_.embed, w_.layers.front().input_norm};
}

Status LayerExecutor::EnqueueLayers(const PassRows& rows, const float** pending) const {
  const CudaOps ops = Ops();
  const int64_t n = rows.n();
  // Decode rows alone take the decode paths of the feed-forward blocks too.
  const bool decode = rows.prefill == 0;
  if (rows.decode > 0 && !rows.v.start_fused) {
    STRATA_RETURN_IF_ERROR(
        cuda::EmbeddingGather(w_.embed, D_, s_.step, rows.decode, s_.h, stream_));
  }
  if (rows.prefill > 0) {
    STRATA_RETURN_IF_ERROR(cuda::EmbeddingGather(w_.embed, D_, s_.tokens, rows.prefill,
                                                 s_.h + rows.decode * D_, stream_));
  }
  // The input norm lets the mixer's first product launch before its wait
  // (its CTAs load weights while the previous layer's last kernel drains).
  const bool input_early = NormEarlyTrigger();
  const bool post_may = input_early && tuning_.On(tuning::Key::kNormPostEarly);
  const float* pend = nullptr;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    const StackLayer& L = w_.layers[l];
    if (!(l == 0 && rows.v.start_fused)) {  // else the step's first kernel formed xn
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pend, ActType::kF32, n, D_, L.input_norm, eps_,
                                              s_.xn, stream_, input_early));
    }
    if (rows.decode > 0) {
      STRATA_RETURN_IF_ERROR(EnqueueMixer(l, 0, rows.decode, nullptr, 0, rows.v));
    }
    if (rows.prefill > 0) {
      STRATA_RETURN_IF_ERROR(
          EnqueueMixer(l, rows.decode, rows.prefill, rows.ps, rows.past, StepVariant{}));
    }
    const cuda::MoeArgs moe = L.ffn.is_moe ? ffn_.MoeCall(ops, L.ffn, n, decode) : cuda::MoeArgs{};
    const bool post_early = post_may && CudaFfn::PostNormMayTriggerEarly(moe);
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, nullptr, ActType::kF32, n, D_, L.post_norm, eps_,
                                            s_.xn, stream_, post_early));
    STRATA_RETURN_IF_ERROR(ffn_.Enqueue(ops, L.ffn, moe, n, decode, &pend));
  }
  *pending = pend;
  return OkStatus();
}

Status LayerExecutor::EnqueueDecode(int64_t batch, const StepVariant& v, bool sample) const {
  StepVariant sv = v;
  if (StepIoInKernels(tuning_)) {
    const int64_t sampling_words =
        sample ? batch * static_cast<int64_t>(sizeof(cuda::GpuSamplingRow) / sizeof(uint32_t)) : 0;
    // The step's input words: its four int32 rows, then the sampling rows.
    cuda::EmbedRmsNormStartArgs a;
    a.src0 = reinterpret_cast<const uint32_t*>(h_step_);
    a.dst0 = reinterpret_cast<uint32_t*>(s_.step);
    a.n0 = 4 * plan_.max_batch;
    a.src1 = reinterpret_cast<const uint32_t*>(h_sampling_);
    a.dst1 = reinterpret_cast<uint32_t*>(s_.sampling);
    a.n1 = sampling_words;
    const DecodeStart start = FusedDecodeStart();
    if (start.embed != nullptr && start.norm != nullptr && StepStartFused(tuning_)) {
      // The step's first kernel is on the critical path alone (the graph's
      // second kernel starts ~3 µs after it in any case): it uploads, embeds
      // and normalises, and the first GEMV launches behind it at once.
      a.n = batch;
      a.embed = start.embed;
      a.dim = D_;
      a.w = start.norm;
      a.eps = eps_;
      a.h = s_.h;
      a.out = s_.xn;
      STRATA_RETURN_IF_ERROR(cuda::EmbedRmsNormStart(a, stream_));
      sv.start_fused = true;
    } else {
      STRATA_RETURN_IF_ERROR(
          cuda::UploadWords(a.src0, a.dst0, a.n0, a.src1, a.dst1, a.n1, stream_));
    }
  }
  const float* pending = nullptr;
  STRATA_RETURN_IF_ERROR(EnqueueLayers({.decode = batch, .v = sv}, &pending));
  // The LM head's CTAs may launch before the final norm's wait and load
  // weights while the last layer drains.
  STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pending, ActType::kF32, batch, D_, w_.final_norm,
                                          eps_, s_.xn, stream_, NormEarlyTrigger()));
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, D_, batch, w_.lm_head, V_, D_, s_.logits, ActType::kF32, V_, 0.f));
  if (sample) {
    int32_t* tokens = StepIoInKernels(tuning_) ? h_sampled_ : s_.sampled;
    STRATA_RETURN_IF_ERROR(cuda::SampleTokens(s_.logits, batch, V_, s_.sampling, tokens,
                                              s_.sample_ws, plan_.sample_ws, stream_));
  }
  return OkStatus();
}

Status LayerExecutor::RunDecodeStep(int64_t batch, const StepVariant& v, bool sample) const {
  auto eager = [&]() {
    ++eager_steps_;
    return EnqueueDecode(batch, v, sample);
  };
  if (!graphs_enabled_) return eager();
  GraphEntry& e = graphs_[GraphKey{batch, v.bound, v.sparse, sample}];
  if (e.exec != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(e.exec, stream_));
    ++graph_launches_;
    return OkStatus();
  }
  if (e.eager_runs++ == 0) return eager();  // load the kernels outside a capture

  auto give_up = [&](const std::string& why) {
    cudaGetLastError();
    graphs_enabled_ = false;
    graph_error_ = why;
    return eager();
  };
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const Status enqueued = EnqueueDecode(batch, v, sample);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    // Something in the step cannot be captured (a host sync, an allocation):
    // run eagerly from now on; the eager run reports any real error.
    if (graph != nullptr) cudaGraphDestroy(graph);
    return give_up(absl::StrCat("stream capture failed: ", cudaGetErrorString(ended),
                                enqueued.ok() ? "" : absl::StrCat(" (", enqueued.message(), ")")));
  }
  if (!enqueued.ok()) {
    cudaGraphDestroy(graph);
    return enqueued;  // an op rejected its arguments; nothing was captured usefully
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    return give_up(absl::StrCat("cudaGraphInstantiate failed: ", cudaGetErrorString(inst)));
  }
  e.exec = exec;
  ++graph_captures_;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream_));
  ++graph_launches_;
  return OkStatus();
}

Status LayerExecutor::CheckDecodeRows(std::span<const int32_t> tokens,
                                      std::span<CudaSequenceState* const> states) const {
  for (int64_t b = 0; b < static_cast<int64_t>(tokens.size()); ++b) {
    const int32_t t = tokens[static_cast<size_t>(b)];
    if (t < 0 || t >= V_) {
      return absl::InvalidArgumentError(absl::StrCat("decode: token id ", t, " in row ", b,
                                                     " is outside the vocabulary [0, ", V_, ")"));
    }
    const CudaSequenceState& st = *states[static_cast<size_t>(b)];
    if (st.tokens_ + 1 > st.max_tokens_) {
      return absl::OutOfRangeError(absl::StrCat("decode: row ", b, ": 1 token on top of ",
                                                st.tokens_, " exceeds the state's capacity of ",
                                                st.max_tokens_));
    }
  }
  return OkStatus();
}

Status LayerExecutor::CheckBlockRoom(std::span<CudaSequenceState* const> decode_rows,
                                     const CudaSequenceState* ps, int64_t prefill_tokens) const {
  auto more = [](const CudaSequenceState& st, int64_t tokens) {
    return std::max<int64_t>(
        0, CeilDiv(st.tokens_ + tokens, kBlockTokens) - static_cast<int64_t>(st.blocks_.size()));
  };
  int64_t need = ps != nullptr ? more(*ps, prefill_tokens) : 0;
  for (const CudaSequenceState* st : decode_rows) need += more(*st, 1);
  if (need <= book_->FreeBlocks()) return OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("the paged attention cache is full: ", need,
                                                   " more blocks needed, ", book_->FreeBlocks(),
                                                   " of ", book_->total_blocks(), " free"));
}

Status LayerExecutor::StageDecodeRows(std::span<const int32_t> tokens,
                                      std::span<CudaSequenceState* const> states,
                                      int64_t* max_len_out) const {
  const int64_t B = static_cast<int64_t>(tokens.size()), B_max = plan_.max_batch;
  const bool paged = layout_.has_blocks();
  if (paged) {
    STRATA_RETURN_IF_ERROR(CheckBlockRoom(states, nullptr, 0));
    for (CudaSequenceState* st : states) {
      STRATA_RETURN_IF_ERROR(EnsureBlocks(*st, st->tokens_ + 1));
    }
  }
  // Per-step inputs into the fixed device buffers the (captured) step reads.
  int64_t max_len = 0;
  for (int64_t b = 0; b < B; ++b) {
    CudaSequenceState& st = *states[static_cast<size_t>(b)];
    h_step_[b] = tokens[static_cast<size_t>(b)];
    h_step_[B_max + b] = st.slot_;
    h_step_[2 * B_max + b] = static_cast<int32_t>(st.tokens_);
    h_step_[3 * B_max + b] = static_cast<int32_t>(st.tokens_ + 1);
    max_len = std::max(max_len, st.tokens_ + 1);
    if (!paged) continue;
    RowOwner& ro = row_owner_[static_cast<size_t>(b)];
    const int64_t nb = static_cast<int64_t>(st.blocks_.size());
    int64_t from = ro.blocks;
    if (ro.id != st.id_ || ro.generation != st.generation_) from = 0;
    if (from < nb) {
      int32_t* row = h_block_table_ + b * plan_.max_blocks;
      std::memcpy(row + from, st.blocks_.data() + from,
                  sizeof(int32_t) * static_cast<size_t>(nb - from));
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          s_.block_table + b * plan_.max_blocks + from, row + from,
          sizeof(int32_t) * static_cast<size_t>(nb - from), cudaMemcpyHostToDevice, stream_));
    }
    ro = RowOwner{st.id_, st.generation_, nb};
  }
  *max_len_out = max_len;
  return OkStatus();
}

Status LayerExecutor::DecodeLocked(std::span<const int32_t> tokens,
                                   std::span<CudaSequenceState* const> states, float* logits,
                                   std::span<const DecodeSampling> sampling,
                                   int32_t* out_tokens) const {
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t B_max = plan_.max_batch;
  // Argument checks first, over the whole batch: on these errors nothing has
  // changed.
  STRATA_RETURN_IF_ERROR(CheckDecodeRows(tokens, states));
  if (total > B_max) {
    // Larger batches run as consecutive steps of at most max_batch rows.
    for (int64_t b0 = 0; b0 < total; b0 += B_max) {
      const size_t n = static_cast<size_t>(std::min(B_max, total - b0));
      const size_t at = static_cast<size_t>(b0);
      STRATA_RETURN_IF_ERROR(DecodeLocked(tokens.subspan(at, n), states.subspan(at, n),
                                          logits ? logits + b0 * V_ : nullptr,
                                          sampling.empty() ? sampling : sampling.subspan(at, n),
                                          out_tokens ? out_tokens + b0 : nullptr));
    }
    return OkStatus();
  }
  const int64_t B = total;
  int64_t max_len = 0;
  STRATA_RETURN_IF_ERROR(StageDecodeRows(tokens, states, &max_len));

  // With StepIoInKernels the step's first kernel reads h_step_ and
  // h_sampling_ (EnqueueDecode): the GPU no longer idles between the copies'
  // submission and the graph's launch.
  const bool io_in_kernels = StepIoInKernels(tuning_);
  if (!io_in_kernels) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.step, h_step_,
                                                sizeof(int32_t) * static_cast<size_t>(4 * B_max),
                                                cudaMemcpyHostToDevice, stream_));
  }
  const bool sample = !sampling.empty();
  if (sample) {
    for (int64_t b = 0; b < B; ++b) h_sampling_[b] = GpuRowOf(sampling[static_cast<size_t>(b)]);
    if (!io_in_kernels) {
      STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
          s_.sampling, h_sampling_, sizeof(cuda::GpuSamplingRow) * static_cast<size_t>(B),
          cudaMemcpyHostToDevice, stream_));
    }
  }

  // A step whose sampled tokens land in pinned memory is over for the host
  // once they have landed: the kernels that write them end the step, so
  // polling them returns a few µs before the graph's completion reaches the
  // stream (docs/dev/journal/performance.md). Anything the host enqueues
  // next is ordered behind the step on the stream anyway.
  const bool poll =
      sample && io_in_kernels && logits == nullptr && out_tokens != nullptr && StepPoll(tuning_);
  if (poll) {
    for (int64_t b = 0; b < B; ++b) h_sampled_[b] = -1;
  }
  STRATA_RETURN_IF_ERROR(RunDecodeStep(B, DecodeVariant(max_len), sample));

  if (logits != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_logits_, s_.logits,
                                                sizeof(float) * static_cast<size_t>(B * V_),
                                                cudaMemcpyDeviceToHost, stream_));
  }
  if (sample && !io_in_kernels) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_sampled_, s_.sampled,
                                                sizeof(int32_t) * static_cast<size_t>(B),
                                                cudaMemcpyDeviceToHost, stream_));
  }
  if (poll) {
    STRATA_RETURN_IF_ERROR(AwaitSampledTokens(B));
  } else {
    STRATA_RETURN_IF_ERROR(Sync("decode step"));
  }
  if (logits != nullptr) {
    std::memcpy(logits, h_logits_, sizeof(float) * static_cast<size_t>(B * V_));
  }
  if (sample && out_tokens != nullptr) {
    std::memcpy(out_tokens, h_sampled_, sizeof(int32_t) * static_cast<size_t>(B));
  }
  for (CudaSequenceState* st : states) ++st->tokens_;
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Prefill

Status LayerExecutor::Prefill(std::span<const int32_t> tokens, CudaSequenceState& st, float* logits,
                              bool all_logits, const DecodeSampling* sampling,
                              int32_t* out_token) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  STRATA_RETURN_IF_ERROR(EnsureBlocks(st, st.tokens_ + T));
  STRATA_RETURN_IF_ERROR(UploadPrefillTable(st, st.tokens_ + T));
  const int64_t chunk_rows = std::max(plan_.max_batch, kLogitsChunkRows);
  for (int64_t begin = 0; begin < T; begin += plan_.slice) {
    const int64_t n = std::min(plan_.slice, T - begin);
    const bool last = begin + n == T;
    // Pageable source: the copy is staged before the call returns.
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.tokens, tokens.data() + begin,
                                                sizeof(int32_t) * static_cast<size_t>(n),
                                                cudaMemcpyHostToDevice, stream_));
    const float* pending = nullptr;
    STRATA_RETURN_IF_ERROR(EnqueueLayers({.ps = &st, .prefill = n, .past = st.tokens_}, &pending));
    st.tokens_ += n;
    if ((logits == nullptr && sampling == nullptr) || (!all_logits && !last)) continue;
    if (all_logits) {
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h, pending, ActType::kF32, n, D_, w_.final_norm,
                                              eps_, s_.xn, stream_));
      for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
        const int64_t m = std::min(chunk_rows, n - r0);
        STRATA_RETURN_IF_ERROR(Mm(s_.xn + r0 * D_, ActType::kBf16, D_, m, w_.lm_head, V_, D_,
                                  s_.logits, ActType::kF32, V_, 0.f));
        // To pageable memory the copy completes before the call returns, so
        // the next chunk may reuse the device buffer.
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits + (begin + r0) * V_, s_.logits,
                                                    sizeof(float) * static_cast<size_t>(m * V_),
                                                    cudaMemcpyDeviceToHost, stream_));
      }
    } else {
      const int64_t at = (n - 1) * D_;
      STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h + at, pending ? pending + at : nullptr,
                                              ActType::kF32, 1, D_, w_.final_norm, eps_, s_.xn,
                                              stream_));
      STRATA_RETURN_IF_ERROR(
          Mm(s_.xn, ActType::kBf16, D_, 1, w_.lm_head, V_, D_, s_.logits, ActType::kF32, V_, 0.f));
      if (logits != nullptr) {
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits, s_.logits,
                                                    sizeof(float) * static_cast<size_t>(V_),
                                                    cudaMemcpyDeviceToHost, stream_));
      }
      if (sampling != nullptr) {
        // The decode step's selection kernel on the one row; only the token
        // crosses to the host.
        h_sampling_[0] = GpuRowOf(*sampling);
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.sampling, h_sampling_,
                                                    sizeof(cuda::GpuSamplingRow),
                                                    cudaMemcpyHostToDevice, stream_));
        STRATA_RETURN_IF_ERROR(cuda::SampleTokens(s_.logits, 1, V_, s_.sampling, s_.sampled,
                                                  s_.sample_ws, plan_.sample_ws, stream_));
        STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_sampled_, s_.sampled, sizeof(int32_t),
                                                    cudaMemcpyDeviceToHost, stream_));
      }
    }
  }
  STRATA_RETURN_IF_ERROR(Sync("prefill"));
  if (sampling != nullptr) *out_token = h_sampled_[0];
  return OkStatus();
}

// ----------------------------------------------------------------------------
// Model interface

Status LayerExecutor::CheckForward(std::span<const int32_t> tokens, SequenceState& state,
                                   const char* what, CudaSequenceState** st) const {
  STRATA_RETURN_IF_ERROR(CheckState(&state, st, what));
  const int64_t T = static_cast<int64_t>(tokens.size());
  if (T == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": no tokens"));
  for (int64_t i = 0; i < T; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t < 0 || t >= V_) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": token id ", t, " at position ", i,
                                                     " is outside the vocabulary [0, ", V_, ")"));
    }
  }
  if ((*st)->tokens_ + T > (*st)->max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat(what, ": ", T, " tokens on top of ", (*st)->tokens_,
                                              " exceed the state's capacity of ",
                                              (*st)->max_tokens_));
  }
  return OkStatus();
}

Status LayerExecutor::ForwardLocked(std::span<const int32_t> tokens, CudaSequenceState& st,
                                    float* logits, bool all_logits, const DecodeSampling* sampling,
                                    int32_t* out_token) const {
  if (tokens.size() == 1 && !prefill_single_tokens_) {
    // One token takes the decode path (recurrent mixers, absorbed/cached
    // attention) even on an empty state: the same math as a one-token prefill
    // up to rounding (batch-invariant executors keep prompt tokens on the
    // prefill kernels so the bits do not depend on where a prompt was cut).
    CudaSequenceState* const one[1] = {&st};
    return DecodeLocked(
        tokens, std::span<CudaSequenceState* const>(one, 1), logits,
        sampling ? std::span<const DecodeSampling>(sampling, 1) : std::span<const DecodeSampling>(),
        out_token);
  }
  return Prefill(tokens, st, logits, all_logits, sampling, out_token);
}

Status LayerExecutor::Forward(std::span<const int32_t> tokens, SequenceState& state, float* logits,
                              bool all_logits) const {
  CudaSequenceState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckForward(tokens, state, "Forward", &st));
  const Turn turn(*this);
  return ForwardLocked(tokens, *st, logits, all_logits, nullptr, nullptr);
}

Status LayerExecutor::ForwardSample(std::span<const int32_t> tokens, SequenceState& state,
                                    const DecodeSampling& sampling, int32_t* out_token,
                                    float* logits) const {
  if (out_token == nullptr) return absl::InvalidArgumentError("ForwardSample: out_token is null");
  STRATA_RETURN_IF_ERROR(CheckSampling(sampling, "ForwardSample", 0));
  CudaSequenceState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckForward(tokens, state, "ForwardSample", &st));
  const Turn turn(*this);
  return ForwardLocked(tokens, *st, logits, /*all_logits=*/false, &sampling, out_token);
}

Status LayerExecutor::CheckBatchRow(std::span<SequenceState* const> states, size_t b,
                                    const char* what, std::vector<CudaSequenceState*>& cs) const {
  if (states[b] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": states[", b, "] is null"));
  }
  STRATA_RETURN_IF_ERROR(CheckState(states[b], &cs[b], what));
  for (size_t j = 0; j < b; ++j) {
    if (cs[j] == cs[b]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": states[", b, "] appears twice in the batch"));
    }
  }
  return OkStatus();
}

Status LayerExecutor::DecodeBatch(std::span<const int32_t> tokens,
                                  std::span<SequenceState* const> states, float* logits) const {
  if (tokens.size() != states.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeBatch: ", tokens.size(), " tokens for ", states.size(), " states"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeBatch: no sequences");
  std::vector<CudaSequenceState*> cs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    STRATA_RETURN_IF_ERROR(CheckBatchRow(states, b, "DecodeBatch", cs));
  }
  const Turn turn(*this);
  return DecodeLocked(tokens, cs, logits, {}, nullptr);
}

Status LayerExecutor::DecodeBatchSample(std::span<const int32_t> tokens,
                                        std::span<SequenceState* const> states,
                                        std::span<const DecodeSampling> sampling,
                                        int32_t* out_tokens) const {
  if (tokens.size() != states.size() || sampling.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecodeBatchSample: ", tokens.size(), " tokens, ", states.size(),
                     " states and ", sampling.size(), " sampling rows (must be equal)"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("DecodeBatchSample: no sequences");
  if (out_tokens == nullptr) {
    return absl::InvalidArgumentError("DecodeBatchSample: out_tokens is null");
  }
  std::vector<CudaSequenceState*> cs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    STRATA_RETURN_IF_ERROR(CheckBatchRow(states, b, "DecodeBatchSample", cs));
    STRATA_RETURN_IF_ERROR(CheckSampling(sampling[b], "DecodeBatchSample", b));
  }
  const Turn turn(*this);
  return DecodeLocked(tokens, cs, nullptr, sampling, out_tokens);
}

Status LayerExecutor::DecodeAndPrefill(std::span<const int32_t> tokens,
                                       std::span<SequenceState* const> states,
                                       std::span<const DecodeSampling> sampling,
                                       int32_t* out_tokens, const PrefillPart& p) const {
  constexpr const char* kWhat = "DecodeAndPrefill";
  if (tokens.size() != states.size() || sampling.size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": ", tokens.size(), " tokens, ",
                                                   states.size(), " states and ", sampling.size(),
                                                   " sampling rows (must be equal)"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(kWhat, ": no sequences"));
  if (out_tokens == nullptr || p.state == nullptr || (p.sampling && p.out_token == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": out_tokens, prefill.state or prefill.out_token is null"));
  }
  std::vector<CudaSequenceState*> cs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    STRATA_RETURN_IF_ERROR(CheckBatchRow(states, b, kWhat, cs));
    STRATA_RETURN_IF_ERROR(CheckSampling(sampling[b], kWhat, b));
  }
  CudaSequenceState* ps = nullptr;
  STRATA_RETURN_IF_ERROR(CheckForward(p.tokens, *p.state, kWhat, &ps));
  if (std::find(cs.begin(), cs.end(), ps) != cs.end()) {
    return absl::InvalidArgumentError(absl::StrCat(kWhat, ": prefill.state is also a decode row"));
  }
  if (p.sampling != nullptr) {
    STRATA_RETURN_IF_ERROR(CheckSampling(*p.sampling, kWhat, states.size()));
  }
  STRATA_RETURN_IF_ERROR(CheckDecodeRows(tokens, cs));
  const Turn turn(*this);
  if (prefill_single_tokens_ || static_cast<int64_t>(tokens.size()) > plan_.max_batch ||
      p.tokens.size() < 2) {
    STRATA_RETURN_IF_ERROR(DecodeLocked(tokens, cs, nullptr, sampling, out_tokens));
    return ForwardLocked(p.tokens, *ps, p.logits, /*all_logits=*/false, p.sampling, p.out_token);
  }
  return MixedLocked(tokens, cs, sampling, out_tokens, *ps, p);
}

Status LayerExecutor::MixedLocked(std::span<const int32_t> tokens,
                                  std::span<CudaSequenceState* const> states,
                                  std::span<const DecodeSampling> sampling, int32_t* out_tokens,
                                  CudaSequenceState& ps, const PrefillPart& p) const {
  const int64_t B = static_cast<int64_t>(tokens.size());
  const int64_t T = static_cast<int64_t>(p.tokens.size());
  // The chunk's first slice rides the decode rows; a longer chunk's rest
  // follows as a plain prefill.
  const int64_t T1 = std::min(T, plan_.slice);
  const bool ends = T1 == T;
  // Everything the pass writes, taken or refused before any change.
  if (layout_.has_blocks()) STRATA_RETURN_IF_ERROR(CheckBlockRoom(states, &ps, T));
  int64_t max_len = 0;
  STRATA_RETURN_IF_ERROR(StageDecodeRows(tokens, states, &max_len));
  STRATA_RETURN_IF_ERROR(EnsureBlocks(ps, ps.tokens_ + T));
  STRATA_RETURN_IF_ERROR(UploadPrefillTable(ps, ps.tokens_ + T));
  // Row B of the sampling and the logits is the chunk's last position.
  const bool sample_last = ends && p.sampling != nullptr;
  const int64_t sampled = B + (sample_last ? 1 : 0);
  for (int64_t b = 0; b < B; ++b) h_sampling_[b] = GpuRowOf(sampling[static_cast<size_t>(b)]);
  if (sample_last) h_sampling_[B] = GpuRowOf(*p.sampling);
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s_.step, h_step_, sizeof(int32_t) * static_cast<size_t>(4 * plan_.max_batch),
                      cudaMemcpyHostToDevice, stream_));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      s_.sampling, h_sampling_, sizeof(cuda::GpuSamplingRow) * static_cast<size_t>(sampled),
      cudaMemcpyHostToDevice, stream_));
  // Pageable source: the copy is staged before the call returns.
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s_.tokens, p.tokens.data(),
                                              sizeof(int32_t) * static_cast<size_t>(T1),
                                              cudaMemcpyHostToDevice, stream_));
  const float* pending = nullptr;
  STRATA_RETURN_IF_ERROR(EnqueueLayers(
      {.decode = B, .v = DecodeVariant(max_len), .ps = &ps, .prefill = T1, .past = ps.tokens_},
      &pending));
  STRATA_RETURN_IF_ERROR(
      cuda::AddRmsNorm(s_.h, pending, ActType::kF32, B, D_, w_.final_norm, eps_, s_.xn, stream_));
  if (ends) {
    const int64_t at = (B + T1 - 1) * D_;
    STRATA_RETURN_IF_ERROR(cuda::AddRmsNorm(s_.h + at, pending ? pending + at : nullptr,
                                            ActType::kF32, 1, D_, w_.final_norm, eps_,
                                            s_.xn + B * D_, stream_));
  }
  const int64_t heads = B + (ends ? 1 : 0);
  STRATA_RETURN_IF_ERROR(
      Mm(s_.xn, ActType::kBf16, D_, heads, w_.lm_head, V_, D_, s_.logits, ActType::kF32, V_, 0.f));
  STRATA_RETURN_IF_ERROR(cuda::SampleTokens(s_.logits, sampled, V_, s_.sampling, s_.sampled,
                                            s_.sample_ws, plan_.sample_ws, stream_));
  STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(h_sampled_, s_.sampled,
                                              sizeof(int32_t) * static_cast<size_t>(sampled),
                                              cudaMemcpyDeviceToHost, stream_));
  if (ends && p.logits != nullptr) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.logits, s_.logits + B * V_,
                                                sizeof(float) * static_cast<size_t>(V_),
                                                cudaMemcpyDeviceToHost, stream_));
  }
  STRATA_RETURN_IF_ERROR(Sync("decode and prefill step"));
  ++eager_steps_;
  ++mixed_steps_;
  std::memcpy(out_tokens, h_sampled_, sizeof(int32_t) * static_cast<size_t>(B));
  for (CudaSequenceState* st : states) ++st->tokens_;
  ps.tokens_ += T1;
  if (!ends) {
    return Prefill(p.tokens.subspan(static_cast<size_t>(T1)), ps, p.logits, /*all_logits=*/false,
                   p.sampling, p.out_token);
  }
  if (sample_last) *p.out_token = h_sampled_[B];
  return OkStatus();
}

Status LayerExecutor::FillContextForBenchmark(SequenceState& state, int64_t num_tokens,
                                              uint64_t seed) const {
  CudaSequenceState* st = nullptr;
  STRATA_RETURN_IF_ERROR(CheckState(&state, &st, "FillContextForBenchmark"));
  if (st->tokens_ != 0) {
    return absl::FailedPreconditionError("FillContextForBenchmark: the state must be empty");
  }
  if (num_tokens < 0 || num_tokens > st->max_tokens_) {
    return absl::OutOfRangeError(absl::StrCat("FillContextForBenchmark: ", num_tokens,
                                              " tokens do not fit the state's capacity of ",
                                              st->max_tokens_));
  }
  const Turn turn(*this);
  // An empty state owns every block it holds (Clone shares full blocks only),
  // so writing all of them is safe.
  STRATA_RETURN_IF_ERROR(EnsureBlocks(*st, num_tokens));
  ++st->generation_;
  uint64_t counter = 0;
  const std::function<uint64_t()> next = [&] {
    return seed * 0x9e3779b97f4a7c15ull + (++counter) * 0xd1b54a32d192ed03ull;
  };
  const int64_t nb = static_cast<int64_t>(st->blocks_.size());
  const std::vector<int32_t>& blocks = st->blocks_;
  for (const StateRegion& r : layout_.block_regions) {
    if (r.empty()) continue;
    const int64_t block_elems = static_cast<int64_t>(r.unit_bytes / sizeof(bf16));  // bf16 caches
    for (int64_t l = 0; l < r.layers; ++l) {
      for (int64_t j = 0; j < nb;) {
        int64_t run = 1;
        while (j + run < nb && blocks[j + run] == blocks[j] + run) ++run;
        STRATA_RETURN_IF_ERROR(cuda::FillRandomBf16(reinterpret_cast<bf16*>(r.At(l, blocks[j])),
                                                    run * block_elems, next(), 1.f, stream_));
        j += run;
      }
    }
  }
  for (const auto& m : mixers_) {
    STRATA_RETURN_IF_ERROR(m->FillSlotForBenchmark(st->slot_, next, stream_));
  }
  STRATA_RETURN_IF_ERROR(Sync("FillContextForBenchmark"));
  st->tokens_ = num_tokens;
  return OkStatus();
}

}  // namespace cuda_exec
}  // namespace strata
