// AST of a parsed template: expressions and statements. Nodes carry the line
// and column of their first token for error messages.
#ifndef STRATA_TEXT_JINJA_AST_H_
#define STRATA_TEXT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace strata::jinja {

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // args
  kTuple,      // args
  kDict,       // args: key0, value0, key1, value1, ...
  kGetattr,    // args[0].name
  kGetitem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (null parts allowed)
  kCall,       // args[0](args[1:], kwargs)
  kFilter,     // args[0] | name(args[1:], kwargs)
  kTest,       // args[0] is [not] name(args[1:], kwargs); negated
  kNot,        // not args[0]
  kNeg,        // -args[0]
  kPos,        // +args[0]
  kBinary,     // args[0] <name> args[1]: + - * / // % ** ~ and or
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in notin
  kCondition,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  int depth = 1;  // of this node's tree; bounded by the parser
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
};

using ExprPtr = std::unique_ptr<Expr>;

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conditions[i] -> bodies[i]; bodies.back() is else when it has no condition
  kFor,          // for targets in expr [if filter]: bodies[0], else bodies[1]
  kSet,          // set target = expr
  kSetBlock,     // set target %}bodies[0]{% endset, optional filter expr applied
  kMacro,        // macro name(params) bodies[0]
  kCallBlock,    // call(params) expr: bodies[0] is the caller
  kFilterBlock,  // filter expr (operand is a placeholder name) applied to bodies[0]
  kWith,         // with assignments: bodies[0]
  kBreak,
  kContinue,
  kGeneration,  // transformers' {% generation %}: renders bodies[0] unchanged
};

// Target of set/for: a name, "ns.attr", or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  std::string attribute;           // non-empty for "name.attribute"
  bool is_tuple = false;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // for: loop filter; set block / filter block: the filter chain
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<StmtList> bodies;
  std::vector<Param> params;
  std::vector<std::pair<Target, ExprPtr>> assignments;
  bool recursive = false;
};

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_AST_H_
