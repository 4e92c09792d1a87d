// Tree-walking evaluator. Errors raised below an expression get that
// expression's position the first time they cross Eval (the innermost node
// wins), marked with a payload so outer nodes leave them alone.
//
// Every level of nested evaluation (a statement, an expression, a macro
// call) is counted against the render's depth limit and the thread's stack
// before it recurses, and spends a step of the render's budget
// (render_state.h). The cases of Exec and Eval are separate functions kept
// out of line: a recursion passes through one case per level, so each level
// costs the stack of that case alone, not of the largest one.
#include "text/jinja/evaluator.h"

#include <cmath>
#include <ctime>
#include <limits>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/filters.h"
#include "text/jinja/lexer.h"
#include "text/jinja/object_model.h"

#define STRATA_JINJA_NOINLINE __attribute__((noinline))

namespace strata::jinja {
namespace {

constexpr char kLocatedPayload[] = "strata.jinja.located";
constexpr int kMaxCallDepth = 256;

Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

Status Overflow() { return TypeError("integer overflow: result does not fit in 64 bits"); }

bool IsLocated(const Status& s) { return s.GetPayload(kLocatedPayload).has_value(); }

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  Evaluator(const std::string& label, RenderState& state, const std::string* root_out)
      : label_(label), state_(state), root_out_(root_out) {}

  STRATA_JINJA_NOINLINE Status Locate(const Status& s, int line, int column) const {
    if (s.ok() || IsLocated(s)) return s;
    // The code is kept: a cancelled render stays Cancelled.
    Status located(s.code(), absl::StrCat(label_, ":", line, ":", column, ": ", s.message()));
    located.SetPayload(kLocatedPayload, absl::Cord("1"));
    return located;
  }

  StatusOr<Flow> Exec(const StmtList& body, const std::shared_ptr<Scope>& scope, std::string* out) {
    for (const auto& stmt : body) {
      if (Status s = Enter(); !s.ok()) return Locate(s, stmt->line, stmt->column);
      Level level(&depth_);
      auto flow = ExecOne(*stmt, scope, out);
      if (flow.ok() && state_.failed()) flow = state_.error();
      if (!flow.ok()) return Locate(flow.status(), stmt->line, stmt->column);
      if (*flow != Flow::kNormal) return *flow;
    }
    return Flow::kNormal;
  }

  StatusOr<Value> Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
    if (Status s = Enter(); !s.ok()) return Locate(s, e.line, e.column);
    Level level(&depth_);
    auto v = EvalInner(e, scope);
    // A failure recorded where no Status could be returned (== inside a
    // filter, a repr too deep) surfaces at the innermost expression.
    if (v.ok() && state_.failed()) v = state_.error();
    if (!v.ok()) return Locate(v.status(), e.line, e.column);
    return v;
  }

 private:
  // One level of nested evaluation, counted for the object's scope.
  struct Level {
    explicit Level(int* depth) : depth(depth) { ++*depth; }
    ~Level() { --*depth; }
    int* depth;
  };

  // Checked before each level: depth, stack, budget.
  Status Enter() {
    if (depth_ < state_.limits().max_depth && state_.HasStack() && state_.Spend(1)) {
      return OkStatus();
    }
    return Refused();
  }
  STRATA_JINJA_NOINLINE Status Refused() const {
    if (depth_ >= state_.limits().max_depth) {
      return TypeError(
          absl::StrCat("rendering nested deeper than ", state_.limits().max_depth, " levels"));
    }
    if (!state_.HasStack()) return TypeError("rendering nested too deeply for this thread's stack");
    return state_.error();
  }

  // Appends rendered text. The rendered prompt and the buffers of macros and
  // {% set %} blocks have their limits, checked before the buffer grows.
  Status Emit(std::string_view text, std::string* out) {
    const bool root = out == root_out_;
    const int64_t limit =
        root ? state_.limits().max_output_bytes : state_.limits().max_string_bytes;
    const int64_t size = static_cast<int64_t>(out->size() + text.size());
    if (size > limit) {
      return TypeError(
          root ? absl::StrCat("render output exceeds ", limit, " bytes")
               : absl::StrCat("string of ", size, " bytes exceeds the limit of ", limit, " bytes"));
    }
    if (!state_.Spend(1 + static_cast<int64_t>(text.size()) / limits::kRenderBytesPerStep)) {
      return state_.error();
    }
    out->append(text);
    return OkStatus();
  }

  StatusOr<Flow> ExecOne(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
    switch (s.kind) {
      case StmtKind::kText:
        STRATA_RETURN_IF_ERROR(Emit(s.text, out));
        return Flow::kNormal;
      case StmtKind::kOutput:
        STRATA_RETURN_IF_ERROR(ExecOutput(s, scope, out));
        return Flow::kNormal;
      case StmtKind::kIf:
        return ExecIf(s, scope, out);
      case StmtKind::kFor:
        STRATA_RETURN_IF_ERROR(ExecFor(s, scope, out));
        return Flow::kNormal;
      case StmtKind::kSet:
        STRATA_RETURN_IF_ERROR(ExecSet(s, scope));
        return Flow::kNormal;
      case StmtKind::kSetBlock:
        STRATA_RETURN_IF_ERROR(ExecSetBlock(s, scope));
        return Flow::kNormal;
      case StmtKind::kMacro:
        scope->Set(s.text, MakeMacro(s, scope, s.text));
        return Flow::kNormal;
      case StmtKind::kCallBlock:
        STRATA_RETURN_IF_ERROR(ExecCallBlock(s, scope, out));
        return Flow::kNormal;
      case StmtKind::kFilterBlock:
        STRATA_RETURN_IF_ERROR(ExecFilterBlock(s, scope, out));
        return Flow::kNormal;
      case StmtKind::kWith:
        return ExecWith(s, scope, out);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kGeneration:
        return Exec(s.bodies[0], scope, out);
    }
    return Flow::kNormal;
  }

  STRATA_JINJA_NOINLINE Status ExecOutput(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                          std::string* out) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
    return Emit(v.Str(), out);
  }

  STRATA_JINJA_NOINLINE StatusOr<Flow> ExecIf(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                              std::string* out) {
    for (size_t i = 0; i < s.bodies.size(); ++i) {
      if (i < s.conditions.size()) {
        STRATA_ASSIGN_OR_RETURN(Value c, Eval(*s.conditions[i], scope));
        if (!c.Truthy()) continue;
      }
      return Exec(s.bodies[i], scope, out);
    }
    return Flow::kNormal;
  }

  STRATA_JINJA_NOINLINE Status ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
    return Assign(s.target, v, scope);
  }

  STRATA_JINJA_NOINLINE Status ExecSetBlock(const Stmt& s, const std::shared_ptr<Scope>& scope) {
    std::string body;
    STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], scope, &body).status());
    Value v = Value::String(std::move(body));
    if (s.filter) {
      STRATA_ASSIGN_OR_RETURN(v, ApplyPlaceholderFilter(*s.filter, v, scope));
    }
    return Assign(s.target, v, scope);
  }

  STRATA_JINJA_NOINLINE Status ExecCallBlock(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                             std::string* out) {
    Value caller = MakeMacro(s, scope, "caller");
    const Expr& call = *s.expr;
    STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0], scope));
    CallArgs args;
    STRATA_RETURN_IF_ERROR(EvalArgs(call, 1, scope, &args));
    args.keyword.emplace_back("caller", caller);
    STRATA_ASSIGN_OR_RETURN(Value v, CallValue(callee, args));
    return Emit(v.Str(), out);
  }

  STRATA_JINJA_NOINLINE Status ExecFilterBlock(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                               std::string* out) {
    std::string body;
    STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], scope, &body).status());
    STRATA_ASSIGN_OR_RETURN(
        Value v, ApplyPlaceholderFilter(*s.filter, Value::String(std::move(body)), scope));
    return Emit(v.Str(), out);
  }

  STRATA_JINJA_NOINLINE StatusOr<Flow> ExecWith(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                                std::string* out) {
    auto inner = std::make_shared<Scope>(scope);
    for (const auto& [target, expr] : s.assignments) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      STRATA_RETURN_IF_ERROR(Assign(target, v, inner));
    }
    return Exec(s.bodies[0], inner, out);
  }

  // Evaluates a filter chain whose innermost operand is the placeholder name "".
  StatusOr<Value> ApplyPlaceholderFilter(const Expr& chain, Value operand,
                                         const std::shared_ptr<Scope>& scope) {
    auto inner = std::make_shared<Scope>(scope);
    inner->Set("", std::move(operand));
    return Eval(chain, inner);
  }

  Status Assign(const Target& target, const Value& v, const std::shared_ptr<Scope>& scope) {
    if (!target.attribute.empty()) {
      const Value* ns = scope->Find(target.names[0]);
      if (!ns || !ns->is_namespace()) {
        return TypeError("cannot assign attribute on non-namespace object");
      }
      ns->namespace_attrs().Set(Value::String(target.attribute), v);
      return OkStatus();
    }
    if (!target.is_tuple) {
      scope->Set(target.names[0], v);
      return OkStatus();
    }
    STRATA_ASSIGN_OR_RETURN(auto items, Iterate(v));
    if (items.size() != target.names.size()) {
      return TypeError(
          items.size() < target.names.size()
              ? absl::StrCat("not enough values to unpack (expected ", target.names.size(),
                             ", got ", items.size(), ")")
              : absl::StrCat("too many values to unpack (expected ", target.names.size(), ")"));
    }
    for (size_t i = 0; i < items.size(); ++i) scope->Set(target.names[i], items[i]);
    return OkStatus();
  }

  STRATA_JINJA_NOINLINE Status ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                       std::string* out) {
    STRATA_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, scope));
    auto iterated = Iterate(iterable);
    if (!iterated.ok()) return Locate(iterated.status(), s.expr->line, s.expr->column);
    std::vector<Value> all = std::move(iterated).value();
    std::vector<Value> items;
    if (s.filter) {
      for (auto& item : all) {
        auto probe = std::make_shared<Scope>(scope);
        STRATA_RETURN_IF_ERROR(Assign(s.target, item, probe));
        STRATA_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, probe));
        if (keep.Truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.changed(*values) compares with its previous call in this loop.
    auto last_changed = std::make_shared<std::optional<Value>>();
    // The keys of `loop`, made once: the dict is built per iteration.
    static const char* const kKeys[] = {"index",    "index0", "revindex", "revindex0", "first",
                                        "last",     "length", "depth",    "depth0",    "previtem",
                                        "nextitem", "cycle",  "changed"};
    std::vector<Value> keys;
    for (const char* k : kKeys) keys.push_back(Value::String(k));
    for (int64_t i = 0; i < n; ++i) {
      if (!state_.Spend(1)) return state_.error();
      auto iteration = std::make_shared<Scope>(scope);
      STRATA_RETURN_IF_ERROR(Assign(s.target, items[i], iteration));
      iteration->Set("loop", LoopVariable(keys, items, i, last_changed));
      STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(s.bodies[0], iteration, out));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && s.bodies.size() > 1) {
      auto else_scope = std::make_shared<Scope>(scope);
      STRATA_RETURN_IF_ERROR(Exec(s.bodies[1], else_scope, out).status());
    }
    return OkStatus();
  }

  // `loop` of iteration i of n (out of line: the loop's recursion into its
  // body does not carry these values).
  STRATA_JINJA_NOINLINE static Value LoopVariable(
      const std::vector<Value>& keys, const std::vector<Value>& items, int64_t i,
      const std::shared_ptr<std::optional<Value>>& last_changed) {
    const int64_t n = static_cast<int64_t>(items.size());
    const Value values[] = {
        Value::Int(i + 1),
        Value::Int(i),
        Value::Int(n - i),
        Value::Int(n - i - 1),
        Value::Bool(i == 0),
        Value::Bool(i == n - 1),
        Value::Int(n),
        Value::Int(1),
        Value::Int(0),
        i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"),
        i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"),
        Value::Function("cycle",
                        [i](CallArgs& a) -> StatusOr<Value> {
                          if (a.positional.empty()) {
                            return TypeError("no items for cycling given");
                          }
                          return a.positional[i % a.positional.size()];
                        }),
        Value::Function("changed", [last_changed](CallArgs& a) -> StatusOr<Value> {
          Value now = Value::List(a.positional, true);
          if (*last_changed && (*last_changed)->Equals(now)) return Value::Bool(false);
          // The memory can hold the loop itself (loop.changed(loop)), a cycle:
          // emptied when the render ends.
          RenderState* state = RenderState::Current();
          if (!*last_changed && state != nullptr)
            state->AtEnd([last_changed] { last_changed->reset(); });
          *last_changed = now;
          return Value::Bool(true);
        })};
    // The keys are distinct: no lookups while building.
    DictData loop;
    loop.items.reserve(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) loop.items.emplace_back(keys[k], values[k]);
    return Value::Dict(std::move(loop));
  }

  Value MakeMacro(const Stmt& s, std::shared_ptr<Scope> defining, const std::string& name) {
    // The macro is stored in the scope it closes over, a reference cycle:
    // the scope is emptied when the render ends.
    state_.AtEnd([defining]() { defining->Clear(); });
    const Stmt* stmt = &s;
    return Value::Function(name, [this, stmt, defining, name](CallArgs& args) {
      return CallMacro(*stmt, defining, name, args);
    });
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> CallMacro(const Stmt& stmt,
                                                  const std::shared_ptr<Scope>& defining,
                                                  const std::string& name, CallArgs& args) {
    if (call_depth_ >= kMaxCallDepth) return TypeError("maximum recursion depth exceeded");
    auto scope = std::make_shared<Scope>(defining);
    const auto& params = stmt.params;
    std::vector<Value> extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        scope->Set(params[i].name, args.positional[i]);
      } else {
        extra.push_back(args.positional[i]);
      }
    }
    DictData kwargs;
    std::vector<bool> bound(params.size(), false);
    for (size_t i = 0; i < args.positional.size() && i < params.size(); ++i) bound[i] = true;
    for (const auto& [k, v] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i].name == k) {
          if (bound[i])
            return TypeError(
                absl::StrCat("macro '", name, "' got multiple values for argument '", k, "'"));
          scope->Set(k, v);
          bound[i] = true;
          matched = true;
        }
      }
      if (!matched) {
        if (k == "caller") {
          scope->Set("caller", v);
        } else {
          kwargs.Set(Value::String(k), v);
        }
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      if (params[i].default_value) {
        STRATA_ASSIGN_OR_RETURN(Value d, Eval(*params[i].default_value, scope));
        scope->Set(params[i].name, d);
      } else {
        scope->Set(params[i].name, Value::Undefined(absl::StrCat("parameter '", params[i].name,
                                                                 "' was not provided")));
      }
    }
    scope->Set("varargs", Value::List(std::move(extra), true));
    scope->Set("kwargs", Value::Dict(std::move(kwargs)));
    std::string out;
    ++call_depth_;
    auto flow = Exec(stmt.bodies[0], scope, &out);
    --call_depth_;
    STRATA_RETURN_IF_ERROR(flow.status());
    return Value::String(std::move(out));
  }

  Status EvalArgs(const Expr& e, size_t first, const std::shared_ptr<Scope>& scope,
                  CallArgs* args) {
    for (size_t i = first; i < e.args.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i], scope));
      args->positional.push_back(std::move(v));
    }
    for (const auto& [k, expr] : e.kwargs) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
      args->keyword.emplace_back(k, std::move(v));
    }
    return OkStatus();
  }

  StatusOr<Value> CallValue(const Value& callee, CallArgs& args) {
    if (callee.is_function()) return callee.function().fn(args);
    if (callee.is_undefined()) return UndefinedError(callee);
    return TypeError(absl::StrCat("'", callee.TypeName(), "' object is not callable"));
  }

  StatusOr<Value> EvalInner(const Expr& e, const std::shared_ptr<Scope>& scope) {
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.literal;
      case ExprKind::kName: {
        const Value* v = scope->Find(e.name);
        if (v) return *v;
        return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
      }
      case ExprKind::kList:
      case ExprKind::kTuple:
        return EvalSequence(e, scope);
      case ExprKind::kDict:
        return EvalDict(e, scope);
      case ExprKind::kGetattr:
        return EvalGetattr(e, scope);
      case ExprKind::kGetitem:
        return EvalGetitem(e, scope);
      case ExprKind::kSlice:
        return EvalSlice(e, scope);
      case ExprKind::kCall:
        return EvalCall(e, scope);
      case ExprKind::kFilter:
        return EvalFilter(e, scope);
      case ExprKind::kTest:
        return EvalTest(e, scope);
      case ExprKind::kNot:
      case ExprKind::kNeg:
      case ExprKind::kPos:
        return EvalUnary(e, scope);
      case ExprKind::kBinary:
        return EvalBinary(e, scope);
      case ExprKind::kCompare:
        return EvalCompare(e, scope);
      case ExprKind::kCondition:
        return EvalCondition(e, scope);
    }
    return TypeError("unknown expression");
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalSequence(const Expr& e,
                                                     const std::shared_ptr<Scope>& scope) {
    std::vector<Value> items;
    for (const auto& a : e.args) {
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
      items.push_back(std::move(v));
    }
    return Value::List(std::move(items), e.kind == ExprKind::kTuple);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalDict(const Expr& e,
                                                 const std::shared_ptr<Scope>& scope) {
    DictData d;
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      STRATA_ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
      STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
      if (k.is_list() && !k.list().is_tuple) return TypeError("unhashable type: 'list'");
      if (k.is_dict()) return TypeError("unhashable type: 'dict'");
      d.Set(std::move(k), std::move(v));
    }
    return Value::Dict(std::move(d));
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalGetattr(const Expr& e,
                                                    const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
    return GetAttribute(obj, e.name);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalGetitem(const Expr& e,
                                                    const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
    STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
    return GetItem(obj, key);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalSlice(const Expr& e,
                                                  const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
    Value parts[3] = {Value::None(), Value::None(), Value::None()};
    for (int i = 0; i < 3; ++i) {
      if (e.args[i + 1]) {
        STRATA_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1], scope));
      }
    }
    return GetSlice(obj, parts[0], parts[1], parts[2]);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalCall(const Expr& e,
                                                 const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
    CallArgs args;
    STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
    return CallValue(callee, args);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalFilter(const Expr& e,
                                                   const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
    CallArgs args;
    STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
    return ApplyFilter(e.name, operand, args);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalTest(const Expr& e,
                                                 const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
    CallArgs args;
    STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
    STRATA_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, operand, args));
    return Value::Bool(r != e.negated);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalUnary(const Expr& e,
                                                  const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
    if (e.kind == ExprKind::kNot) return Value::Bool(!v.Truthy());
    if (v.is_undefined()) return UndefinedError(v);
    if (!v.is_number()) {
      return TypeError(absl::StrCat("bad operand type for unary ",
                                    e.kind == ExprKind::kNeg ? "-" : "+", ": '", v.TypeName(),
                                    "'"));
    }
    if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
    if (v.is_float()) return Value::Float(-v.as_double());
    if (v.as_int() == std::numeric_limits<int64_t>::min()) return Overflow();
    return Value::Int(-v.as_int());
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalCompare(const Expr& e,
                                                    const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
    for (size_t i = 0; i < e.ops.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
      STRATA_ASSIGN_OR_RETURN(bool r, Compare(e.ops[i], left, right));
      if (!r) return Value::Bool(false);
      left = std::move(right);
    }
    return Value::Bool(true);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalCondition(const Expr& e,
                                                      const std::shared_ptr<Scope>& scope) {
    STRATA_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0], scope));
    if (c.Truthy()) return Eval(*e.args[1], scope);
    if (e.args[2]) return Eval(*e.args[2], scope);
    return Value::Undefined(
        "the inline if-expression evaluated to false and no else section was defined.");
  }

  STRATA_JINJA_NOINLINE StatusOr<bool> Compare(const std::string& op, const Value& a,
                                               const Value& b) {
    if (op == "==") return a.Equals(b);
    if (op == "!=") return !a.Equals(b);
    if (op == "in" || op == "notin") {
      bool found;
      if (b.is_string()) {
        if (a.is_undefined()) return UndefinedError(a);
        if (!a.is_string()) {
          return TypeError(
              absl::StrCat("'in <string>' requires string as left operand, not ", a.TypeName()));
        }
        found = FindSubstring(b.as_string(), a.as_string()) != std::string::npos;
      } else if (b.is_dict()) {
        found = b.dict().Find(a) != nullptr;
      } else if (b.is_list() || b.is_undefined()) {
        found = false;
        if (b.is_list()) {
          for (const auto& x : b.list().items) {
            if (x.Equals(a)) {
              found = true;
              break;
            }
            if (!state_.Spend(1)) return state_.error();
          }
        }
      } else {
        return TypeError(absl::StrCat("argument of type '", b.TypeName(), "' is not iterable"));
      }
      return op == "in" ? found : !found;
    }
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    auto unsupported = [&]() {
      return TypeError(absl::StrCat("'", op, "' not supported between instances of '", a.TypeName(),
                                    "' and '", b.TypeName(), "'"));
    };
    bool comparable = (a.is_number() && b.is_number()) || (a.is_string() && b.is_string()) ||
                      (a.is_list() && b.is_list());
    if (!comparable) return unsupported();
    if (op == "<") return LessThan(a, b);
    if (op == ">") return LessThan(b, a);
    if (op == "<=") {
      STRATA_ASSIGN_OR_RETURN(bool gt, LessThan(b, a));
      return !gt;
    }
    STRATA_ASSIGN_OR_RETURN(bool lt, LessThan(a, b));
    return !lt;
  }

  // Python's int arithmetic with int64 results: what does not fit is an
  // error, never a wrap or a trap (INT64_MIN // -1 raises SIGFPE on x86).
  StatusOr<Value> IntArithmetic(const std::string& op, int64_t x, int64_t y) {
    int64_t r;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return TypeError("integer division or modulo by zero");
      if (y == -1) {
        if (op == "%") return Value::Int(0);
        if (x == std::numeric_limits<int64_t>::min()) return Overflow();
        return Value::Int(-x);
      }
      // Floor division; with |y| >= 2 neither q nor q * y can overflow.
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return op == "//" ? Value::Int(q) : Value::Int(x - q * y);
    }
    // "**" with y >= 0: exponentiation by squaring with overflow checks.
    int64_t result = 1, base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return Overflow();
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Overflow();
    }
    return Value::Int(result);
  }

  StatusOr<Value> NumberArithmetic(const std::string& op, const Value& a, const Value& b) {
    const bool ints = !a.is_float() && !b.is_float();
    const double fx = a.as_double(), fy = b.as_double();
    if (op == "/") {
      if (fy == 0) return TypeError("division by zero");
      return Value::Float(fx / fy);
    }
    if (ints && (op != "**" || b.as_int() >= 0)) return IntArithmetic(op, a.as_int(), b.as_int());
    if (op == "+") return Value::Float(fx + fy);
    if (op == "-") return Value::Float(fx - fy);
    if (op == "*") return Value::Float(fx * fy);
    if (op == "//" || op == "%") {
      if (fy == 0) return TypeError("float divmod()");
      double q = std::floor(fx / fy);
      if (op == "//") return Value::Float(q);
      double m = std::fmod(fx, fy);
      if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
      return Value::Float(m);
    }
    if (fx == 0 && fy < 0) return TypeError("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(fx, fy));
  }

  // seq * n for a str or list: the result's size is checked before it is built.
  StatusOr<Value> Repeat(const Value& seq, int64_t count) {
    const int64_t n = std::max<int64_t>(0, count);
    const int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.as_string().size())
                                         : static_cast<int64_t>(seq.list().items.size());
    int64_t total = 0;
    if (__builtin_mul_overflow(unit, n, &total)) total = std::numeric_limits<int64_t>::max();
    if (seq.is_string()) {
      STRATA_RETURN_IF_ERROR(CheckStringSize(total));
      std::string out;
      out.reserve(static_cast<size_t>(total));
      for (int64_t i = 0; i < n && unit > 0; ++i) out += seq.as_string();
      return Value::String(std::move(out));
    }
    STRATA_RETURN_IF_ERROR(CheckItemCount(total));
    std::vector<Value> items;
    items.reserve(static_cast<size_t>(total));
    for (int64_t i = 0; i < n && unit > 0; ++i) {
      items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
    }
    return Value::List(std::move(items), seq.list().is_tuple);
  }

  STRATA_JINJA_NOINLINE StatusOr<Value> EvalBinary(const Expr& e,
                                                   const std::shared_ptr<Scope>& scope) {
    const std::string& op = e.name;
    STRATA_ASSIGN_OR_RETURN(Value a, Eval(*e.args[0], scope));
    if (op == "and") {
      if (!a.Truthy()) return a;
      return Eval(*e.args[1], scope);
    }
    if (op == "or") {
      if (a.Truthy()) return a;
      return Eval(*e.args[1], scope);
    }
    STRATA_ASSIGN_OR_RETURN(Value b, Eval(*e.args[1], scope));
    return ApplyBinary(op, a, b);
  }

  // The operators of EvalBinary but `and` / `or`, on evaluated operands.
  STRATA_JINJA_NOINLINE StatusOr<Value> ApplyBinary(const std::string& op, const Value& a,
                                                    const Value& b) {
    if (op == "~") return Concatenate(a.Str(), b.Str());
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    if (a.is_number() && b.is_number()) return NumberArithmetic(op, a, b);
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Concatenate(a.as_string(), b.as_string());
      if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
        const auto& x = a.list().items;
        const auto& y = b.list().items;
        STRATA_RETURN_IF_ERROR(CheckItemCount(static_cast<int64_t>(x.size() + y.size())));
        std::vector<Value> items;
        items.reserve(x.size() + y.size());
        items.insert(items.end(), x.begin(), x.end());
        items.insert(items.end(), y.begin(), y.end());
        return Value::List(std::move(items), a.list().is_tuple);
      }
    }
    if (op == "*") {
      const Value* seq = (a.is_string() || a.is_list())   ? &a
                         : (b.is_string() || b.is_list()) ? &b
                                                          : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq && (count->is_int() || count->is_bool())) return Repeat(*seq, count->as_int());
    }
    if (op == "%" && a.is_string()) {
      CallArgs args;
      args.positional.push_back(b);
      return ApplyFilter("format", a, args);
    }
    if (op == "+" && a.is_string()) {
      return TypeError(
          absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
    }
    return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                  "' and '", b.TypeName(), "'"));
  }

  static StatusOr<Value> Concatenate(const std::string& a, const std::string& b) {
    STRATA_RETURN_IF_ERROR(CheckStringSize(static_cast<int64_t>(a.size() + b.size())));
    std::string out;
    out.reserve(a.size() + b.size());
    out.append(a).append(b);
    return Value::String(std::move(out));
  }

  const std::string& label_;
  RenderState& state_;
  const std::string* root_out_;
  int depth_ = 0;       // nested Exec/Eval levels, macro calls included
  int call_depth_ = 0;  // nested macro calls
};

StatusOr<Value> Range(CallArgs& a) {
  if (!a.keyword.empty()) return TypeError("range() takes no keyword arguments");
  std::vector<int64_t> v;
  for (const auto& x : a.positional) {
    if (!x.is_int() && !x.is_bool()) {
      return TypeError(
          absl::StrCat("'", x.TypeName(), "' object cannot be interpreted as an integer"));
    }
    v.push_back(x.as_int());
  }
  int64_t start = 0, stop = 0, step = 1;
  if (v.size() == 1) {
    stop = v[0];
  } else if (v.size() == 2 || v.size() == 3) {
    start = v[0];
    stop = v[1];
    if (v.size() == 3) step = v[2];
  } else {
    return TypeError("range expected 1 to 3 arguments");
  }
  if (step == 0) return TypeError("range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    // The sandbox caps ranges (MAX_RANGE in jinja2/sandbox.py).
    if (items.size() >= 100000)
      return TypeError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    items.push_back(Value::Int(i));
    // Past int64 is past `stop` too.
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value::List(std::move(items));
}

StatusOr<Value> MakeDictFromArgs(CallArgs& a) {
  DictData d;
  for (const auto& p : a.positional) {
    if (!p.is_dict()) return TypeError("namespace()/dict() positional arguments must be mappings");
    for (const auto& [k, v] : p.dict().items) d.Set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.Set(Value::String(k), v);
  return Value::Dict(std::move(d));
}

}  // namespace

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

std::shared_ptr<Scope> MakeGlobalScope() {
  auto g = std::make_shared<Scope>();
  g->Set("range", Value::Function("range", Range));
  g->Set("dict", Value::Function("dict", MakeDictFromArgs));
  g->Set("namespace", Value::Function("namespace", [](CallArgs& a) -> StatusOr<Value> {
           STRATA_ASSIGN_OR_RETURN(Value d, MakeDictFromArgs(a));
           return Value::Namespace(d.dict());
         }));
  g->Set("raise_exception", Value::Function("raise_exception", [](CallArgs& a) -> StatusOr<Value> {
           std::string msg = a.positional.empty() ? "" : a.positional[0].Str();
           return absl::InvalidArgumentError(msg);
         }));
  g->Set("strftime_now", Value::Function("strftime_now", [](CallArgs& a) -> StatusOr<Value> {
           if (a.positional.size() != 1 || !a.positional[0].is_string()) {
             return TypeError("strftime_now(format) takes one string");
           }
           std::time_t now = std::time(nullptr);
           std::tm local;
           localtime_r(&now, &local);
           char buf[512];
           size_t n = std::strftime(buf, sizeof(buf), a.positional[0].as_string().c_str(), &local);
           return Value::String(std::string(buf, n));
         }));
  return g;
}

void Scope::Clear() { vars_.clear(); }

StatusOr<std::string> RenderTemplate(const StmtList& body, const std::string& label,
                                     std::shared_ptr<Scope> scope, const RenderOptions& options) {
  std::string out;
  Status status;
  {
    RenderState state(options);
    Evaluator evaluator(label, state, &out);
    status = evaluator.Exec(body, scope, &out).status();
  }
  // Drop the internal payload: callers see a plain InvalidArgument (or
  // Cancelled).
  if (!status.ok()) return Status(status.code(), status.message());
  return out;
}

}  // namespace strata::jinja
