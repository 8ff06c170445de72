#include "server/chat_template.h"

#include "server/jinja_ast.h"
#include "server/jinja_interpreter.h"

namespace octet {

ChatTemplate ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  t.source_ = std::make_shared<const std::string>(source);
  t.body_ = std::make_shared<const jinja::Body>(jinja::parse_template(source));
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context, const ChatTemplateOptions& options) const {
  if (!context.is_object()) throw std::invalid_argument("chat template context must be a JSON object");
  const jinja::Value ctx = jinja::Value::from_json(context);
  jinja::RenderOptions ro;
  ro.now = options.now;
  return jinja::render(*body_, ctx.dict_ref(), ro);
}

std::string ChatTemplate::render(const nlohmann::json& context, const ChatTemplateOptions& options) const {
  return render(nlohmann::ordered_json::parse(context.dump()), options);
}

}  // namespace octet
