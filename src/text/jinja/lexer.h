// Lexer: splits template source into text and tag tokens, applying jinja2's
// whitespace control exactly as transformers configures it (trim_blocks,
// lstrip_blocks, "-"/"+" modifiers, one trailing newline dropped, \r\n -> \n).
#ifndef STRATA_TEXT_JINJA_LEXER_H_
#define STRATA_TEXT_JINJA_LEXER_H_

#include <string>
#include <vector>

#include "base/status.h"

namespace strata::jinja {

enum class TokenType {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // value holds the unescaped string
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenType type;
  std::string value;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Errors are InvalidArgument "<label>:<line>:<column>: message".
StatusOr<std::vector<Token>> Tokenize(const std::string& source, const std::string& label,
                                      const LexerOptions& options = {});

// "<label>:<line>:<column>: <message>" as InvalidArgument.
Status LocatedError(const std::string& label, int line, int column, const std::string& message);

}  // namespace strata::jinja

#endif  // STRATA_TEXT_JINJA_LEXER_H_
