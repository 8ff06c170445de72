// `octet generate`: one prompt through the Generator, streamed text or one JSON object.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/generate_config.h"
#include "engine/generator.h"
#include "server/generator_options.h"
#include "server/command.h"
#include "server/commands.h"

namespace octet {

namespace {

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  if (!s.empty() && s.back() == ',')
    throw std::invalid_argument("--prompt-ids: empty id after the last comma");
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 0 || v > INT32_MAX)
      throw std::invalid_argument("--prompt-ids: '" + item + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) throw std::invalid_argument("--prompt-ids: no ids given");
  return ids;
}

}  // namespace

int run_generate(int argc, const char* const* argv) {
  return cli::run_command<GenerateConfig>("octet generate", argc, argv, [](GenerateConfig& cfg) {
    std::vector<int32_t> prompt_ids;
    if (!cfg.prompt_ids.empty()) prompt_ids = parse_ids(cfg.prompt_ids);
    auto gen = Generator::load(cfg.model, generator_options(cfg));
    if (prompt_ids.empty()) prompt_ids = gen->tokenize(cfg.prompt);
    SamplingParams params;
    params.temperature = static_cast<float>(cfg.temperature);
    params.top_p = static_cast<float>(cfg.top_p);
    params.seed = cfg.seed;
    params.max_tokens = cfg.max_tokens;
    params.ignore_eos = cfg.ignore_eos;
    std::function<void(const std::string&)> on_text;
    if (!cfg.json) on_text = [](const std::string& piece) { std::cout << piece << std::flush; };
    GenerateResult r = gen->generate(prompt_ids, params, on_text);
    if (cfg.json) {
      nlohmann::json j;
      j["prompt_token_ids"] = r.prompt_token_ids;
      j["token_ids"] = r.token_ids;
      j["text"] = r.text;
      j["finish_reason"] = r.finish_reason;
      j["linear_format"] = r.linear_format;
      j["tokens_per_second"] = r.tokens_per_second;
      j["prefill_seconds"] = r.prefill_seconds;
      j["decode_seconds"] = r.decode_seconds;
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << "\n";
      std::cerr << r.token_ids.size() << " tokens, " << r.tokens_per_second
                << " tokens/s, finish_reason " << r.finish_reason << ", " << r.linear_format
                << "\n";
    }
  });
}

}  // namespace octet
