// Tree-walking evaluator. Errors raised below an expression get that
// expression's position the first time they cross Eval (the innermost node
// wins), marked with a payload so outer nodes leave them alone.
#include "text/jinja/evaluator.h"

#include <cmath>
#include <ctime>
#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "text/jinja/filters.h"
#include "text/jinja/lexer.h"
#include "text/jinja/object_model.h"

namespace strata::jinja {
namespace {

constexpr char kLocatedPayload[] = "strata.jinja.located";
constexpr int kMaxCallDepth = 256;

Status TypeError(const std::string& message) { return absl::InvalidArgumentError(message); }

bool IsLocated(const Status& s) { return s.GetPayload(kLocatedPayload).has_value(); }

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  explicit Evaluator(const std::string& label) : label_(label) {}

  Status Locate(const Status& s, int line, int column) const {
    if (s.ok() || IsLocated(s)) return s;
    Status located = LocatedError(label_, line, column, std::string(s.message()));
    located.SetPayload(kLocatedPayload, absl::Cord("1"));
    return located;
  }

  StatusOr<Flow> Exec(const StmtList& body, const std::shared_ptr<Scope>& scope, std::string* out) {
    for (const auto& stmt : body) {
      auto flow = ExecOne(*stmt, scope, out);
      if (!flow.ok()) return Locate(flow.status(), stmt->line, stmt->column);
      if (*flow != Flow::kNormal) return *flow;
    }
    return Flow::kNormal;
  }

  StatusOr<Value> Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
    auto v = EvalInner(e, scope);
    if (!v.ok()) return Locate(v.status(), e.line, e.column);
    return v;
  }

 private:
  StatusOr<Flow> ExecOne(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
    switch (s.kind) {
      case StmtKind::kText:
        *out += s.text;
        return Flow::kNormal;
      case StmtKind::kOutput: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        *out += v.Str();
        return Flow::kNormal;
      }
      case StmtKind::kIf:
        for (size_t i = 0; i < s.bodies.size(); ++i) {
          if (i < s.conditions.size()) {
            STRATA_ASSIGN_OR_RETURN(Value c, Eval(*s.conditions[i], scope));
            if (!c.Truthy()) continue;
          }
          return Exec(s.bodies[i], scope, out);
        }
        return Flow::kNormal;
      case StmtKind::kFor:
        STRATA_RETURN_IF_ERROR(ExecFor(s, scope, out));
        return Flow::kNormal;
      case StmtKind::kSet: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, scope));
        STRATA_RETURN_IF_ERROR(Assign(s.target, v, scope));
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        std::string body;
        STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], scope, &body).status());
        Value v = Value::String(body);
        if (s.filter) {
          STRATA_ASSIGN_OR_RETURN(v, ApplyPlaceholderFilter(*s.filter, v, scope));
        }
        STRATA_RETURN_IF_ERROR(Assign(s.target, v, scope));
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope->Set(s.text, MakeMacro(s, scope, s.text));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        Value caller = MakeMacro(s, scope, "caller");
        const Expr& call = *s.expr;
        STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*call.args[0], scope));
        CallArgs args;
        STRATA_RETURN_IF_ERROR(EvalArgs(call, 1, scope, &args));
        args.keyword.emplace_back("caller", caller);
        STRATA_ASSIGN_OR_RETURN(Value v, CallValue(callee, args));
        *out += v.Str();
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string body;
        STRATA_RETURN_IF_ERROR(Exec(s.bodies[0], scope, &body).status());
        STRATA_ASSIGN_OR_RETURN(Value v,
                                ApplyPlaceholderFilter(*s.filter, Value::String(body), scope));
        *out += v.Str();
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, expr] : s.assignments) {
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
          STRATA_RETURN_IF_ERROR(Assign(target, v, inner));
        }
        return Exec(s.bodies[0], inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kGeneration:
        return Exec(s.bodies[0], scope, out);
    }
    return Flow::kNormal;
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

  Status ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out) {
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
    for (int64_t i = 0; i < n; ++i) {
      auto iteration = std::make_shared<Scope>(scope);
      STRATA_RETURN_IF_ERROR(Assign(s.target, items[i], iteration));
      DictData loop;
      loop.Set(Value::String("index"), Value::Int(i + 1));
      loop.Set(Value::String("index0"), Value::Int(i));
      loop.Set(Value::String("revindex"), Value::Int(n - i));
      loop.Set(Value::String("revindex0"), Value::Int(n - i - 1));
      loop.Set(Value::String("first"), Value::Bool(i == 0));
      loop.Set(Value::String("last"), Value::Bool(i == n - 1));
      loop.Set(Value::String("length"), Value::Int(n));
      loop.Set(Value::String("depth"), Value::Int(1));
      loop.Set(Value::String("depth0"), Value::Int(0));
      loop.Set(Value::String("previtem"),
               i > 0 ? items[i - 1] : Value::Undefined("there is no previous item"));
      loop.Set(Value::String("nextitem"),
               i + 1 < n ? items[i + 1] : Value::Undefined("there is no next item"));
      loop.Set(Value::String("cycle"),
               Value::Function("cycle", [i](CallArgs& a) -> StatusOr<Value> {
                 if (a.positional.empty()) return TypeError("no items for cycling given");
                 return a.positional[i % a.positional.size()];
               }));
      loop.Set(Value::String("changed"),
               Value::Function("changed", [last_changed](CallArgs& a) -> StatusOr<Value> {
                 Value now = Value::List(a.positional, true);
                 if (*last_changed && (*last_changed)->Equals(now)) return Value::Bool(false);
                 *last_changed = now;
                 return Value::Bool(true);
               }));
      iteration->Set("loop", Value::Dict(std::move(loop)));
      STRATA_ASSIGN_OR_RETURN(Flow flow, Exec(s.bodies[0], iteration, out));
      if (flow == Flow::kBreak) break;
    }
    if (n == 0 && s.bodies.size() > 1) {
      auto else_scope = std::make_shared<Scope>(scope);
      STRATA_RETURN_IF_ERROR(Exec(s.bodies[1], else_scope, out).status());
    }
    return OkStatus();
  }

  Value MakeMacro(const Stmt& s, std::shared_ptr<Scope> defining, const std::string& name) {
    const Stmt* stmt = &s;
    return Value::Function(name, [this, stmt, defining, name](CallArgs& args) -> StatusOr<Value> {
      if (depth_ >= kMaxCallDepth) return TypeError("maximum recursion depth exceeded");
      auto scope = std::make_shared<Scope>(defining);
      const auto& params = stmt->params;
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
      ++depth_;
      auto flow = Exec(stmt->bodies[0], scope, &out);
      --depth_;
      STRATA_RETURN_IF_ERROR(flow.status());
      return Value::String(out);
    });
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
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const auto& a : e.args) {
          STRATA_ASSIGN_OR_RETURN(Value v, Eval(*a, scope));
          items.push_back(std::move(v));
        }
        return Value::List(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
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
      case ExprKind::kGetattr: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        return GetAttribute(obj, e.name);
      }
      case ExprKind::kGetitem: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        STRATA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[1], scope));
        return GetItem(obj, key);
      }
      case ExprKind::kSlice: {
        STRATA_ASSIGN_OR_RETURN(Value obj, Eval(*e.args[0], scope));
        Value parts[3] = {Value::None(), Value::None(), Value::None()};
        for (int i = 0; i < 3; ++i) {
          if (e.args[i + 1]) {
            STRATA_ASSIGN_OR_RETURN(parts[i], Eval(*e.args[i + 1], scope));
          }
        }
        return GetSlice(obj, parts[0], parts[1], parts[2]);
      }
      case ExprKind::kCall: {
        STRATA_ASSIGN_OR_RETURN(Value callee, Eval(*e.args[0], scope));
        CallArgs args;
        STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
        return CallValue(callee, args);
      }
      case ExprKind::kFilter: {
        STRATA_ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
        CallArgs args;
        STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
        return ApplyFilter(e.name, operand, args);
      }
      case ExprKind::kTest: {
        STRATA_ASSIGN_OR_RETURN(Value operand, Eval(*e.args[0], scope));
        CallArgs args;
        STRATA_RETURN_IF_ERROR(EvalArgs(e, 1, scope, &args));
        STRATA_ASSIGN_OR_RETURN(bool r, ApplyTest(e.name, operand, args));
        return Value::Bool(r != e.negated);
      }
      case ExprKind::kNot: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        return Value::Bool(!v.Truthy());
      }
      case ExprKind::kNeg:
      case ExprKind::kPos: {
        STRATA_ASSIGN_OR_RETURN(Value v, Eval(*e.args[0], scope));
        if (v.is_undefined()) return UndefinedError(v);
        if (!v.is_number()) {
          return TypeError(absl::StrCat("bad operand type for unary ",
                                        e.kind == ExprKind::kNeg ? "-" : "+", ": '", v.TypeName(),
                                        "'"));
        }
        if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::Int(v.as_int()) : v;
        return v.is_float() ? Value::Float(-v.as_double()) : Value::Int(-v.as_int());
      }
      case ExprKind::kBinary:
        return EvalBinary(e, scope);
      case ExprKind::kCompare: {
        STRATA_ASSIGN_OR_RETURN(Value left, Eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          STRATA_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i + 1], scope));
          STRATA_ASSIGN_OR_RETURN(bool r, Compare(e.ops[i], left, right));
          if (!r) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case ExprKind::kCondition: {
        STRATA_ASSIGN_OR_RETURN(Value c, Eval(*e.args[0], scope));
        if (c.Truthy()) return Eval(*e.args[1], scope);
        if (e.args[2]) return Eval(*e.args[2], scope);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined.");
      }
    }
    return TypeError("unknown expression");
  }

  StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b) {
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
        found = b.as_string().find(a.as_string()) != std::string::npos;
      } else if (b.is_dict()) {
        found = b.dict().Find(a) != nullptr;
      } else if (b.is_list() || b.is_undefined()) {
        found = false;
        if (b.is_list()) {
          for (const auto& x : b.list().items) found = found || x.Equals(a);
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

  StatusOr<Value> EvalBinary(const Expr& e, const std::shared_ptr<Scope>& scope) {
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
    if (op == "~") return Value::String(a.Str() + b.Str());
    if (a.is_undefined()) return UndefinedError(a);
    if (b.is_undefined()) return UndefinedError(b);
    auto unsupported = [&]() {
      if (op == "+" && a.is_string()) {
        return TypeError(
            absl::StrCat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
      }
      return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '", a.TypeName(),
                                    "' and '", b.TypeName(), "'"));
    };
    if (a.is_number() && b.is_number()) {
      bool ints = !a.is_float() && !b.is_float();
      int64_t x = a.as_int(), y = b.as_int();
      double fx = a.as_double(), fy = b.as_double();
      // Python ints are unbounded; results outside int64 are reported
      // rather than wrapped.
      const Status overflow = TypeError("integer overflow: result does not fit in 64 bits");
      int64_t r;
      if (op == "+") {
        if (!ints) return Value::Float(fx + fy);
        if (__builtin_add_overflow(x, y, &r)) return overflow;
        return Value::Int(r);
      }
      if (op == "-") {
        if (!ints) return Value::Float(fx - fy);
        if (__builtin_sub_overflow(x, y, &r)) return overflow;
        return Value::Int(r);
      }
      if (op == "*") {
        if (!ints) return Value::Float(fx * fy);
        if (__builtin_mul_overflow(x, y, &r)) return overflow;
        return Value::Int(r);
      }
      if (op == "/") {
        if (fy == 0) return TypeError("division by zero");
        return Value::Float(fx / fy);
      }
      if (op == "//" || op == "%") {
        if (fy == 0)
          return TypeError(ints ? "integer division or modulo by zero" : "float divmod()");
        if (ints) {
          int64_t q = x / y;
          if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
          return op == "//" ? Value::Int(q) : Value::Int(x - q * y);
        }
        double q = std::floor(fx / fy);
        if (op == "//") return Value::Float(q);
        double m = std::fmod(fx, fy);
        if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
        return Value::Float(m);
      }
      if (op == "**") {
        if (ints && y >= 0) {
          // Exponentiation by squaring with overflow checks.
          int64_t result = 1, base = x;
          for (int64_t e = y; e > 0; e >>= 1) {
            if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return overflow;
            if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow;
          }
          return Value::Int(result);
        }
        return Value::Float(std::pow(fx, fy));
      }
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value::String(a.as_string() + b.as_string());
      if (a.is_list() && b.is_list() && a.list().is_tuple == b.list().is_tuple) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return Value::List(std::move(items), a.list().is_tuple);
      }
    }
    if (op == "*") {
      const Value* seq = (a.is_string() || a.is_list())   ? &a
                         : (b.is_string() || b.is_list()) ? &b
                                                          : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq && (count->is_int() || count->is_bool())) {
        int64_t n = std::max<int64_t>(0, count->as_int());
        // Guard against templates that would allocate without bound.
        constexpr int64_t kMaxRepeatBytes = int64_t{1} << 28;
        int64_t unit = seq->is_string() ? static_cast<int64_t>(seq->as_string().size())
                                        : static_cast<int64_t>(seq->list().items.size()) * 16;
        if (unit > 0 && n > kMaxRepeatBytes / unit) return TypeError("repetition result too large");
        if (seq->is_string()) {
          std::string out;
          for (int64_t i = 0; i < n; ++i) out += seq->as_string();
          return Value::String(out);
        }
        std::vector<Value> items;
        for (int64_t i = 0; i < n; ++i) {
          items.insert(items.end(), seq->list().items.begin(), seq->list().items.end());
        }
        return Value::List(std::move(items), seq->list().is_tuple);
      }
    }
    if (op == "%" && a.is_string()) {
      CallArgs args;
      args.positional.push_back(b);
      return ApplyFilter("format", a, args);
    }
    return unsupported();
  }

  const std::string& label_;
  int depth_ = 0;
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
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    // The sandbox caps ranges (MAX_RANGE in jinja2/sandbox.py).
    if (items.size() >= 100000)
      return TypeError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    items.push_back(Value::Int(i));
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

StatusOr<std::string> RenderTemplate(const StmtList& body, const std::string& label,
                                     std::shared_ptr<Scope> scope) {
  Evaluator evaluator(label);
  std::string out;
  auto flow = evaluator.Exec(body, scope, &out);
  if (!flow.ok()) {
    // Drop the internal payload: callers see a plain InvalidArgument.
    return absl::InvalidArgumentError(flow.status().message());
  }
  return out;
}

}  // namespace strata::jinja
