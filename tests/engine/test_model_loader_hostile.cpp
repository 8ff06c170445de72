// The JSON files load_model reads beside the weights (issue 23, items 3, 10, 12):
// generation_config.json ids are range-checked (4294967299 used to become 3) and must be below
// vocab_size; config.json's eos_token_id is used when there is no generation_config.json (as
// vLLM); tokenizer_config.json's chat_template of the wrong type, or a FIFO in its place, is
// a ModelFileError naming the file and the field, never a raw nlohmann message or a hang.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "tiny_models.h"

using namespace octet;
using namespace octet::testing;
using Catch::Contains;
using Catch::StartsWith;
namespace fs = std::filesystem;

namespace {

/// A fresh copy of the tiny Llama checkpoint (vocab_size 512, eos 2) in `dir`.
std::string tiny_copy(const TempDir& dir) {
  const std::string src = tiny_model_dir("tiny_llama"), dst = dir.file("tiny");
  fs::copy(src, dst, fs::copy_options::recursive);
  return dst;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string load_error(const std::string& dir) {
  try {
    load_model(dir, LoadOptions{});
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("generation_config.json eos ids are range-checked", "[model_loader][hostile]") {
  TempDir tmp;
  const std::string d = tiny_copy(tmp), gen = d + "/generation_config.json";
  write(gen, R"({"eos_token_id": 4294967299})");
  CHECK_THAT(load_error(d), StartsWith(gen + ": eos_token_id: must be an integer in [0, "
                                             "2147483647], got 4294967299"));
  write(gen, R"({"eos_token_id": [2, 600]})");
  CHECK_THAT(load_error(d),
             StartsWith(gen + ": eos_token_id[1]: 600 is not below the model's vocab_size 512"));
  write(gen, R"({"eos_token_id": [2, -1]})");
  CHECK_THAT(load_error(d), StartsWith(gen + ": eos_token_id[1]: must be an integer"));
  write(gen, R"({"bos_token_id": 1.5, "eos_token_id": 2})");
  CHECK_THAT(load_error(d), StartsWith(gen + ": bos_token_id: must be an integer"));
  write(gen, R"({"eos_token_id": [2, 7]})");
  const auto m = load_model(d, LoadOptions{});
  CHECK(m->eos_token_ids == std::vector<int32_t>{2, 7, 2});  // generation_config, tokenizer
}

TEST_CASE("config.json eos ids are used without generation_config.json",
          "[model_loader][hostile]") {
  TempDir tmp;
  const std::string d = tiny_copy(tmp);
  fs::remove(d + "/generation_config.json");
  nlohmann::json c = nlohmann::json::parse(std::ifstream(d + "/config.json"));
  c["eos_token_id"] = {5, 6};
  write(d + "/config.json", c.dump());
  CHECK(load_model(d, LoadOptions{})->eos_token_ids == std::vector<int32_t>{5, 6, 2});
  c["eos_token_id"] = 4294967299ll;
  write(d + "/config.json", c.dump());
  CHECK_THAT(load_error(d), StartsWith(d + "/config.json: eos_token_id: must be an integer"));
}

TEST_CASE("tokenizer_config.json chat_template errors name the file and field",
          "[model_loader][hostile]") {
  TempDir tmp;
  const std::string d = tiny_copy(tmp), tc = d + "/tokenizer_config.json";
  nlohmann::json t = nlohmann::json::parse(std::ifstream(tc));
  t["chat_template"] = {{{"name", 5}, {"template", "x"}}};  // used to be a raw type_error
  write(tc, t.dump());
  CHECK_THAT(load_error(d), StartsWith(tc + ": chat_template: must be a string or a list") &&
                                Contains("entry 0 is an object with 2 keys"));
  t["chat_template"] = 7;
  write(tc, t.dump());
  CHECK_THAT(load_error(d), StartsWith(tc + ": chat_template: must be a string or a list") &&
                                Contains("got 7"));
  t["chat_template"] = {{{"name", "tool_use"}, {"template", "a"}},
                        {{"name", "default"}, {"template", "{{ messages }}"}}};
  write(tc, t.dump());
  CHECK(load_model(d, LoadOptions{})->model_tokenizer->chat_template() == "{{ messages }}");
}

TEST_CASE("a FIFO as tokenizer_config.json is an error, not a hang", "[model_loader][hostile]") {
  TempDir tmp;
  const std::string d = tiny_copy(tmp), tc = d + "/tokenizer_config.json";
  fs::remove(tc);
  REQUIRE(::mkfifo(tc.c_str(), 0600) == 0);
  CHECK(load_error(d) == tc + ": not a regular file");
}
