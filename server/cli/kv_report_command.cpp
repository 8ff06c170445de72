// `octet kv-report`: per layer and KV head, what each FP8 KV format and scale source costs this
// model on real text (engine/kv_report.h): table, --json, --heatmap PNG.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "config/calibrate_config.h"
#include "config/file_read.h"
#include "engine/kv_report.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The start of the --text file: enough bytes for max_tokens tokens (64 bytes a token, at least
// 1 MiB), never more than kMaxPromptsFileBytes whatever --max-tokens says. Only regular files
// (a FIFO or /dev/zero is refused, not read). Throws std::invalid_argument naming the flag.
std::string read_text_prefix(const std::string& path, int64_t max_tokens) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::invalid_argument("--text '" + path + "': not a readable regular file");
  const size_t want = max_tokens > static_cast<int64_t>(kMaxPromptsFileBytes / 64)
                          ? kMaxPromptsFileBytes
                          : std::max<size_t>(size_t{1} << 20, static_cast<size_t>(max_tokens) * 64);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("--text '" + path + "': cannot be opened");
  std::string text(want, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw std::invalid_argument("--text '" + path + "': read error");
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

int run_kv_report(int argc, const char* const* argv) {
  return cli::run_command<KVReportConfig>("octet kv-report", argc, argv, [](KVReportConfig& cfg) {
    const std::string text =
        cfg.builtin_text ? kv_report_builtin_text() : read_text_prefix(cfg.text, cfg.max_tokens);
    KVReportOptions o;
    o.model = cfg.model;
    o.quantization = cfg.quantization;
    o.text = text;
    o.max_tokens = cfg.max_tokens;
    o.formats = split(cfg.formats);
    o.sources = split(cfg.sources);
    o.query_stride = cfg.query_stride;
    o.target_kl = cfg.target_kl;
    o.recommend_for = cfg.recommend_for;
    o.skip_layers = cfg.kv_cache_dtype_skip_layers;
    for (const std::string& s : split(cfg.long_context)) {
      size_t used = 0;
      int64_t len = 0;
      try {
        len = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != s.size())
        throw std::invalid_argument("--long-context: '" + s + "' is not a length");
      o.long_context_lengths.push_back(len);
    }
    const KVReport r = run_kv_report(o);
    std::cout << (cfg.json ? kv_report_json(r) + "\n" : kv_report_table(r));
    if (!cfg.heatmap.empty()) {
      const std::string problem = write_kv_report_heatmap(r, cfg.heatmap);
      std::cerr << (problem.empty() ? "heatmap: wrote " + cfg.heatmap : "heatmap: " + problem)
                << "\n";
    }
  });
}

}  // namespace octet
