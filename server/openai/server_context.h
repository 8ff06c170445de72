#pragma once
// State shared by every HTTP connection of `octet serve`: the configuration, the engine (null
// while the model loads), the shutdown flag and the server-side metrics.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "config/serve_config.h"
#include "engine/engine.h"
#include "server/openai/metrics.h"

namespace octet::server {

struct ServerContext {
  ServeConfig config;
  std::string model_name;             // what requests must name (ServeConfig::model_name())
  std::atomic<Engine*> engine{nullptr};  // set once loaded; owned by the serve command
  std::string chat_template;          // --chat-template file or the model's; set before engine
  std::atomic<bool> shutting_down{false};
  std::atomic<int64_t> lingering{0};     // sessions reading and discarding before their close
  std::atomic<int64_t> active_jobs{0};   // generation requests whose response is not yet sent
  ServerMetrics metrics;
  int64_t created = 0;                // Unix seconds at start-up (/v1/models)
  // Engine-thread callbacks post to the I/O threads only while io_open, checked under
  // post_mu, so nothing is posted to an io_context that is stopping or gone.
  std::mutex post_mu;
  bool io_open = true;
};

}  // namespace octet::server
