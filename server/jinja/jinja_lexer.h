#pragma once
// Tokenizer of octet's Jinja interpreter: splits a template into text and the tokens inside
// {{ }} and {% %} tags, with the whitespace rules of transformers' chat-template environment
// (jinja2.Environment(trim_blocks=True, lstrip_blocks=True), keep_trailing_newline=False):
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" after it;
//   - trim_blocks: the first newline after "%}" or "#}" is removed ("+%}" keeps it);
//   - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or "{#" are removed
//     ("{%+" keeps them); "{{" is never lstripped;
//   - "\r\n" and "\r" become "\n"; one trailing newline of the template is dropped;
//   - {# comments #} vanish; {% raw %}...{% endraw %} is text.
// Reference: jinja2 3.1 lexer.py (Lexer.tokeniter).
#include <cstdint>
#include <string>
#include <vector>

#include "server/jinja/jinja_value.h"

namespace octet::jinja {

enum class Tok : std::uint8_t {
  Text,
  VarBegin,
  VarEnd,
  BlockBegin,
  BlockEnd,
  Name,
  String,
  Int,
  Float,
  Op,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  Eof,
};

struct Token {
  Tok type;
  std::string text;  // Text data, Name, unescaped String, Op
  Value value;       // Int / Float value
  int line;
};

/// Throws ChatTemplateError(Syntax) on an unterminated tag, comment or string, or a stray char.
std::vector<Token> tokenize(const std::string& source);

}  // namespace octet::jinja
