#pragma once
// Syntax tree of octet's Jinja interpreter (the node kinds of jinja2 3.1 nodes.py that chat
// templates use). Built by jinja_parser.cpp, walked by jinja_interpreter.cpp.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/jinja/jinja_value.h"

namespace octet::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    Const,     // value
    Name,      // name
    List,      // children
    Tuple,     // children
    Dict,      // children: key0, value0, key1, value1 ...
    Getattr,   // children[0].name
    Getitem,   // children[0][children[1]]
    Slice,     // children: start, stop, step (null when absent)
    Call,      // children[0](children[1..], kwargs, *dyn_args, **dyn_kwargs)
    Filter,    // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
    Test,      // children[0] is [not] name(children[1..], kwargs); negated
    Unary,     // name in {"-", "+"}
    Binary,    // name in {"+", "-", "*", "/", "//", "%", "**", "~"}
    Compare,   // children[0] ops[0] children[1] ops[1] children[2] ...
    And,
    Or,
    Not,
    CondExpr,  // children: test, then, else (else may be null)
  };
  Type type;
  int line = 0;
  int depth = 1;  // of this subtree, at most kMaxParseDepth (jinja_budget.h)
  Value value;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

/// Assignment target: a name, a tuple of names, or a namespace attribute (ns.attr).
struct Target {
  std::vector<std::string> names;
  bool is_tuple = false;
  std::string ns_attr;  // non-empty: names[0].ns_attr
};

struct Stmt {
  enum class Type {
    Text,         // text
    Output,       // {{ expr }}
    If,           // branches (cond, body) ..., else_body
    For,          // for target in expr [if cond]: body else else_body
    Set,          // target = expr
    SetBlock,     // {% set target | filters %} body {% endset %}
    Macro,        // name(params): body
    CallBlock,    // {% call(params) expr %} body
    FilterBlock,  // {% filter filters %} body
    With,         // assigns; body
    Break,
    Continue,
    Scope,        // {% generation %} body (HF's assistant-mask tag renders its body)
  };
  Type type;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<MacroParam> params;
  std::vector<ExprPtr> filters;  // Filter nodes with children[0] == null
  std::vector<std::pair<std::string, ExprPtr>> assigns;
};

/// Parses a token stream (jinja_lexer.h) into statements; throws ChatTemplateError(Syntax).
Body parse_template(const std::string& source);

}  // namespace octet::jinja
