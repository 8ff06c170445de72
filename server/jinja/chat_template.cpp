#include "server/jinja/chat_template.h"

#include "server/jinja/jinja_ast.h"
#include "server/jinja/jinja_interpreter.h"

namespace octet {

namespace {

// The names read by an expression or a statement list. Recursion depth is bounded by the
// parser's kMaxParseDepth (jinja_budget.h).
void collect_names(const jinja::Expr* e, std::set<std::string>& out);

void collect_names(const std::vector<std::pair<std::string, jinja::ExprPtr>>& kwargs,
                   std::set<std::string>& out) {
  for (const auto& kv : kwargs) collect_names(kv.second.get(), out);
}

void collect_names(const jinja::Expr* e, std::set<std::string>& out) {
  if (!e) return;
  if (e->type == jinja::Expr::Type::Name) out.insert(e->name);
  for (const auto& c : e->children) collect_names(c.get(), out);
  collect_names(e->kwargs, out);
  collect_names(e->dyn_args.get(), out);
  collect_names(e->dyn_kwargs.get(), out);
}

void collect_names(const jinja::Body& body, std::set<std::string>& out) {
  for (const auto& s : body) {
    collect_names(s->expr.get(), out);
    collect_names(s->cond.get(), out);
    for (const auto& [cond, branch] : s->branches) {
      collect_names(cond.get(), out);
      collect_names(branch, out);
    }
    collect_names(s->body, out);
    collect_names(s->else_body, out);
    for (const auto& p : s->params) collect_names(p.default_value.get(), out);
    for (const auto& f : s->filters) collect_names(f.get(), out);
    collect_names(s->assigns, out);
    if (!s->target.ns_attr.empty() && !s->target.names.empty())  // {% set ns.attr = ... %}
      out.insert(s->target.names[0]);
  }
}

}  // namespace

ChatTemplate ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.body_ = std::make_shared<const jinja::Body>(jinja::parse_template(source));
  auto names = std::make_shared<std::set<std::string>>();
  collect_names(*t.body_, *names);
  t.variable_names_ = std::move(names);
  return t;
}

const std::set<std::string>& ChatTemplate::variable_names() const {
  static const std::set<std::string> none;
  return variable_names_ ? *variable_names_ : none;
}

namespace {
template <class Json>
std::string render_body(const jinja::Body* body, const Json& context, const ChatTemplateOptions& options) {
  if (!context.is_object()) throw std::invalid_argument("chat template context must be a JSON object");
  if (!body) return "";
  const jinja::Value ctx = jinja::Value::from_json(context);
  jinja::RenderOptions ro;
  ro.now = options.now;
  return jinja::render(*body, ctx.dict_ref(), ro);
}
}  // namespace

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatTemplateOptions& options) const {
  return render_body(body_.get(), context, options);
}

std::string ChatTemplate::render(const nlohmann::json& context, const ChatTemplateOptions& options) const {
  return render_body(body_.get(), context, options);
}

const std::string& ChatTemplate::source() const {
  static const std::string empty;
  return source_ ? *source_ : empty;
}

nlohmann::ordered_json prepare_chat_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw std::invalid_argument("messages must be a JSON array");
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& message : messages) {
    if (!message.is_object()) throw std::invalid_argument("each message must be a JSON object");
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [key, value] : message.items())
      if (!value.is_null()) m[key] = value;
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (m.contains(key)) {
        reasoning = &m[key];
        break;
      }
    }
    if (!reasoning) {
      out.push_back(std::move(m));
      continue;
    }
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = *reasoning;  // {"thinking": r, **message, "reasoning_content": r}
    for (const auto& [key, value] : m.items()) aliased[key] = value;
    aliased["reasoning_content"] = *reasoning;
    out.push_back(std::move(aliased));
  }
  return out;
}

}  // namespace octet
