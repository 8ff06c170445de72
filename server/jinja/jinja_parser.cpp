// Recursive-descent parser with jinja2 3.1's grammar and precedence (parser.py):
//   condexpr: or ('if' or ('else' condexpr)?)*
//   or: and ('or' and)*      and: not ('and' not)*      not: 'not' not | compare
//   compare: math1 (('=='|'!='|'<'|'<='|'>'|'>='|'in'|'not' 'in') math1)*
//   math1: concat (('+'|'-') concat)*     concat: math2 ('~' math2)*
//   math2: pow (('*'|'/'|'//'|'%') pow)*  pow: unary ('**' unary)*   (left-associative, as jinja2)
//   unary: ('-'|'+') unary_nofilter | primary postfix* ('|' filter | 'is' test | call)*
//
// Depth: each block, expression, unary operator and `not` the parser recurses into takes one unit
// of depth_ (at most kMaxParseDepth), and every expression node records the depth of its
// subtree (at most kMaxParseDepth too, so long operator, attribute and filter chains count), so
// the recursion that parses, renders and destroys a template stays shallow.
#include <algorithm>
#include <set>

#include "server/jinja/jinja_ast.h"
#include "server/jinja/jinja_budget.h"
#include "server/jinja/jinja_lexer.h"

namespace octet::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail_here("unexpected end tag");
    return body;
  }

 private:
  std::vector<Token> t_;
  std::size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;

  // Takes one unit of nesting depth; throws ChatTemplateError(Limit) past kMaxParseDepth.
  void deeper() {
    if (++depth_ > kMaxParseDepth)
      throw ChatTemplateError(ChatTemplateError::Kind::Limit,
                              "template nesting exceeds the chat template limit of " +
                                  std::to_string(kMaxParseDepth) + " levels",
                              cur().line);
  }
  // A nested level: one unit of depth, given back (with its chain links) when it ends.
  class Level {
   public:
    explicit Level(Parser& p) : p_(p), saved_(p.depth_) { p.deeper(); }
    ~Level() { p_.depth_ = saved_; }
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;

   private:
    Parser& p_;
    int saved_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Text: return "template data";
      case Tok::VarBegin: return "begin of print statement";
      case Tok::VarEnd: return "end of print statement";
      case Tok::BlockBegin: return "begin of statement block";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::Eof: return "end of template";
      case Tok::String: return "string";
      case Tok::Int: return "integer";
      case Tok::Float: return "float";
      default: return "'" + t.text + "'";
    }
  }

  [[noreturn]] void fail_here(const std::string& message) const {
    throw ChatTemplateError(ChatTemplateError::Kind::Syntax, message, cur().line);
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail_here(std::string("expected ") + what + ", got " + describe(cur()));
    next();
  }
  void expect_block_end() { expect(Tok::BlockEnd, "end of statement block"); }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_here("expected name, got " + describe(cur()));
    return next().text;
  }

  ExprPtr node(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  // Records e's subtree depth from its (finished) children; throws past kMaxParseDepth.
  ExprPtr fin(ExprPtr e) {
    int d = 0;
    auto see = [&d](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    for (const auto& c : e->children) see(c);
    for (const auto& kv : e->kwargs) see(kv.second);
    see(e->dyn_args);
    see(e->dyn_kwargs);
    e->depth = d + 1;
    if (e->depth > kMaxParseDepth)
      throw ChatTemplateError(ChatTemplateError::Kind::Limit,
                              "expression nesting exceeds the chat template limit of " +
                                  std::to_string(kMaxParseDepth) + " levels",
                              e->line);
    return e;
  }

  // --- statements --------------------------------------------------------------------------------
  // Parses until a `{% name %}` with name in `end`; stops before that name (BlockBegin consumed).
  Body subparse(const std::set<std::string>& end) {
    Level level(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!end.empty()) {
          std::string names;
          for (const auto& e : end) names += (names.empty() ? "'" : " or '") + e + "'";
          fail_here("Unexpected end of template. Jinja was looking for the following tags: " + names + ".");
        }
        return body;
      }
      if (t.type == Tok::Text) {
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::Text;
        s->line = t.line;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        auto s = std::make_unique<Stmt>();
        s->type = Stmt::Type::Output;
        s->line = t.line;
        next();
        s->expr = parse_tuple(true, {}, false);
        expect(Tok::VarEnd, "end of print statement");
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name && end.count(cur().text)) return body;
        body.push_back(parse_statement());
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
  }

  StmtPtr stmt(Stmt::Type type, int line) {
    auto s = std::make_unique<Stmt>();
    s->type = type;
    s->line = line;
    return s;
  }

  StmtPtr parse_statement() {
    if (cur().type != Tok::Name) fail_here("tag name expected");
    const std::string tag = cur().text;
    const int line = cur().line;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "call") return parse_call_block();
    if (tag == "filter") return parse_filter_block();
    if (tag == "with") return parse_with();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_here("'" + tag + "' outside of a loop");
      next();
      expect_block_end();
      return stmt(tag == "break" ? Stmt::Type::Break : Stmt::Type::Continue, line);
    }
    if (tag == "generation") {
      next();
      expect_block_end();
      auto s = stmt(Stmt::Type::Scope, line);
      s->body = subparse({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    fail_here("Encountered unknown tag '" + tag + "'.");
  }

  Target parse_target(bool with_namespace) {
    Target target;
    if (with_namespace && cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "." &&
        peek(2).type == Tok::Name) {
      target.names.push_back(next().text);
      next();
      target.ns_attr = next().text;
      return target;
    }
    const bool paren = skip_op("(");
    while (true) {
      target.names.push_back(expect_name());
      if (!skip_op(",")) break;
      target.is_tuple = true;
      if (cur().type != Tok::Name) break;  // trailing comma
    }
    if (paren) {
      target.is_tuple = true;
      expect_op(")");
    }
    return target;
  }

  StmtPtr parse_for() {
    auto s = stmt(Stmt::Type::For, next().line);
    s->target = parse_target(false);
    if (!skip_name("in")) fail_here("expected 'in', got " + describe(cur()));
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (is_name("recursive")) fail_here("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end();
      s->else_body = subparse({"endfor"});
      next();
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_if() {
    auto s = stmt(Stmt::Type::If, next().line);
    while (true) {
      ExprPtr cond = parse_tuple(false, {}, false);
      expect_block_end();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->else_body = subparse({"endif"});
        next();
      }
      break;
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    const int line = next().line;
    Target target = parse_target(true);
    if (skip_op("=")) {
      auto s = stmt(Stmt::Type::Set, line);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = stmt(Stmt::Type::SetBlock, line);
    s->target = std::move(target);
    while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    s->body = subparse({"endset"});
    next();
    expect_block_end();
    return s;
  }

  std::vector<MacroParam> parse_params() {
    std::vector<MacroParam> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto s = stmt(Stmt::Type::Macro, next().line);
    s->text = expect_name();
    s->params = parse_params();
    expect_block_end();
    const int depth = loop_depth_;
    loop_depth_ = 0;
    s->body = subparse({"endmacro"});
    loop_depth_ = depth;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = stmt(Stmt::Type::CallBlock, next().line);
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression(true);
    if (s->expr->type != Expr::Type::Call) fail_here("expected call");
    expect_block_end();
    s->body = subparse({"endcall"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = stmt(Stmt::Type::FilterBlock, next().line);
    do {
      s->filters.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    expect_block_end();
    s->body = subparse({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = stmt(Stmt::Type::With, next().line);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->assigns.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end();
    s->body = subparse({"endwith"});
    next();
    expect_block_end();
    return s;
  }

  // --- expressions -------------------------------------------------------------------------------
  bool tuple_end(const std::set<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    return t.type == Tok::Name && extra_end.count(t.text);
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::set<std::string>& extra_end, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("Expected an expression, got " + describe(cur()));
    }
    auto e = node(Expr::Type::Tuple, line);
    e->children = std::move(items);
    return fin(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Level level(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = next().line;
      auto e = node(Expr::Type::CondExpr, line);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      e->children.push_back(std::move(test));
      e->children.push_back(std::move(expr));
      e->children.push_back(std::move(otherwise));
      expr = fin(std::move(e));
    }
    return expr;
  }

  ExprPtr binary(Expr::Type type, std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = node(type, line);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return fin(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      left = binary(Expr::Type::Or, "or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      left = binary(Expr::Type::And, "and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Level level(*this);
      auto e = node(Expr::Type::Not, next().line);
      e->children.push_back(parse_not());
      return fin(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        ops.push_back(next().text);
      } else if (is_name("in")) {
        next();
        ops.push_back("in");
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        next();
        ops.push_back("not in");
      } else {
        break;
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(Expr::Type::Compare, line);
    e->children.push_back(std::move(first));
    for (auto& o : operands) e->children.push_back(std::move(o));
    e->ops = std::move(ops);
    return fin(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(Expr::Type::Binary, op.text, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      left = binary(Expr::Type::Binary, "~", std::move(left), parse_math2(), line);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(Expr::Type::Binary, op.text, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      left = binary(Expr::Type::Binary, "**", std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Level level(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      e = node(Expr::Type::Unary, op.line);
      e->name = op.text;
      e->children.push_back(parse_unary(false));
      e = fin(std::move(e));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    if (t.type == Tok::Name) {
      next();
      auto e = node(Expr::Type::Const, line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->type = Expr::Type::Name;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == Tok::String) {
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      auto e = node(Expr::Type::Const, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      auto e = node(Expr::Type::Const, line);
      e->value = next().value;
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto e = node(Expr::Type::List, line);
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      expect_op("]");
      return fin(std::move(e));
    }
    if (skip_op("{")) {
      auto e = node(Expr::Type::Dict, line);
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      expect_op("}");
      return fin(std::move(e));
    }
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        if (cur().type == Tok::Name) {
          auto g = node(Expr::Type::Getattr, line);
          g->name = next().text;
          g->children.push_back(std::move(e));
          e = fin(std::move(g));
        } else if (cur().type == Tok::Int) {
          auto g = node(Expr::Type::Getitem, line);
          auto k = node(Expr::Type::Const, line);
          k->value = next().value;
          g->children.push_back(std::move(e));
          g->children.push_back(std::move(k));
          e = fin(std::move(g));
        } else {
          fail_here("expected name or number");
        }
      } else if (is_op("[")) {
        const int line = next().line;
        std::vector<ExprPtr> args;
        while (!is_op("]")) {
          if (!args.empty()) expect_op(",");
          args.push_back(parse_subscribed());
        }
        expect_op("]");
        auto g = node(Expr::Type::Getitem, line);
        g->children.push_back(std::move(e));
        if (args.size() == 1) {
          g->children.push_back(std::move(args[0]));
        } else {
          auto tup = node(Expr::Type::Tuple, line);
          tup->children = std::move(args);
          g->children.push_back(fin(std::move(tup)));
        }
        e = fin(std::move(g));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    if (skip_op(":")) {
      args.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!skip_op(":")) return e;
      args.push_back(std::move(e));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (skip_op(":")) {
      args.push_back(!is_op("]") && !is_op(",") ? parse_expression(true) : nullptr);
    } else {
      args.push_back(nullptr);
    }
    auto s = node(Expr::Type::Slice, line);
    s->children = std::move(args);
    return fin(std::move(s));
  }

  // Call arguments into e (after its callee/operand children): positional, name=value, *a, **k.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        e.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty() || e.dyn_args || e.dyn_kwargs) fail_here("invalid syntax for function call expression");
        e.children.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(Expr::Type::Call, cur().line);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return fin(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().type == Tok::Name) {
      next();
      name += "." + next().text;
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr operand) {
    auto e = node(Expr::Type::Filter, cur().line);
    e->name = dotted_name();
    e->children.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*e);
    return fin(std::move(e));
  }

  ExprPtr parse_test(ExprPtr operand) {
    auto e = node(Expr::Type::Test, next().line);  // 'is'
    if (skip_name("not")) e->negated = true;
    e->name = dotted_name();
    e->children.push_back(std::move(operand));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                is_op("[") || is_op("{")) &&
               !(t.type == Tok::Name && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      e->children.push_back(parse_postfix(parse_primary()));
    }
    return fin(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse_template(const std::string& source) { return Parser(tokenize(source)).parse(); }

}  // namespace octet::jinja
