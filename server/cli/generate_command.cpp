// `octet generate`: prompts through the continuous-batching Engine. One prompt streams its text
// (or prints one JSON object with --json); --prompts-file runs every line concurrently and
// prints the outputs in input order (one JSON object per line with --json).
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "config/file_read.h"
#include "config/generate_config.h"
#include "engine/engine.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"
#include "server/cli/rendezvous.h"

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

/// The prompts of a --prompts-file: one per non-empty line, a line starting with '"' being
/// one JSON string literal. Read whole, at most kMaxPromptsFileBytes (config/file_read.h), so
/// /dev/zero or a FIFO is not read without limit. Throws std::runtime_error (a bad file: exit
/// 1) naming the flag and the path.
std::vector<std::string> read_prompts(const std::string& path) {
  const std::string where = "--prompts-file " + path;
  std::string text;
  try {
    text = read_file_bounded(path, kMaxPromptsFileBytes);
  } catch (const FileReadError& e) {
    throw std::runtime_error("--prompts-file " + std::string(e.what()));
  }
  std::vector<std::string> prompts;
  size_t line_number = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (line.front() == '"') {
      // A JSON string literal: escapes such as \n give multi-line (chat-formatted) prompts.
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_string())
        throw std::runtime_error(where + ": line " + std::to_string(line_number) +
                                 " starts with '\"' but is not one JSON string");
      line = j.get<std::string>();
    }
    prompts.push_back(std::move(line));
  }
  if (prompts.empty()) throw std::runtime_error(where + ": the file has no prompts");
  return prompts;
}

struct Completion {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;
  std::string text;
  std::string finish_reason;
  double seconds = 0.0;
};

}  // namespace

int run_generate(int argc, const char* const* argv) {
  return cli::run_command<GenerateConfig>("octet generate", argc, argv, [](GenerateConfig& cfg) {
    EngineArgs args = model_engine_args(cfg);
    server::set_rendezvous_exchange(args.multinode);
    args.cache = cfg.cache;
    args.scheduler = cfg.scheduler;
    if (args.multinode.nnodes > 1 && args.multinode.node_rank > 0) {
      // Nodes 1..: node 0's steps until it has generated (its prompts are not read here).
      Engine::run_follower(args);
      return;
    }
    std::vector<std::vector<int32_t>> prompt_ids;
    if (!cfg.prompt_ids.empty()) prompt_ids.push_back(parse_ids(cfg.prompt_ids));
    const std::vector<std::string> texts =
        cfg.prompts_file.empty() ? std::vector<std::string>{} : read_prompts(cfg.prompts_file);
    auto engine = Engine::create(args);
    if (!cfg.json) std::cerr << engine->startup_report();
    if (!cfg.prompt.empty()) prompt_ids.push_back(engine->tokenizer().tokenize(cfg.prompt, true));
    for (const std::string& t : texts) prompt_ids.push_back(engine->tokenizer().tokenize(t, true));

    SamplingParams params;
    params.temperature = static_cast<float>(cfg.temperature);
    params.top_p = static_cast<float>(cfg.top_p);
    if (cfg.seed != -1) params.seed = cfg.seed;  // -1: nondeterministic
    params.max_tokens = cfg.max_tokens;
    params.ignore_eos = cfg.ignore_eos;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompt_ids.size(); ++i)
      streams.push_back(engine->add_request("generate-" + std::to_string(i), prompt_ids[i],
                                            params));
    const bool stream_text = !cfg.json && streams.size() == 1;
    std::vector<Completion> results(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      Completion& c = results[i];
      c.prompt_ids = prompt_ids[i];
      while (auto out = streams[i]->next()) {
        if (!out->error.empty()) throw std::runtime_error(out->error);
        c.token_ids.insert(c.token_ids.end(), out->token_ids.begin(), out->token_ids.end());
        c.text += out->text;
        if (stream_text) std::cout << out->text << std::flush;
        if (out->finished) {
          c.finish_reason = out->finish_reason;
          c.seconds = out->e2e_time_s;
        }
      }
    }
    for (const Completion& c : results) {
      const double tps = c.seconds > 0 ? static_cast<double>(c.token_ids.size()) / c.seconds : 0;
      if (cfg.json) {
        nlohmann::json j;
        j["prompt_token_ids"] = c.prompt_ids;
        j["token_ids"] = c.token_ids;
        j["text"] = c.text;
        j["finish_reason"] = c.finish_reason;
        j["linear_format"] = engine->linear_format();
        j["kv_cache_dtype"] = cfg.cache.kv_cache_dtype;
        j["tokens_per_second"] = tps;
        std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else if (stream_text) {
        std::cout << "\n";
        std::cerr << c.token_ids.size() << " tokens, " << tps << " tokens/s, finish_reason "
                  << c.finish_reason << ", " << engine->linear_format() << "\n";
      } else {
        std::cout << "[" << (&c - results.data()) << "] " << c.text << "\n";
      }
    }
  });
}

}  // namespace octet
