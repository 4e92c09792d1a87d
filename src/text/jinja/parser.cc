// Recursive-descent parser mirroring jinja2/parser.py.
#include "text/jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/stack_guard.h"
#include "text/jinja/filters.h"

namespace strata::jinja {
namespace {

std::string Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kText:
      return "template data";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEnd:
      return "end of template";
    case TokenType::kString:
      return "string";
    default:
      return "'" + t.value + "'";
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& label)
      : tokens_(tokens), label_(label) {}

  StatusOr<StmtList> ParseTemplate() {
    std::string end;
    STRATA_ASSIGN_OR_RETURN(StmtList body, ParseBody({}, &end));
    if (Peek().type != TokenType::kEnd) return Error(Peek(), "unexpected token");
    return body;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& Next() {
    const Token& t = Peek();
    if (pos_ < tokens_.size() - 1) ++pos_;
    return t;
  }
  bool IsOp(const char* op, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kOperator && Peek(ahead).value == op;
  }
  bool IsName(const char* name, size_t ahead = 0) const {
    return Peek(ahead).type == TokenType::kName && Peek(ahead).value == name;
  }
  Status Error(const Token& t, const std::string& message) const {
    return LocatedError(label_, t.line, t.column, message);
  }
  Status Expect(TokenType type, const char* what) {
    if (Peek().type != type) {
      return Error(Peek(), absl::StrCat("expected token '", what, "', got ", Describe(Peek())));
    }
    Next();
    return OkStatus();
  }
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) {
      return Error(Peek(), absl::StrCat("expected token '", op, "', got ", Describe(Peek())));
    }
    Next();
    return OkStatus();
  }
  Status ExpectName(const char* name) {
    if (!IsName(name)) {
      return Error(Peek(), absl::StrCat("expected token '", name, "', got ", Describe(Peek())));
    }
    Next();
    return OkStatus();
  }
  Status ExpectBlockEnd() { return Expect(TokenType::kBlockEnd, "end of statement block"); }

  // One level of nested parsing (a block, a sub-expression, a prefix
  // operator) for the scope of the object.
  struct Nested {
    explicit Nested(int* n) : n(n) { ++*n; }
    ~Nested() { --*n; }
    int* n;
  };
  // Checked before recursing: refuses nesting past limits::kMaxTemplateNesting,
  // or deeper than the calling thread's stack allows.
  Status CheckNesting(const Token& at) const {
    if (nesting_ > limits::kMaxTemplateNesting) {
      return Error(
          at, absl::StrCat("template nested deeper than ", limits::kMaxTemplateNesting, " levels"));
    }
    if (!stack_.HasRoom()) return Error(at, "template nested too deeply for this thread's stack");
    return OkStatus();
  }

  ExprPtr MakeExpr(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  std::unique_ptr<Stmt> MakeStmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Parses statements until a block tag whose name is in `ends`; leaves the
  // position after that name and stores it in *end. Empty `ends`: to EOF.
  StatusOr<StmtList> ParseBody(const std::set<std::string>& ends, std::string* end) {
    StmtList body;
    while (true) {
      const Token& t = Peek();
      if (t.type == TokenType::kEnd) {
        if (ends.empty()) return body;
        return Error(t, absl::StrCat("unexpected end of template, expected '", *ends.begin(), "'"));
      }
      if (t.type == TokenType::kText) {
        auto s = MakeStmt(StmtKind::kText, t);
        s->text = t.value;
        Next();
        body.push_back(std::move(s));
        continue;
      }
      if (t.type == TokenType::kVariableBegin) {
        auto s = MakeStmt(StmtKind::kOutput, t);
        Next();
        STRATA_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, {}));
        STRATA_RETURN_IF_ERROR(Expect(TokenType::kVariableEnd, "end of print statement"));
        body.push_back(std::move(s));
        continue;
      }
      if (t.type != TokenType::kBlockBegin) return Error(t, "unexpected " + Describe(t));
      const Token& name = Peek(1);
      if (name.type != TokenType::kName) return Error(name, "tag name expected");
      if (ends.count(name.value)) {
        Next();
        Next();
        *end = name.value;
        return body;
      }
      Next();
      STRATA_ASSIGN_OR_RETURN(auto stmt, ParseStatement());
      body.push_back(std::move(stmt));
    }
  }

  StatusOr<std::unique_ptr<Stmt>> ParseStatement() {
    const Token& t = Next();
    Nested nested(&nesting_);
    STRATA_RETURN_IF_ERROR(CheckNesting(t));
    const std::string& n = t.value;
    if (n == "if") return ParseIf(t);
    if (n == "for") return ParseFor(t);
    if (n == "set") return ParseSet(t);
    if (n == "macro") return ParseMacro(t);
    if (n == "call") return ParseCallBlock(t);
    if (n == "filter") return ParseFilterBlock(t);
    if (n == "with") return ParseWith(t);
    if (n == "break" || n == "continue") {
      auto s = MakeStmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (n == "generation") {
      auto s = MakeStmt(StmtKind::kGeneration, t);
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      s->bodies.emplace_back();
      STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endgeneration"}, &end));
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    return Error(t, absl::StrCat("Encountered unknown tag '", n, "'."));
  }

  StatusOr<std::unique_ptr<Stmt>> ParseIf(const Token& t) {
    auto s = MakeStmt(StmtKind::kIf, t);
    while (true) {
      STRATA_ASSIGN_OR_RETURN(auto cond, ParseTuple(false, {}));
      s->conditions.push_back(std::move(cond));
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      std::string end;
      STRATA_ASSIGN_OR_RETURN(auto body, ParseBody({"elif", "else", "endif"}, &end));
      s->bodies.push_back(std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
        STRATA_ASSIGN_OR_RETURN(auto else_body, ParseBody({"endif"}, &end));
        s->bodies.push_back(std::move(else_body));
      }
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
  }

  // Assignment target: name, tuple of names, or (with_namespace) name.attr.
  StatusOr<Target> ParseTarget(bool with_namespace) {
    Target target;
    if (with_namespace && Peek().type == TokenType::kName && IsOp(".", 1) &&
        Peek(2).type == TokenType::kName) {
      target.names.push_back(Next().value);
      Next();
      target.attribute = Next().value;
      return target;
    }
    bool paren = IsOp("(");
    if (paren) Next();
    while (true) {
      if (Peek().type != TokenType::kName) {
        return Error(Peek(), absl::StrCat("can't assign to ", Describe(Peek())));
      }
      target.names.push_back(Next().value);
      if (!IsOp(",")) break;
      target.is_tuple = true;
      Next();
      if (Peek().type != TokenType::kName) break;
    }
    if (paren) STRATA_RETURN_IF_ERROR(ExpectOp(")"));
    return target;
  }

  StatusOr<std::unique_ptr<Stmt>> ParseFor(const Token& t) {
    auto s = MakeStmt(StmtKind::kFor, t);
    STRATA_ASSIGN_OR_RETURN(s->target, ParseTarget(false));
    STRATA_RETURN_IF_ERROR(ExpectName("in"));
    STRATA_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, {"recursive"}));
    if (IsName("if")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(s->filter, ParseExpression(true));
    }
    if (IsName("recursive")) {
      Next();
      s->recursive = true;
    }
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    STRATA_ASSIGN_OR_RETURN(auto body, ParseBody({"endfor", "else"}, &end));
    s->bodies.push_back(std::move(body));
    if (end == "else") {
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      STRATA_ASSIGN_OR_RETURN(auto else_body, ParseBody({"endfor"}, &end));
      s->bodies.push_back(std::move(else_body));
    }
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  StatusOr<std::unique_ptr<Stmt>> ParseSet(const Token& t) {
    auto s = MakeStmt(StmtKind::kSet, t);
    STRATA_ASSIGN_OR_RETURN(s->target, ParseTarget(true));
    if (IsOp("=")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, {}));
      STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (IsOp("|")) {
      auto placeholder = MakeExpr(ExprKind::kName, Peek());
      STRATA_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(std::move(placeholder)));
    }
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    s->bodies.emplace_back();
    STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endset"}, &end));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  Status ParseParams(std::vector<Param>* params) {
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!params->empty()) STRATA_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      if (Peek().type != TokenType::kName) return Error(Peek(), "expected parameter name");
      Param p;
      p.name = Next().value;
      if (IsOp("=")) {
        Next();
        STRATA_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      }
      params->push_back(std::move(p));
    }
    Next();
    return OkStatus();
  }

  StatusOr<std::unique_ptr<Stmt>> ParseMacro(const Token& t) {
    auto s = MakeStmt(StmtKind::kMacro, t);
    if (Peek().type != TokenType::kName) return Error(Peek(), "expected macro name");
    s->text = Next().value;
    STRATA_RETURN_IF_ERROR(ParseParams(&s->params));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    s->bodies.emplace_back();
    STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endmacro"}, &end));
    if (Peek().type == TokenType::kName) Next();  // optional "endmacro name"
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(const Token& t) {
    auto s = MakeStmt(StmtKind::kCallBlock, t);
    if (IsOp("(")) STRATA_RETURN_IF_ERROR(ParseParams(&s->params));
    STRATA_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != ExprKind::kCall) return Error(t, "expected call");
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    s->bodies.emplace_back();
    STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endcall"}, &end));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  StatusOr<std::unique_ptr<Stmt>> ParseFilterBlock(const Token& t) {
    auto s = MakeStmt(StmtKind::kFilterBlock, t);
    auto placeholder = MakeExpr(ExprKind::kName, Peek());
    // The filter chain starts without a leading "|".
    STRATA_ASSIGN_OR_RETURN(auto first, ParseOneFilter(std::move(placeholder)));
    STRATA_ASSIGN_OR_RETURN(s->filter, ParseFilterChain(std::move(first)));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    s->bodies.emplace_back();
    STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endfilter"}, &end));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  StatusOr<std::unique_ptr<Stmt>> ParseWith(const Token& t) {
    auto s = MakeStmt(StmtKind::kWith, t);
    while (Peek().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) STRATA_RETURN_IF_ERROR(ExpectOp(","));
      STRATA_ASSIGN_OR_RETURN(Target target, ParseTarget(false));
      STRATA_RETURN_IF_ERROR(ExpectOp("="));
      STRATA_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
      s->assignments.emplace_back(std::move(target), std::move(value));
    }
    Next();
    std::string end;
    s->bodies.emplace_back();
    STRATA_ASSIGN_OR_RETURN(s->bodies[0], ParseBody({"endwith"}, &end));
    STRATA_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // ---- Expressions ----

  // Finishes a node: records the depth of its tree and refuses trees deeper
  // than limits::kMaxTemplateExprDepth. Loops (`a.b.c`, `x | f | g`,
  // `1 + 2 + 3`) build deep trees without deep parsing, and everything that
  // walks the tree later (the name check, evaluation, destruction) recurses.
  StatusOr<ExprPtr> Seal(ExprPtr e) {
    int deepest = 0;
    for (const auto& a : e->args) {
      if (a) deepest = std::max(deepest, a->depth);
    }
    for (const auto& kv : e->kwargs) deepest = std::max(deepest, kv.second->depth);
    e->depth = deepest + 1;
    if (e->depth > limits::kMaxTemplateExprDepth) {
      return LocatedError(
          label_, e->line, e->column,
          absl::StrCat("expression nested deeper than ", limits::kMaxTemplateExprDepth, " levels"));
    }
    return e;
  }

  bool AtTupleEnd(const std::set<std::string>& extra_end) const {
    const Token& t = Peek();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
        t.type == TokenType::kEnd) {
      return true;
    }
    if (t.type == TokenType::kOperator && (t.value == ")" || t.value == "]")) return true;
    return t.type == TokenType::kName && (t.value == "in" || extra_end.count(t.value) > 0);
  }

  // Comma-separated expressions; a trailing or inner comma makes a tuple.
  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, const std::set<std::string>& extra_end) {
    const Token& start = Peek();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) {
        if (!IsOp(",")) break;
        Next();
        is_tuple = true;
        if (AtTupleEnd(extra_end)) break;
      }
      STRATA_ASSIGN_OR_RETURN(auto e, ParseExpression(with_condexpr));
      items.push_back(std::move(e));
    }
    if (!is_tuple) return std::move(items[0]);
    auto t = MakeExpr(ExprKind::kTuple, start);
    t->args = std::move(items);
    return Seal(std::move(t));
  }

  StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    const Token& start = Peek();
    Nested nested(&nesting_);
    STRATA_RETURN_IF_ERROR(CheckNesting(start));
    if (!with_condexpr) return ParseBinary(kOrLevel);
    STRATA_ASSIGN_OR_RETURN(auto expr, ParseBinary(kOrLevel));
    while (IsName("if")) {
      Next();
      auto cond = MakeExpr(ExprKind::kCondition, start);
      STRATA_ASSIGN_OR_RETURN(auto test, ParseBinary(kOrLevel));
      ExprPtr else_expr;
      if (IsName("else")) {
        Next();
        STRATA_ASSIGN_OR_RETURN(else_expr, ParseExpression(true));
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(else_expr));
      STRATA_ASSIGN_OR_RETURN(expr, Seal(std::move(cond)));
    }
    return expr;
  }

  // jinja2's parse_or ... parse_pow, loosest first. `not` (a prefix) and the
  // comparisons (a chain) sit between `and` and `+`.
  static constexpr int kOrLevel = 0;
  static constexpr int kAndLevel = 1;
  static constexpr int kNotLevel = 2;
  static constexpr int kCompareLevel = 3;
  static constexpr int kAddLevel = 4;
  static constexpr int kConcatLevel = 5;
  static constexpr int kMulLevel = 6;
  static constexpr int kPowLevel = 7;

  // The left-associative binary operator at the current token and its level,
  // or -1.
  int BinaryOperatorLevel() const {
    const Token& t = Peek();
    if (t.type == TokenType::kName) {
      if (t.value == "or") return kOrLevel;
      if (t.value == "and") return kAndLevel;
      return -1;
    }
    if (t.type != TokenType::kOperator) return -1;
    const std::string& v = t.value;
    if (v == "+" || v == "-") return kAddLevel;
    if (v == "~") return kConcatLevel;
    if (v == "*" || v == "/" || v == "//" || v == "%") return kMulLevel;
    if (v == "**") return kPowLevel;
    return -1;
  }

  // The comparison at the current token ("==", ..., "in", "notin"), or "".
  std::string CompareOperator() const {
    const Token& t = Peek();
    if (t.type == TokenType::kOperator && (t.value == "==" || t.value == "!=" || t.value == "<" ||
                                           t.value == ">" || t.value == "<=" || t.value == ">=")) {
      return t.value;
    }
    if (IsName("in")) return "in";
    if (IsName("not") && IsName("in", 1)) return "notin";
    return "";
  }

  // Operators of level >= min_level, by precedence climbing: one frame per
  // operand rather than one per level, so nested parentheses cost little stack.
  StatusOr<ExprPtr> ParseBinary(int min_level) {
    ExprPtr left;
    if (min_level <= kNotLevel && IsName("not")) {
      auto n = MakeExpr(ExprKind::kNot, Next());
      Nested nested(&nesting_);
      STRATA_RETURN_IF_ERROR(CheckNesting(Peek()));
      STRATA_ASSIGN_OR_RETURN(auto operand, ParseBinary(kNotLevel));
      n->args.push_back(std::move(operand));
      STRATA_ASSIGN_OR_RETURN(left, Seal(std::move(n)));
    } else {
      STRATA_ASSIGN_OR_RETURN(left, ParseUnary(true));
    }
    while (true) {
      if (min_level <= kCompareLevel && !CompareOperator().empty()) {
        auto cmp = MakeExpr(ExprKind::kCompare, Peek());
        cmp->line = left->line;
        cmp->column = left->column;
        cmp->args.push_back(std::move(left));
        for (std::string op = CompareOperator(); !op.empty(); op = CompareOperator()) {
          Next();
          if (op == "notin") Next();
          STRATA_ASSIGN_OR_RETURN(auto operand, ParseBinary(kAddLevel));
          cmp->ops.push_back(op);
          cmp->args.push_back(std::move(operand));
        }
        STRATA_ASSIGN_OR_RETURN(left, Seal(std::move(cmp)));
        continue;
      }
      const int level = BinaryOperatorLevel();
      if (level < min_level) return left;
      const Token& at = Next();
      STRATA_ASSIGN_OR_RETURN(auto right, ParseBinary(level + 1));
      auto b = MakeExpr(ExprKind::kBinary, at);
      b->line = left->line;
      b->column = left->column;
      b->name = at.value;
      b->args.push_back(std::move(left));
      b->args.push_back(std::move(right));
      STRATA_ASSIGN_OR_RETURN(left, Seal(std::move(b)));
    }
  }

  StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      auto n = MakeExpr(IsOp("-") ? ExprKind::kNeg : ExprKind::kPos, Peek());
      Next();
      Nested nested(&nesting_);
      STRATA_RETURN_IF_ERROR(CheckNesting(Peek()));
      STRATA_ASSIGN_OR_RETURN(auto operand, ParseUnary(false));
      n->args.push_back(std::move(operand));
      STRATA_ASSIGN_OR_RETURN(node, Seal(std::move(n)));
    } else {
      STRATA_ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    STRATA_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      STRATA_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  // An integer literal's value; out of int64 is an error (Python's ints are
  // unbounded, ours are not).
  StatusOr<int64_t> IntegerLiteral(const Token& t) const {
    int64_t v = 0;
    const char* end = t.value.data() + t.value.size();
    auto [ptr, ec] = std::from_chars(t.value.data(), end, v);
    if (ec != std::errc() || ptr != end) {
      return Error(t, absl::StrCat("integer literal ", t.value, " does not fit in 64 bits"));
    }
    return v;
  }

  StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.type) {
      case TokenType::kName: {
        Next();
        auto e = MakeExpr(ExprKind::kLiteral, t);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value::Bool(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value::Bool(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.value;
        }
        return e;
      }
      case TokenType::kString: {
        auto e = MakeExpr(ExprKind::kLiteral, t);
        std::string s;
        while (Peek().type == TokenType::kString) s += Next().value;
        e->literal = Value::String(std::move(s));
        return e;
      }
      case TokenType::kInteger: {
        Next();
        auto e = MakeExpr(ExprKind::kLiteral, t);
        STRATA_ASSIGN_OR_RETURN(int64_t v, IntegerLiteral(t));
        e->literal = Value::Int(v);
        return e;
      }
      case TokenType::kFloat: {
        Next();
        auto e = MakeExpr(ExprKind::kLiteral, t);
        // strtod, not stod: out-of-range literals are inf or 0 as in Python,
        // not an exception.
        e->literal = Value::Float(std::strtod(t.value.c_str(), nullptr));
        return e;
      }
      case TokenType::kOperator:
        if (t.value == "(") {
          Next();
          if (IsOp(")")) {
            Next();
            return MakeExpr(ExprKind::kTuple, t);
          }
          STRATA_ASSIGN_OR_RETURN(auto inner, ParseTuple(true, {}));
          STRATA_RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t.value == "[") {
          Next();
          auto e = MakeExpr(ExprKind::kList, t);
          while (!IsOp("]")) {
            if (!e->args.empty()) STRATA_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            STRATA_ASSIGN_OR_RETURN(auto item, ParseExpression(true));
            e->args.push_back(std::move(item));
          }
          Next();
          return Seal(std::move(e));
        }
        if (t.value == "{") {
          Next();
          auto e = MakeExpr(ExprKind::kDict, t);
          while (!IsOp("}")) {
            if (!e->args.empty()) STRATA_RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            STRATA_ASSIGN_OR_RETURN(auto key, ParseExpression(true));
            STRATA_RETURN_IF_ERROR(ExpectOp(":"));
            STRATA_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
            e->args.push_back(std::move(key));
            e->args.push_back(std::move(value));
          }
          Next();
          return Seal(std::move(e));
        }
        break;
      default:
        break;
    }
    return Error(t, absl::StrCat("unexpected ", Describe(t)));
  }

  StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".")) {
        const Token& dot = Next();
        const Token& t = Next();
        if (t.type == TokenType::kName) {
          auto e = MakeExpr(ExprKind::kGetattr, dot);
          e->name = t.value;
          e->args.push_back(std::move(node));
          STRATA_ASSIGN_OR_RETURN(node, Seal(std::move(e)));
        } else if (t.type == TokenType::kInteger) {
          auto e = MakeExpr(ExprKind::kGetitem, dot);
          auto index = MakeExpr(ExprKind::kLiteral, t);
          STRATA_ASSIGN_OR_RETURN(int64_t v, IntegerLiteral(t));
          index->literal = Value::Int(v);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(index));
          STRATA_ASSIGN_OR_RETURN(node, Seal(std::move(e)));
        } else {
          return Error(t, "expected name or number");
        }
      } else if (IsOp("[")) {
        STRATA_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
      } else if (IsOp("(")) {
        STRATA_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const Token& open = Next();
    std::vector<ExprPtr> parts(3);
    int colons = 0;
    bool any = false;
    while (!IsOp("]")) {
      if (IsOp(":")) {
        Next();
        if (++colons > 2) return Error(Peek(), "invalid slice");
        continue;
      }
      if (IsOp(",")) return Error(Peek(), "tuple subscripts are not supported");
      STRATA_ASSIGN_OR_RETURN(parts[colons], ParseExpression(true));
      any = true;
    }
    Next();
    if (colons == 0) {
      if (!any) return Error(open, "expected subscript");
      auto e = MakeExpr(ExprKind::kGetitem, open);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return Seal(std::move(e));
    }
    auto e = MakeExpr(ExprKind::kSlice, open);
    e->args.push_back(std::move(node));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return Seal(std::move(e));
  }

  // Parses "(args, name=value)" into e->args (after any existing) and e->kwargs.
  Status ParseArgs(Expr* e) {
    STRATA_RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) STRATA_RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (Peek().type == TokenType::kName && IsOp("=", 1)) {
        std::string name = Next().value;
        Next();
        STRATA_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
        e->kwargs.emplace_back(std::move(name), std::move(value));
      } else {
        if (!e->kwargs.empty())
          return Error(Peek(), "positional argument follows keyword argument");
        STRATA_ASSIGN_OR_RETURN(auto value, ParseExpression(true));
        e->args.push_back(std::move(value));
      }
    }
    Next();
    return OkStatus();
  }

  StatusOr<ExprPtr> ParseCall(ExprPtr node) {
    auto e = MakeExpr(ExprKind::kCall, Peek());
    e->line = node->line;
    e->column = node->column;
    e->args.push_back(std::move(node));
    STRATA_RETURN_IF_ERROR(ParseArgs(e.get()));
    return Seal(std::move(e));
  }

  StatusOr<ExprPtr> ParseOneFilter(ExprPtr node) {
    const Token& t = Peek();
    if (t.type != TokenType::kName) return Error(t, "expected filter name");
    Next();
    auto e = MakeExpr(ExprKind::kFilter, t);
    e->name = t.value;
    while (IsOp(".") && Peek(1).type == TokenType::kName) {
      Next();
      e->name += "." + Next().value;
    }
    e->args.push_back(std::move(node));
    if (IsOp("(")) STRATA_RETURN_IF_ERROR(ParseArgs(e.get()));
    return Seal(std::move(e));
  }

  StatusOr<ExprPtr> ParseFilterChain(ExprPtr node) {
    while (IsOp("|")) {
      Next();
      STRATA_ASSIGN_OR_RETURN(node, ParseOneFilter(std::move(node)));
    }
    return node;
  }

  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        STRATA_ASSIGN_OR_RETURN(node, ParseOneFilter(std::move(node)));
      } else if (IsName("is")) {
        STRATA_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        STRATA_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    const Token& is = Next();
    auto e = MakeExpr(ExprKind::kTest, is);
    if (IsName("not")) {
      Next();
      e->negated = true;
    }
    const Token& name = Peek();
    if (name.type != TokenType::kName) return Error(name, "expected test name");
    Next();
    e->name = name.value;
    while (IsOp(".") && Peek(1).type == TokenType::kName) {
      Next();
      e->name += "." + Next().value;
    }
    e->args.push_back(std::move(node));
    const Token& t = Peek();
    if (IsOp("(")) {
      STRATA_RETURN_IF_ERROR(ParseArgs(e.get()));
    } else if ((t.type == TokenType::kName && t.value != "else" && t.value != "or" &&
                t.value != "and") ||
               t.type == TokenType::kString || t.type == TokenType::kInteger ||
               t.type == TokenType::kFloat || IsOp("[") || IsOp("{")) {
      if (IsName("is")) return Error(t, "You cannot chain multiple tests with is");
      STRATA_ASSIGN_OR_RETURN(auto arg, ParsePrimary());
      STRATA_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return Seal(std::move(e));
  }

  const std::vector<Token>& tokens_;
  const std::string& label_;
  size_t pos_ = 0;
  int nesting_ = 0;
  StackGuard stack_;
};

// jinja2 rejects unknown filters and tests when compiling, except inside an
// `if` (test and branches) or a conditional expression ("soft" frames), where
// the error waits until the call runs. Loop, macro, call, with and filter
// bodies open new frames, which are never soft.
class NameChecker {
 public:
  explicit NameChecker(const std::string& label) : label_(label) {}

  Status Check(const StmtList& body, bool soft) {
    for (const auto& s : body) STRATA_RETURN_IF_ERROR(CheckStmt(*s, soft));
    return OkStatus();
  }

 private:
  Status CheckStmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kIf:
        for (const auto& c : s.conditions) STRATA_RETURN_IF_ERROR(CheckExpr(c.get(), true));
        for (const auto& b : s.bodies) STRATA_RETURN_IF_ERROR(Check(b, true));
        return OkStatus();
      case StmtKind::kFor:
        STRATA_RETURN_IF_ERROR(CheckExpr(s.expr.get(), soft));
        STRATA_RETURN_IF_ERROR(CheckExpr(s.filter.get(), false));
        for (const auto& b : s.bodies) STRATA_RETURN_IF_ERROR(Check(b, false));
        return OkStatus();
      case StmtKind::kSetBlock:
        STRATA_RETURN_IF_ERROR(CheckExpr(s.filter.get(), soft));
        return Check(s.bodies[0], soft);
      case StmtKind::kMacro:
        for (const auto& p : s.params)
          STRATA_RETURN_IF_ERROR(CheckExpr(p.default_value.get(), false));
        return Check(s.bodies[0], false);
      case StmtKind::kCallBlock:
        STRATA_RETURN_IF_ERROR(CheckExpr(s.expr.get(), soft));
        return Check(s.bodies[0], false);
      case StmtKind::kFilterBlock:
        STRATA_RETURN_IF_ERROR(CheckExpr(s.filter.get(), false));
        return Check(s.bodies[0], false);
      case StmtKind::kWith:
        for (const auto& [target, value] : s.assignments) {
          STRATA_RETURN_IF_ERROR(CheckExpr(value.get(), soft));
        }
        return Check(s.bodies[0], false);
      case StmtKind::kGeneration:
        return Check(s.bodies[0], false);
      default:
        return CheckExpr(s.expr.get(), soft);
    }
  }

  Status CheckExpr(const Expr* e, bool soft) {
    if (!e) return OkStatus();
    if (!soft && e->kind == ExprKind::kFilter && !HasFilter(e->name)) {
      return LocatedError(label_, e->line, e->column,
                          absl::StrCat("No filter named '", e->name, "'."));
    }
    if (!soft && e->kind == ExprKind::kTest && !HasTest(e->name)) {
      return LocatedError(label_, e->line, e->column,
                          absl::StrCat("No test named '", e->name, "'."));
    }
    bool child_soft = soft || e->kind == ExprKind::kCondition;
    for (const auto& a : e->args) STRATA_RETURN_IF_ERROR(CheckExpr(a.get(), child_soft));
    for (const auto& [k, v] : e->kwargs) STRATA_RETURN_IF_ERROR(CheckExpr(v.get(), child_soft));
    return OkStatus();
  }

  const std::string& label_;
};

}  // namespace

StatusOr<StmtList> Parse(const std::vector<Token>& tokens, const std::string& label) {
  Parser parser(tokens, label);
  STRATA_ASSIGN_OR_RETURN(StmtList body, parser.ParseTemplate());
  NameChecker checker(label);
  STRATA_RETURN_IF_ERROR(checker.Check(body, false));
  return body;
}

}  // namespace strata::jinja
