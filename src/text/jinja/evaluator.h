// Evaluator: executes a parsed template against variables, with jinja2's
// scoping (for-loop iterations, macros and `with` get their own scope; `if`
// does not), loop variables, macros, break/continue, and the globals that
// transformers provides (range, namespace, dict, raise_exception,
// strftime_now). Runtime errors carry "<label>:<line>:<column>: ".
#ifndef STRATA_TEXT_JINJA_EVALUATOR_H_
#define STRATA_TEXT_JINJA_EVALUATOR_H_

#include <memory>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/render_state.h"
#include "text/jinja/value.h"

namespace strata::jinja {

// A variable scope; lookups fall back to the parent.
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent = nullptr) : parent_(std::move(parent)) {}
  const Value* Find(const std::string& name) const;
  void Set(const std::string& name, Value value) { vars_[name] = std::move(value); }
  // Forgets this scope's variables (not the parent's).
  void Clear();

 private:
  std::shared_ptr<Scope> parent_;
  // std::unordered_map, not absl's flat_hash_map: an insertion that fails to
  // allocate must leave the map intact (the 2022 Abseil marks the slot full
  // before constructing it, so the destructor frees garbage).
  std::unordered_map<std::string, Value> vars_;
};

// Scope holding the globals: range, namespace, dict, raise_exception, strftime_now.
std::shared_ptr<Scope> MakeGlobalScope();

// Renders `body` with variables looked up in `scope` (usually a child of the
// global scope holding the render context), within the limits of `options`
// (render_state.h). Errors are InvalidArgument "<label>:<line>:<column>: ...",
// or Cancelled when options.cancelled said so.
StatusOr<std::string> RenderTemplate(const StmtList& body, const std::string& label,
                                     std::shared_ptr<Scope> scope,
                                     const RenderOptions& options = {});

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_EVALUATOR_H_
