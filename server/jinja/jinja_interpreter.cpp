#include "server/jinja/jinja_interpreter.h"

#include <cmath>
#include <climits>
#include <cstdint>
#include <deque>

#include "server/jinja/jinja_budget.h"
#include "server/jinja/jinja_builtins.h"

namespace octet::jinja {
namespace {

struct Scope {
  Scope* parent = nullptr;
  Dict vars;
  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent)
      if (const Value* v = s->vars.find(name)) return v;
    return nullptr;
  }
};

// jinja2 LoopContext: one object per loop, advanced each iteration.
struct LoopObject : Object {
  std::vector<Value> items;
  std::size_t index0 = 0;

  Value attr(const std::string& name) const override {
    const auto n = static_cast<std::int64_t>(items.size());
    const auto i = static_cast<std::int64_t>(index0);
    if (name == "index") return Value(i + 1);
    if (name == "index0") return Value(i);
    if (name == "revindex") return Value(n - i);
    if (name == "revindex0") return Value(n - i - 1);
    if (name == "first") return Value(i == 0);
    if (name == "last") return Value(i == n - 1);
    if (name == "length") return Value(n);
    if (name == "depth") return Value(1);
    if (name == "depth0") return Value(0);
    if (name == "previtem") return i > 0 ? items[index0 - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? items[index0 + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      const std::size_t k = index0;
      return Value::function("loop.cycle", [k](CallArgs& a) {
        if (a.args.empty()) fail("no items for cycling given");
        return a.args[k % a.args.size()];
      });
    }
    return Value::undefined("'LoopContext object' has no attribute '" + name + "'");
  }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index0 + 1) + "/" + std::to_string(items.size()) + ">";
  }
};

enum class Flow { Normal, Break, Continue };

// One level of nested evaluation (an expression or a block): bounds the native stack.
class Nesting {
 public:
  explicit Nesting(int& depth) : depth_(depth) {
    if (++depth_ > kMaxRenderDepth) {
      --depth_;
      fail_limit("nested evaluation", std::to_string(kMaxRenderDepth) + " levels");
    }
  }
  ~Nesting() { --depth_; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  int& depth_;
};

// Appends rendered text to an output buffer, within the output budget.
void emit(std::string& out, const std::string& text) {
  if (text.size() > kMaxOutputBytes - out.size())
    fail_limit("the rendered text", std::to_string(kMaxOutputBytes) + " bytes");
  charge_string_bytes(text.size());
  out += text;
}

[[noreturn]] void overflow(const std::string& what) {
  fail_limit("the integer result of " + what, "64-bit integers (integer overflow)");
}

std::string int_expr(std::int64_t x, const std::string& op, std::int64_t y) {
  return std::to_string(x) + " " + op + " " + std::to_string(y);
}

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) {
    globals_ = new_scope(nullptr);
    globals_->vars = make_globals(options.now);
  }

  std::string run(const Body& body, const Dict& context) {
    StepBudget budget(kMaxSteps);
    Scope* top = new_scope(globals_);
    top->vars = context;
    std::string out;
    exec(body, top, out);
    return out;
  }

 private:
  std::deque<Scope> arena_;  // every scope of this render; macros and callers point into it
  Scope* globals_ = nullptr;
  int call_depth_ = 0;
  int nesting_ = 0;

  Scope* new_scope(Scope* parent) {
    arena_.emplace_back();
    arena_.back().parent = parent;
    return &arena_.back();
  }

  [[noreturn]] static void rethrow_at(const ChatTemplateError& e, int line) {
    throw ChatTemplateError(e.kind(), e.message(), line);
  }

  // --- statements --------------------------------------------------------------------------------
  Flow exec(const Body& body, Scope* scope, std::string& out) {
    Nesting nest(nesting_);
    for (const auto& s : body) {
      Flow f;
      try {
        f = exec_stmt(*s, scope, out);
      } catch (const ChatTemplateError& e) {
        if (e.line() == 0) rethrow_at(e, s->line);
        throw;
      }
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, Scope* scope, std::string& out) {
    switch (s.type) {
      case Stmt::Type::Text: emit(out, s.text); return Flow::Normal;
      case Stmt::Type::Output: emit(out, to_str(eval(*s.expr, scope))); return Flow::Normal;
      case Stmt::Type::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case Stmt::Type::For: exec_for(s, scope, out); return Flow::Normal;
      case Stmt::Type::Set: assign(s.target, eval(*s.expr, scope), scope); return Flow::Normal;
      case Stmt::Type::SetBlock: {
        std::string text;
        exec(s.body, scope, text);
        Value v(std::move(text));
        for (const auto& f : s.filters) v = filter(*f, v, scope);
        assign(s.target, v, scope);
        return Flow::Normal;
      }
      case Stmt::Type::Macro: scope->vars.set(s.text, make_macro(s, scope)); return Flow::Normal;
      case Stmt::Type::CallBlock: {
        const Expr& call = *s.expr;
        const Value callee = eval(*call.children[0], scope);
        CallArgs args = call_args(call, 1, scope);
        args.kwargs.emplace_back("caller", Value::function("caller", [this, &s, scope](CallArgs& a) {
                                   return invoke_body(s.params, s.body, scope, a, "caller");
                                 }));
        emit(out, to_str(call_value(callee, args)));
        return Flow::Normal;
      }
      case Stmt::Type::FilterBlock: {
        std::string text;
        exec(s.body, scope, text);
        Value v(std::move(text));
        for (const auto& f : s.filters) v = filter(*f, v, scope);
        emit(out, to_str(v));
        return Flow::Normal;
      }
      case Stmt::Type::With: {
        Scope* inner = new_scope(scope);
        for (const auto& [name, expr] : s.assigns) inner->vars.set(name, eval(*expr, scope));
        return exec(s.body, inner, out);
      }
      case Stmt::Type::Scope: return exec(s.body, new_scope(scope), out);
      case Stmt::Type::Break: return Flow::Break;
      case Stmt::Type::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  static void bind(const Target& t, const Value& v, Scope* scope) {
    if (!t.is_tuple) {
      scope->vars.set(t.names[0], v);
      return;
    }
    const std::vector<Value> items = iterate(v);
    if (items.size() > t.names.size())
      fail("too many values to unpack (expected " + std::to_string(t.names.size()) + ")");
    if (items.size() < t.names.size())
      fail("not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
           std::to_string(items.size()) + ")");
    for (std::size_t i = 0; i < items.size(); ++i) scope->vars.set(t.names[i], items[i]);
  }

  static void assign(const Target& t, const Value& v, Scope* scope) {
    if (t.ns_attr.empty()) {
      bind(t, v, scope);
      return;
    }
    const Value* ns = scope->lookup(t.names[0]);
    if (!ns || ns->kind() != Kind::Namespace) fail("cannot assign attribute on non-namespace object");
    if (t.ns_attr[0] == '_')
      fail("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + t.ns_attr +
           "'. Please rename the attribute.");
    // Namespaces are the only mutable values: holding no namespace, function or loop object keeps
    // every value acyclic and its recorded depth() an upper bound.
    if (v.holds_reference()) fail("a namespace cannot hold a namespace, function or loop object ('" + t.ns_attr + "')");
    Dict& d = ns->dict_ref();
    std::uint64_t bytes = sizeof(Value) + v.size_bytes();
    for (const auto& [k, e] : d.entries)
      if (!(k.is_string() && k.as_string() == t.ns_attr)) bytes += sizeof(Value) + e.size_bytes();
    check_value_bytes(bytes);
    d.set(t.ns_attr, v);
  }

  void exec_for(const Stmt& s, Scope* scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*s.expr, scope));
    if (s.cond) {  // `for x in xs if cond`: filtered before the loop, so loop.length counts kept items
      Scope* probe = new_scope(scope);
      std::vector<Value> kept;
      for (auto& item : items) {
        charge_steps(1);
        probe->vars.entries.clear();
        bind(s.target, item, probe);
        if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, new_scope(scope), out);
      return;
    }
    auto loop = std::make_shared<LoopObject>();
    loop->items = std::move(items);
    const Value loop_value = Value::object(loop);
    Scope* inner = new_scope(scope);
    for (std::size_t i = 0; i < loop->items.size(); ++i) {
      charge_steps(1);
      loop->index0 = i;
      inner->vars.entries.clear();  // each iteration starts from the enclosing scope again
      inner->vars.set("loop", loop_value);
      bind(s.target, loop->items[i], inner);
      if (exec(s.body, inner, out) == Flow::Break) break;
    }
    // The scope outlives the loop (scopes live until the render ends): drop its loop object and
    // items now, or every inner loop of a nested loop keeps its list (an 81-byte template of two
    // range(100000) loops held 1.2 GB before its step limit).
    inner->vars.entries.clear();
  }

  // --- macros ------------------------------------------------------------------------------------
  Value make_macro(const Stmt& s, Scope* scope) {
    return Value::function(s.text, [this, &s, scope](CallArgs& a) {
      return invoke_body(s.params, s.body, scope, a, s.text);
    });
  }

  // Binds args to params in a new scope under `def_scope` (extra positional -> varargs, extra
  // keyword -> kwargs, missing -> Undefined) and renders `body` to a string.
  Value invoke_body(const std::vector<MacroParam>& params, const Body& body, Scope* def_scope, CallArgs& a,
                    const std::string& name) {
    if (call_depth_ >= kMaxMacroDepth)
      fail_limit("the macro call depth in '" + name + "'", std::to_string(kMaxMacroDepth) + " nested calls");
    Scope* scope = new_scope(def_scope);
    std::vector<bool> bound(params.size(), false);
    for (std::size_t i = 0; i < params.size() && i < a.args.size(); ++i) {
      scope->vars.set(params[i].name, a.args[i]);
      bound[i] = true;
    }
    std::vector<Value> varargs;
    for (std::size_t i = params.size(); i < a.args.size(); ++i) varargs.push_back(a.args[i]);
    Dict kwargs;
    for (const auto& [key, value] : a.kwargs) {
      bool matched = false;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (params[i].name != key) continue;
        if (bound[i]) fail("macro '" + name + "' got multiple values for argument '" + key + "'");
        scope->vars.set(key, value);
        bound[i] = matched = true;
      }
      if (!matched) {
        if (key == "caller") scope->vars.set(key, value);
        else kwargs.set(key, value);
      }
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      scope->vars.set(params[i].name, params[i].default_value
                                          ? eval(*params[i].default_value, scope)
                                          : Value::undefined("parameter '" + params[i].name + "' was not provided"));
    }
    scope->vars.set("varargs", Value::tuple(std::move(varargs)));
    scope->vars.set("kwargs", Value::dict(std::move(kwargs)));
    std::string out;
    ++call_depth_;
    try {
      exec(body, scope, out);
    } catch (...) {
      --call_depth_;
      throw;
    }
    --call_depth_;
    return Value(std::move(out));
  }

  // --- expressions -------------------------------------------------------------------------------
  Value eval(const Expr& e, Scope* scope) {
    Nesting nest(nesting_);
    charge_steps(1);
    try {
      return eval_node(e, scope);
    } catch (const ChatTemplateError& err) {
      if (err.line() == 0) rethrow_at(err, e.line);
      throw;
    }
  }

  CallArgs call_args(const Expr& e, std::size_t first, Scope* scope) {
    CallArgs a;
    for (std::size_t i = first; i < e.children.size(); ++i) a.args.push_back(eval(*e.children[i], scope));
    if (e.dyn_args)
      for (auto& v : iterate(eval(*e.dyn_args, scope))) a.args.push_back(std::move(v));
    for (const auto& [key, expr] : e.kwargs) a.kwargs.emplace_back(key, eval(*expr, scope));
    if (e.dyn_kwargs) {
      const Value d = eval(*e.dyn_kwargs, scope);
      if (!d.is_mapping()) fail("argument after ** must be a mapping, not " + type_name(d));
      for (const auto& [k, v] : d.dict_ref().entries) {
        if (!k.is_string()) fail("keywords must be strings");
        a.kwargs.emplace_back(k.as_string(), v);
      }
    }
    return a;
  }

  static Value call_value(const Value& callee, CallArgs& args) {
    if (callee.is_undefined()) callee.fail_undefined();
    if (callee.kind() != Kind::Function) fail("'" + type_name(callee) + "' object is not callable");
    return callee.function_ref().call(args);
  }

  Value filter(const Expr& f, const Value& input, Scope* scope) {
    CallArgs args = call_args(f, 1, scope);
    return apply_filter(f.name, input, args);
  }

  Value eval_node(const Expr& e, Scope* scope) {
    switch (e.type) {
      case Expr::Type::Const: return e.value;
      case Expr::Type::Name: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Type::List:
      case Expr::Type::Tuple: {
        std::vector<Value> items;
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return e.type == Expr::Type::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Type::Dict: {
        Dict d;
        for (std::size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value k = eval(*e.children[i], scope);
          d.set_key(k, eval(*e.children[i + 1], scope));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Type::Getattr: return get_attr(eval(*e.children[0], scope), e.name);
      case Expr::Type::Getitem: {
        const Value obj = eval(*e.children[0], scope);
        const Expr& k = *e.children[1];
        if (k.type == Expr::Type::Slice) {
          auto bound = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value(); };
          return slice(obj, bound(k.children[0]), bound(k.children[1]), bound(k.children[2]));
        }
        return get_item(obj, eval(k, scope));
      }
      case Expr::Type::Slice: fail("slice outside of a subscript");
      case Expr::Type::Call: {
        const Value callee = eval(*e.children[0], scope);
        CallArgs args = call_args(e, 1, scope);
        return call_value(callee, args);
      }
      case Expr::Type::Filter: return filter(e, eval(*e.children[0], scope), scope);
      case Expr::Type::Test: {
        const Value v = eval(*e.children[0], scope);
        CallArgs args = call_args(e, 1, scope);
        return Value(apply_test(e.name, v, args) != e.negated);
      }
      case Expr::Type::Unary: {
        const Value v = eval(*e.children[0], scope);
        if (v.is_undefined()) v.fail_undefined();
        if (v.kind() == Kind::Float) return Value(e.name == "-" ? -v.as_double() : v.as_double());
        if (v.is_int()) {
          if (e.name == "-" && v.as_int() == INT64_MIN) overflow("-(" + std::to_string(v.as_int()) + ")");
          return Value(e.name == "-" ? -v.as_int() : v.as_int());
        }
        fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      }
      case Expr::Type::Binary: return binary(e.name, eval(*e.children[0], scope), eval(*e.children[1], scope));
      case Expr::Type::Compare: {
        Value left = eval(*e.children[0], scope);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], scope);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Type::And: {
        Value l = eval(*e.children[0], scope);
        return truthy(l) ? eval(*e.children[1], scope) : l;
      }
      case Expr::Type::Or: {
        Value l = eval(*e.children[0], scope);
        return truthy(l) ? l : eval(*e.children[1], scope);
      }
      case Expr::Type::Not: return Value(!truthy(eval(*e.children[0], scope)));
      case Expr::Type::CondExpr: {
        if (truthy(eval(*e.children[0], scope))) return eval(*e.children[1], scope);
        if (e.children[2]) return eval(*e.children[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return Value();
  }

  static bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (op == "<") return less(a, b, "<");
    if (op == ">") return less(b, a, ">");
    if (op == "<=") return equals(a, b) ? (a.is_undefined() ? (a.fail_undefined(), false) : true) : less(a, b, "<=");
    if (op == ">=") return equals(a, b) ? (a.is_undefined() ? (a.fail_undefined(), false) : true) : less(b, a, ">=");
    fail("unknown comparison " + op);
  }

  // Python's a // b and a % b; b != 0. INT64_MIN // -1 overflows.
  static std::int64_t floor_div(std::int64_t a, std::int64_t b) {
    if (b == -1) {
      if (a == INT64_MIN) overflow(int_expr(a, "//", b));
      return -a;
    }
    std::int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
  }
  static std::int64_t floor_mod(std::int64_t a, std::int64_t b) {
    if (b == -1) return 0;
    const std::int64_t r = a % b;
    return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
  }

  static std::int64_t int_pow(std::int64_t x, std::int64_t y) {  // y >= 0
    std::int64_t r = 1, base = x;
    for (std::int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflow(int_expr(x, "**", y));
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow(int_expr(x, "**", y));
    }
    return r;
  }

  static Value checked_float(double r, double dx, double dy, const std::string& op) {
    if (std::isinf(r) && std::isfinite(dx) && std::isfinite(dy))
      fail_limit("the float result of " + float_repr(dx) + " " + op + " " + float_repr(dy), "finite doubles (overflow)");
    return Value(r);
  }

  static Value repeat(const Value& seq, std::int64_t n) {
    if (n <= 0) n = 0;
    const std::uint64_t unit = seq.is_string() ? seq.as_string().size() : seq.size_bytes();
    check_value_bytes(mul_size(unit, static_cast<std::uint64_t>(n)));
    if (seq.is_string()) {
      // Bytes copied count as steps (16 per step), so a loop of large repeats stops at the
      // budget instead of copying gigabytes under it (3,000 x 60 MB took 67 s).
      charge_steps(mul_size(unit, static_cast<std::uint64_t>(n)) / 16);
      std::string out;
      out.reserve(unit * static_cast<std::uint64_t>(n));
      for (std::int64_t i = 0; i < n; ++i) out += seq.as_string();
      return Value(std::move(out));
    }
    charge_steps(mul_size(seq.items().size(), static_cast<std::uint64_t>(n)));
    std::vector<Value> out;
    for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
    return seq.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }

  static Value binary(const std::string& op, const Value& a, const Value& b) {
    if (op == "~") {
      const std::string sa = to_str(a), sb = to_str(b);
      check_value_bytes(sa.size() + sb.size());
      return Value(sa + sb);
    }
    if (a.is_undefined()) a.fail_undefined();
    if (b.is_undefined()) b.fail_undefined();
    if (a.is_number() && b.is_number()) {
      const bool ints = a.kind() != Kind::Float && b.kind() != Kind::Float;
      const std::int64_t x = a.as_int(), y = b.as_int();
      const double dx = a.as_double(), dy = b.as_double();
      std::int64_t r = 0;
      if (op == "+") {
        if (!ints) return checked_float(dx + dy, dx, dy, op);
        if (__builtin_add_overflow(x, y, &r)) overflow(int_expr(x, op, y));
        return Value(r);
      }
      if (op == "-") {
        if (!ints) return checked_float(dx - dy, dx, dy, op);
        if (__builtin_sub_overflow(x, y, &r)) overflow(int_expr(x, op, y));
        return Value(r);
      }
      if (op == "*") {
        if (!ints) return checked_float(dx * dy, dx, dy, op);
        if (__builtin_mul_overflow(x, y, &r)) overflow(int_expr(x, op, y));
        return Value(r);
      }
      if (op == "/") {
        if (dy == 0) fail("division by zero");
        return checked_float(dx / dy, dx, dy, op);
      }
      if (op == "//" || op == "%") {
        if (ints ? y == 0 : dy == 0) fail(ints ? "integer division or modulo by zero" : "float modulo");
        if (ints) return op == "//" ? Value(floor_div(x, y)) : Value(floor_mod(x, y));
        if (op == "//") return Value(std::floor(dx / dy));
        double r = std::fmod(dx, dy);
        if (r != 0 && ((r < 0) != (dy < 0))) r += dy;
        return Value(r);
      }
      if (op == "**") {
        if (ints && y >= 0) return Value(int_pow(x, y));
        return checked_float(std::pow(dx, dy), dx, dy, op);
      }
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        check_value_bytes(a.as_string().size() + b.as_string().size());
        if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
        auto esc = [](const Value& s) { return s.is_markup() ? s.as_string() : html_escape(s.as_string()); };
        return Value::markup(esc(a) + esc(b));
      }
      if (a.is_sequence() && a.kind() == b.kind()) {
        check_value_bytes(a.size_bytes() + b.size_bytes());
        std::vector<Value> items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return a.kind() == Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() || a.is_sequence())
        fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    }
    if (op == "*") {
      if ((a.is_string() || a.is_sequence()) && b.is_int()) return repeat(a, b.as_int());
      if (a.is_int() && (b.is_string() || b.is_sequence())) return repeat(b, a.as_int());
    }
    if (op == "%" && a.is_string()) return Value(py_percent_format(a.as_string(), b));
    fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  }
};

}  // namespace

std::string render(const Body& body, const Dict& context, const RenderOptions& options) {
  return Interpreter(options).run(body, context);
}

}  // namespace octet::jinja
