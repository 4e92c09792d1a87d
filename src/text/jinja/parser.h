// Parser: tokens -> statement list, following jinja2/parser.py's grammar and
// operator precedence (filters and tests bind tighter than arithmetic, `not`
// looser than comparisons, `for ... if` filters instead of conditionals).
#ifndef STRATA_TEXT_JINJA_PARSER_H_
#define STRATA_TEXT_JINJA_PARSER_H_

#include <string>
#include <vector>

#include "base/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace strata::jinja {

// Errors are InvalidArgument "<label>:<line>:<column>: message".
StatusOr<StmtList> Parse(const std::vector<Token>& tokens, const std::string& label);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_PARSER_H_
