// The built-in Gemma 3 chat template (engine/gemma_chat_template.h) renders with octet's Jinja
// exactly as transformers 5.24's render_jinja_template renders it (expected strings printed by
// that function for these conversations; bos "<bos>", add_generation_prompt true).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "engine/gemma_chat_template.h"
#include "server/jinja/chat_template.h"

using octet::ChatTemplate;
using ojson = nlohmann::ordered_json;

namespace {

std::string render(const ojson& messages) {
  const ojson ctx = {{"messages", messages}, {"add_generation_prompt", true},
                     {"bos_token", "<bos>"}, {"eos_token", "<eos>"}};
  return ChatTemplate::parse(octet::kGemma3ChatTemplate).render(ctx);
}

}  // namespace

TEST_CASE("gemma3 chat template renders like transformers", "[chat_template][gemma3]") {
  CHECK(render(ojson::parse(R"([{"role":"system","content":"You are terse."},
                                {"role":"user","content":"What is the capital of France?"}])")) ==
        "<bos><start_of_turn>user\nYou are terse.\n\nWhat is the capital of France?"
        "<end_of_turn>\n<start_of_turn>model\n");
  CHECK(render(ojson::parse(R"([{"role":"user","content":"  Hi  "},
                                {"role":"assistant","content":"Hello!"},
                                {"role":"user","content":[{"type":"text","text":"Two\nlines "}]}])")) ==
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nTwo\nlines<end_of_turn>\n<start_of_turn>model\n");
  CHECK_THROWS(render(ojson::parse(R"([{"role":"assistant","content":"first"}])")));
}
