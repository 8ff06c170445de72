// `octet serve`: the OpenAI-compatible HTTP server. Listens first (so /health answers 503
// while the model loads), then loads the engine, then serves until SIGTERM or SIGINT: stop
// accepting (new requests get 503), let in-flight requests finish for up to
// --shutdown-timeout seconds, exit 0. A second signal exits at once.
#include <filesystem>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "config/config_reference.h"
#include "config/file_read.h"
#include "config/serve_config.h"
#include "engine/engine.h"
#include "engine/device_sampling_env.h"
#include "server/openai/chat_render.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"
#include "server/http/http_server.h"
#include "server/cli/rendezvous.h"
#include "server/http/request_log.h"
#include "server/openai/server_context.h"

namespace octet {

namespace {

/// The whole text of a chat template file, at most kMaxChatTemplateBytes (config/file_read.h):
/// /dev/zero or a FIFO is not read without limit. Throws std::runtime_error (a bad file: exit
/// 1) naming `flag` and the path for a directory, a missing, unreadable, oversized or empty file.
std::string read_text_file(const std::string& path, const char* flag) {
  std::string text;
  try {
    text = read_file_bounded(path, kMaxChatTemplateBytes);
  } catch (const FileReadError& e) {
    throw std::runtime_error(std::string(flag) + " " + e.what());
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw std::runtime_error(std::string(flag) + " " + path + ": the file is empty");
  return text;
}

/// Parses and dry-runs a chat template (server::check_chat_template). Throws
/// std::runtime_error naming `what` when it does not parse, exceeds a rendering budget or
/// fails on the sample conversation: a broken template fails start-up, not every request.
void check_template(const std::string& tmpl, const std::string& what, const std::string& bos,
                    const std::string& eos) {
  try {
    server::check_chat_template(tmpl, bos, eos);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(what + ": " + e.what());  // a bad file: exit 1
  }
}

/// Waits for SIGINT/SIGTERM on its own thread (both are blocked in every other thread).
class SignalWaiter {
 public:
  explicit SignalWaiter(std::function<void(int)> on_first) : on_first_(std::move(on_first)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    thread_ = std::thread([this] { run(); });
  }
  ~SignalWaiter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait; ignored as done_ is set
    thread_.join();
  }

 private:
  void run() {
    int count = 0;
    for (;;) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (done_) return;
      }
      if (++count == 1) {
        on_first_(sig);
      } else {
        std::cerr << "octet serve: second signal, exiting now\n";
        _exit(1);
      }
    }
  }

  sigset_t set_{};
  std::function<void(int)> on_first_;
  std::mutex mu_;
  bool done_ = false;
  std::thread thread_;
};

/// Nodes 1.. of a multi-node run: no HTTP server, no scheduler; the steps node 0 sends, until
/// it shuts down (exit 0) or is lost (an error, exit 1).
void follow(ServeConfig& cfg) {
  signal(SIGPIPE, SIG_IGN);
  server::set_rendezvous_exchange(cfg.engine.multinode);
  spdlog::info("octet serve: node {} of {}: following node 0 at {}", cfg.engine.multinode.node_rank,
               cfg.engine.multinode.nnodes, cfg.engine.multinode.master_addr);
  Engine::run_follower(cfg.engine);
}

void serve(ServeConfig& cfg) {
  server::configure_logging(cfg.log_format, cfg.log_level);  // validated: cannot throw here
  if (cfg.engine.multinode.nnodes > 1 && cfg.engine.multinode.node_rank > 0) return follow(cfg);
  // Block the shutdown signals before any thread exists, so that every thread (I/O, engine,
  // OpenMP) inherits the mask and only the SignalWaiter receives them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  server::ServerContext ctx;
  ctx.config = cfg;
  ctx.model_name = cfg.model_name();
  ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::string template_override;
  if (!cfg.chat_template.empty()) {
    template_override = read_text_file(cfg.chat_template, "--chat-template");
    // Parsed and dry-run before the model loads, so a broken file fails at once (the model's
    // BOS/EOS strings are not known yet; the check after loading uses them).
    check_template(template_override, "--chat-template " + cfg.chat_template, "<s>", "</s>");
  }

  std::mutex mu;
  std::condition_variable cv;
  bool stop_requested = false;
  SignalWaiter signals([&](int sig) {
    spdlog::info("octet serve: {} received; draining (up to {} s)",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", cfg.shutdown_timeout);
    ctx.shutting_down.store(true);
    if (!ctx.engine.load()) {
      spdlog::info("octet serve: stopped while loading");
      _exit(0);
    }
    std::lock_guard<std::mutex> lock(mu);
    stop_requested = true;
    cv.notify_all();
  });

  // Destroyed in reverse order: the HTTP server (its sessions abort their requests on a live
  // engine) before the engine.
  std::unique_ptr<Engine> engine;
  // A missing model fails before the port opens (loading errors come later, from the engine;
  // so do those of a dummy model's preset name or config.json).
  std::error_code ec;
  if (cfg.engine.load_format != "dummy" && !std::filesystem::exists(cfg.engine.model, ec))
    throw std::runtime_error(cfg.engine.model + ": no such file or directory");
  auto http = std::make_unique<server::HttpServer>(ctx);
  http->start();
  spdlog::info("octet serve: listening on http://{}:{} (model loading)", cfg.host, http->port());

  server::set_rendezvous_exchange(cfg.engine.multinode);  // --nnodes > 1: the NCCL id
  engine = Engine::create(cfg.engine);
  ctx.chat_template = template_override.empty() ? engine->tokenizer().chat_template() : template_override;
  if (!ctx.chat_template.empty())
    check_template(ctx.chat_template,
                   template_override.empty() ? "the model's chat template (override it with "
                                               "--chat-template FILE)"
                                             : "--chat-template " + cfg.chat_template,
                   engine->tokenizer().bos_token(), engine->tokenizer().eos_token());
  if (cfg.log_format == "json") {
    // One JSON log line per report line, so that a log collector sees nothing but JSON.
    std::istringstream report(engine->startup_report());
    for (std::string line; std::getline(report, line);)
      if (!line.empty()) spdlog::info("{}", line);
  } else {
    std::cerr << engine->startup_report();
  }
  if (ctx.chat_template.empty())
    spdlog::warn("the model has no chat template: /v1/chat/completions answers 400 (use "
                 "--chat-template FILE)");
  ctx.engine.store(engine.get());
  spdlog::info("octet serve: ready, serving '{}' on http://{}:{}", ctx.model_name, cfg.host,
               http->port());

  {
    // Multi-node: a lost node stops the engine (its requests fail with 5xx), and the server
    // exits 1 rather than answer 503 forever (docs/cuda.md "Multi-node"); one node only waits
    // for the stop signal.
    const bool multinode = cfg.engine.multinode.nnodes > 1;
    std::unique_lock<std::mutex> lock(mu);
    if (!multinode) cv.wait(lock, [&] { return stop_requested; });
    while (!cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_requested; })) {
      if (!engine->stats().alive) {
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the errors go out
        throw std::runtime_error("the engine stopped (a node was lost, see the error above); "
                                 "exiting");
      }
    }
  }
  // Drain: the engine finishes what it has; the HTTP side finishes writing those responses.
  engine->stop_accepting();
  // shutdown_timeout is validated to at most a week, so the milliseconds cannot overflow.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(cfg.shutdown_timeout * 1000));
  const bool idle = engine->wait_idle(std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now()));
  while (ctx.active_jobs.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const int64_t left = ctx.active_jobs.load();
  if (idle && left == 0) {
    spdlog::info("octet serve: drained; exiting");
  } else {
    spdlog::warn("octet serve: shutdown timeout; aborting {} unfinished responses", left);
    // Their clients get a complete response (a 503 error, or an error event and [DONE] on a
    // stream) instead of a connection cut mid-stream; bounded, as the clients may not read.
    engine->abort_all();
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (ctx.active_jobs.load() > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Sessions that answered their last request and are reading what their client still sends
  // (a pipeline cut by the shutdown's Connection: close) close within kLingerSeconds (1 s):
  // closing them now, with bytes unread, would reset the connection and could lose the answers
  // already sent. Waited for until none has lingered for 100 ms, at most 1.5 s.
  {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
    auto quiet_since = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() < until) {
      const auto now = std::chrono::steady_clock::now();
      if (ctx.lingering.load() > 0) quiet_since = now;
      if (now - quiet_since >= std::chrono::milliseconds(100)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  http.reset();    // stops the I/O threads; open sessions abort their requests
  ctx.engine.store(nullptr);
  engine.reset();  // aborts anything left
}

}  // namespace

int run_serve(int argc, const char* const* argv) {
  // --help-config-markdown: the configuration reference (docs/config.md) from the option
  // declarations, before the environment is read (the page depends on nothing else).
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) != "--help-config-markdown") continue;
    std::cout << config_reference_markdown();
    std::cout.flush();
    if (std::cout) return 0;
    std::cerr << "octet serve: cannot write the output (stdout)\n";
    return 1;
  }
  // OCTET_<KEY> environment variables become flags (ServeConfig::with_environment).
  std::vector<std::string> args;
  try {
    args = ServeConfig::with_environment(std::vector<std::string>(argv, argv + argc),
                                         [](const std::string& name) { return std::getenv(name.c_str()); });
    device_sampling_override();  // a bad OCTET_DEVICE_SAMPLING fails here, not after loading
  } catch (const std::invalid_argument& e) {
    std::cerr << "octet serve: " << e.what() << "\n";
    return 2;
  }
  std::vector<const char*> ptrs;
  for (const std::string& a : args) ptrs.push_back(a.c_str());
  return cli::run_command<ServeConfig>("octet serve", static_cast<int>(ptrs.size()), ptrs.data(),
                                       [](ServeConfig& cfg) { serve(cfg); });
}

}  // namespace octet
