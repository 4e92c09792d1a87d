#include "text/jinja/render_state.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace strata::jinja {
namespace {

thread_local RenderState* t_current = nullptr;
// Ids of renders on this thread, so that a charge is given back only to the
// render that made it.
thread_local uint64_t t_renders = 0;

Status LimitError(const std::string& message) { return absl::InvalidArgumentError(message); }

// What an object costs beyond its contents (the shared block, the container).
constexpr int64_t kObjectBytes = 64;

}  // namespace

RenderCharge::~RenderCharge() {
  RenderState* state = RenderState::Current();
  if (bytes_ != 0 && state != nullptr && state->id_ == render_) state->memory_bytes_ -= bytes_;
}

RenderState::RenderState(const RenderOptions& options)
    : options_(options), previous_(t_current), id_(++t_renders) {
  next_poll_ = limits::kRenderCancelPollSteps;
  t_current = this;
}

RenderState::~RenderState() {
  // Sweeps run with the state uninstalled: what they free is not the render's work.
  t_current = previous_;
  for (auto& sweep : sweeps_) sweep();
}

RenderState* RenderState::Current() { return t_current; }

void RenderState::Fail(Status status) {
  if (error_.ok()) error_ = std::move(status);
}

bool RenderState::Spend(int64_t n) {
  if (!error_.ok()) return false;
  steps_ += n;
  if (steps_ > options_.limits.max_steps) {
    Fail(LimitError(absl::StrCat("render exceeded ", options_.limits.max_steps, " steps")));
    return false;
  }
  if (options_.cancelled && steps_ >= next_poll_) {
    next_poll_ = steps_ + limits::kRenderCancelPollSteps;
    if (options_.cancelled()) {
      Fail(absl::CancelledError("render cancelled"));
      return false;
    }
  }
  return true;
}

bool RenderState::Hold(int64_t bytes, RenderCharge* charge) {
  memory_bytes_ += bytes;
  if (charge != nullptr) {
    charge->bytes_ += bytes;
    charge->render_ = id_;
  }
  if (memory_bytes_ > options_.limits.max_memory_bytes) {
    Fail(LimitError(absl::StrCat("render holds more than ", options_.limits.max_memory_bytes,
                                 " bytes of values")));
    return false;
  }
  return true;
}

bool RenderState::AdmitString(int64_t bytes, RenderCharge* charge) {
  if (bytes > options_.limits.max_string_bytes) {
    Fail(LimitError(absl::StrCat("string of ", bytes, " bytes exceeds the limit of ",
                                 options_.limits.max_string_bytes, " bytes")));
    return false;
  }
  return Hold(kObjectBytes + bytes, charge) && Spend(1 + bytes / limits::kRenderBytesPerStep);
}

bool RenderState::AdmitItems(int64_t n, int64_t item_bytes, RenderCharge* charge) {
  if (n > options_.limits.max_items) {
    Fail(LimitError(absl::StrCat("list of ", n, " items exceeds the limit of ",
                                 options_.limits.max_items, " items")));
    return false;
  }
  return Hold(kObjectBytes + n * item_bytes, charge) && Spend(1 + n);
}

void RenderState::AtEnd(std::function<void()> sweep) {
  // A sweep holds memory until the end (a loop that defines a macro
  // registers one per iteration), but it is registered even past the
  // budget: it frees.
  Hold(64, nullptr);
  sweeps_.push_back(std::move(sweep));
}

Status CheckStringSize(int64_t bytes) {
  RenderState* state = RenderState::Current();
  if (state == nullptr || bytes <= state->limits().max_string_bytes) return OkStatus();
  return LimitError(absl::StrCat("string of ", bytes, " bytes exceeds the limit of ",
                                 state->limits().max_string_bytes, " bytes"));
}

Status CheckItemCount(int64_t n) {
  RenderState* state = RenderState::Current();
  if (state == nullptr || n <= state->limits().max_items) return OkStatus();
  return LimitError(absl::StrCat("list of ", n, " items exceeds the limit of ",
                                 state->limits().max_items, " items"));
}

bool SpendSteps(int64_t n) {
  RenderState* state = RenderState::Current();
  return state == nullptr || state->Spend(n);
}

}  // namespace strata::jinja
