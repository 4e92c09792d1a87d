// RenderState: the limits, the budget and the bookkeeping of one render.
//
// Rendering runs on the caller's thread before anything is queued, so a
// template must not be able to run without end, allocate without bound or
// recurse past the stack. Everything a render does (statements, expressions,
// filters, the object model, Value's repr/==/<) spends from one budget.
// Filters and Value's Python operations take no context argument, so the
// render installs its state for the calling thread; renders do not nest.
//
// Failures are sticky: code that cannot return a Status (Value::Equals, a
// sort comparator) records the failure and returns early with any result,
// and the evaluator reports the recorded failure at the innermost expression
// it is evaluating.
#ifndef STRATA_TEXT_JINJA_RENDER_STATE_H_
#define STRATA_TEXT_JINJA_RENDER_STATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/input_limits.h"
#include "base/stack_guard.h"
#include "base/status.h"

namespace strata::jinja {

// Defaults are the constants of base/input_limits.h.
struct RenderLimits {
  int64_t max_steps = limits::kMaxRenderSteps;
  int64_t max_output_bytes = limits::kMaxRenderOutputBytes;
  int64_t max_string_bytes = limits::kMaxTemplateStringBytes;
  int64_t max_items = limits::kMaxTemplateItems;
  int64_t max_memory_bytes = limits::kMaxRenderMemoryBytes;
  int max_depth = limits::kMaxRenderDepth;
  int max_value_depth = limits::kMaxTemplateValueDepth;
};

struct RenderOptions {
  RenderLimits limits;
  // Polled on the rendering thread every limits::kRenderCancelPollSteps
  // steps; returning true stops the render with Cancelled.
  std::function<bool()> cancelled;
};

class RenderState;

// The memory a render counted for one object it made (a string, list or
// dict), given back when the object is freed during that render. A copy of
// the object is a new object: it starts uncharged.
class RenderCharge {
 public:
  RenderCharge() = default;
  RenderCharge(const RenderCharge&) {}
  RenderCharge& operator=(const RenderCharge&) { return *this; }
  ~RenderCharge();

 private:
  friend class RenderState;
  int64_t bytes_ = 0;
  uint64_t render_ = 0;  // RenderState::id() of the render that charged it
};

class RenderState {
 public:
  // Installs the state for the calling thread until destruction.
  explicit RenderState(const RenderOptions& options);
  ~RenderState();
  RenderState(const RenderState&) = delete;
  RenderState& operator=(const RenderState&) = delete;

  // The state of the render running on this thread, or null.
  static RenderState* Current();

  const RenderLimits& limits() const { return options_.limits; }
  bool failed() const { return !error_.ok(); }
  const Status& error() const { return error_; }
  // Records a failure; the first one is kept.
  void Fail(Status status);

  // Spends `n` steps. False once the render must stop: budget spent,
  // cancelled, or an earlier failure.
  bool Spend(int64_t n = 1);
  // Admits a string of `bytes` just made: within the string limit and the
  // memory budget (held by `charge` until it is destroyed); spends its steps.
  bool AdmitString(int64_t bytes, RenderCharge* charge);
  // Admits `n` list/dict items of `item_bytes` each, likewise.
  bool AdmitItems(int64_t n, int64_t item_bytes, RenderCharge* charge);
  bool HasStack() const { return stack_.HasRoom(); }

  // Runs `sweep` when the render ends. Objects a template can change after
  // they are shared (namespaces, scopes that macros close over, loop.changed's
  // memory) register a sweep that empties them, which frees any reference
  // cycle through them.
  void AtEnd(std::function<void()> sweep);

 private:
  friend class RenderCharge;
  bool Hold(int64_t bytes, RenderCharge* charge);

  RenderOptions options_;
  RenderState* previous_;
  uint64_t id_;
  StackGuard stack_;
  Status error_;
  int64_t steps_ = 0;
  int64_t next_poll_ = 0;
  int64_t memory_bytes_ = 0;
  std::vector<std::function<void()>> sweeps_;
};

// RenderState::Current()'s checks as Status, OK outside a render: for
// callers that are about to build something large and can return an error
// before allocating it.
Status CheckStringSize(int64_t bytes);
Status CheckItemCount(int64_t n);
// RenderState::Current()->Spend(n), true outside a render.
bool SpendSteps(int64_t n);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_RENDER_STATE_H_
