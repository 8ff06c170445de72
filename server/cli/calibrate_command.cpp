// `octet calibrate`: FP8 KV cache scales from calibration text (engine/calibrate.h), written as
// a scales JSON (--kv-scales-path) or a compressed-tensors checkpoint.
#include <unistd.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/calibrate_config.h"
#include "engine/calibrate.h"
#include "engine/model_tokenizer.h"
#include "server/openai/chat_render.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

/// "[#####.....] 3/10 samples" on one stderr line, redrawn in place (terminals only).
void draw_progress(int64_t done, int64_t total) {
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  std::cerr << "\rcalibrate [" << std::string(static_cast<size_t>(filled), '#')
            << std::string(static_cast<size_t>(kWidth - filled), '.') << "] " << done << "/"
            << total << " samples" << (done == total ? "\n" : "") << std::flush;
}

std::string range_str(const std::vector<float>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::ostringstream s;
  s << std::setprecision(4) << *lo;
  if (*hi != *lo) s << ".." << *hi;
  return s.str();
}

}  // namespace

int run_calibrate(int argc, const char* const* argv) {
  return cli::run_command<CalibrateConfig>("octet calibrate", argc, argv, [](CalibrateConfig& cfg) {
    CalibrateRun run;
    run.model = cfg.model;
    run.quantization = cfg.quantization;
    run.device = cfg.device;
    run.tensor_parallel_size = cfg.tensor_parallel_size;
    run.dataset = cfg.dataset;
    run.chat = cfg.chat;
    run.output = cfg.output;
    run.options.num_samples = cfg.num_samples;
    run.options.max_seq_len = cfg.max_seq_len;
    run.options.strategy = cfg.strategy;
    run.options.kv_cache_dtype = cfg.kv_cache_dtype;
    run.options.headroom = static_cast<float>(cfg.headroom);
    run.options.kv_cache_rotation = cfg.kv_cache_rotation;
    auto make_renderer = [](const ModelTokenizer& tok) -> ChatRenderer {
      if (tok.chat_template().empty()) return {};
      return [&tok](const std::vector<std::pair<std::string, std::string>>& turns) {
        nlohmann::json messages = nlohmann::json::array();
        for (const auto& [role, content] : turns)
          messages.push_back({{"role", role}, {"content", content}});
        return server::render_chat(tok.chat_template(), messages, false, tok.bos_token(),
                                   tok.eos_token());
      };
    };
    std::function<void(int64_t, int64_t)> progress;
    if (isatty(STDERR_FILENO)) progress = draw_progress;
    const KVCalibration cal = run_calibrate(run, make_renderer, progress);
    std::cout << "calibrated " << cal.num_samples << " samples, " << cal.num_tokens << " tokens; "
              << cal.strategy << " scales for " << cfg.kv_cache_dtype << " (headroom "
              << cal.headroom << "x"
              << (cfg.kv_cache_rotation == "hadamard" ? ", Hadamard-rotated K" : "") << ") -> "
              << cfg.output << "\n";
    // q_amax (query heads, after RoPE) is informational: the scales are K's and V's.
    const bool q = !cal.q_amax.empty();
    std::cout << "layer  k_amax (heads)       v_amax (heads)       "
              << (q ? "q_amax (heads)       " : "") << "k_scale              v_scale\n";
    for (size_t l = 0; l < cal.k_scale.size(); ++l) {
      std::cout << std::left << std::setw(7) << l << std::setw(21) << range_str(cal.k_amax[l])
                << std::setw(21) << range_str(cal.v_amax[l]);
      if (q) std::cout << std::setw(21) << range_str(cal.q_amax[l]);
      std::cout << std::setw(21) << range_str(cal.k_scale[l]) << range_str(cal.v_scale[l])
                << "\n";
    }
  });
}

}  // namespace octet
