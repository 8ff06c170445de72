// `octet bench sweep`: bench serve over a grid of workloads (concurrency, input and output
// lengths) and, given --model, of server configurations (kv_cache_dtype, any serve flag), each
// served by an `octet serve` this command starts and stops. Writes results.csv and, when gnuplot
// is installed, PNG plots (bench/sweep.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "bench/serve_bench.h"
#include "bench/sweep.h"
#include "config/bench_serve_config.h"
#include "config/run_program.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

namespace {

/// Follows a growing log file: each poll() reads what was appended since the last one (at most
/// kMaxPollBytes) and hands back its complete lines; memory stays bounded however large the log
/// grows (a line longer than kMaxLineBytes is cut there). tail() is its last few KiB.
class LogFollower {
 public:
  static constexpr size_t kMaxPollBytes = 1 << 20, kMaxLineBytes = 64 << 10, kTailBytes = 4 << 10;
  explicit LogFollower(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> poll() {
    std::vector<std::string> lines;
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path_.c_str(), "rb"), &std::fclose);
    struct stat st {};
    if (!f || ::fstat(fileno(f.get()), &st) != 0 || st.st_size <= offset_ ||
        fseeko(f.get(), offset_, SEEK_SET) != 0)
      return lines;
    std::string chunk(std::min<size_t>(kMaxPollBytes, static_cast<size_t>(st.st_size - offset_)), '\0');
    chunk.resize(std::fread(chunk.data(), 1, chunk.size(), f.get()));
    offset_ += static_cast<off_t>(chunk.size());
    tail_ += chunk;
    if (tail_.size() > kTailBytes) tail_.erase(0, tail_.size() - kTailBytes);
    for (char c : chunk) {
      if (c == '\n') {
        lines.push_back(std::move(line_));
        line_.clear();
      } else if (line_.size() < kMaxLineBytes) {
        line_ += c;
      }
    }
    return lines;
  }
  const std::string& tail() const { return tail_; }

 private:
  std::string path_, line_, tail_;
  off_t offset_ = 0;
};

/// The port of `octet serve`'s "ready, serving 'M' on http://HOST:PORT" line, "" for any other
/// line (plain string search: linear, whatever the line holds).
std::string ready_port(const std::string& line) {
  const size_t ready = line.find("ready, serving ");
  if (ready == std::string::npos) return "";
  const size_t on = line.rfind(" on http://");
  if (on == std::string::npos || on < ready) return "";
  const size_t colon = line.rfind(':');
  if (colon == std::string::npos || colon < on + 11) return "";
  size_t end = colon + 1;
  while (end < line.size() && end - colon <= 5 && line[end] >= '0' && line[end] <= '9') ++end;
  return end > colon + 1 ? line.substr(colon + 1, end - colon - 1) : "";
}

/// `octet serve` in a child process on a free port, its log in a file; stopped with SIGTERM.
class ServerProcess {
 public:
  ServerProcess(const std::vector<std::string>& args, const std::string& log, double timeout_s)
      : log_(log) {
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("cannot fork `octet serve`");
    if (pid_ == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      std::vector<char*> argv;
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    // timeout_s is validated finite, at most a year (BenchSweepConfig::validate).
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    LogFollower follower(log_);
    while (std::chrono::steady_clock::now() < deadline) {
      for (const std::string& line : follower.poll())
        if (const std::string port = ready_port(line); !port.empty()) {
          url_ = "http://127.0.0.1:" + port;
          return;
        }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        follower.poll();
        throw std::runtime_error("`octet serve` exited at start-up (log " + log_ + ", its end):\n" +
                                 follower.tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    stop();
    throw std::runtime_error("`octet serve` did not get ready in time (log " + log_ + ")");
  }
  ~ServerProcess() { stop(); }
  const std::string& url() const { return url_; }
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 300; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return (void)(pid_ = -1);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string log_, url_;
  pid_t pid_ = -1;
};

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}


}  // namespace

int run_bench_sweep(int argc, const char* const* argv) {
  return cli::run_command<BenchSweepConfig>("octet bench sweep", argc, argv, [](BenchSweepConfig& cfg) {
    namespace fs = std::filesystem;
    using namespace bench;
    const std::vector<int64_t> concurrency = parse_positive_list(cfg.max_concurrency, "--max-concurrency");
    const std::vector<Workload> points = workloads(
        concurrency,
        parse_positive_list(cfg.random_input_len, "--random-input-len"),
        parse_positive_list(cfg.random_output_len, "--random-output-len"));
    const std::vector<ServeVariant> variants = serve_variants(cfg.kv_cache_dtype, cfg.serve_grid);
    fs::create_directories(cfg.output_dir);
    const std::string csv_path = cfg.output_dir + "/results.csv";
    std::ofstream csv(csv_path);
    if (!csv) throw std::runtime_error("cannot write " + csv_path);
    csv << csv_header();
    std::map<std::string, std::vector<std::pair<double, double>>> context_itl;  // label -> (ctx, itl)
    const int64_t lowest_c = *std::min_element(concurrency.begin(), concurrency.end());
    std::ofstream quiet("/dev/null");
    int vi = 0;
    for (const ServeVariant& v : variants) {
      std::unique_ptr<ServerProcess> server;
      std::string url = cfg.base_url;
      if (!cfg.model.empty()) {
        std::vector<std::string> args = {"octet", "serve", "--model", cfg.model, "--host",
                                         "127.0.0.1", "--port", "0"};
        for (const std::string& a : v.serve_args()) args.push_back(a);
        for (const std::string& a : words(cfg.serve_args)) args.push_back(a);
        const std::string log = cfg.output_dir + "/serve_" + std::to_string(vi) + ".log";
        std::cout << "starting octet serve (" << v.label() << ")\n" << std::flush;
        server = std::make_unique<ServerProcess>(args, log, cfg.server_start_timeout);
        url = server->url();
      }
      ++vi;
      for (const Workload& w : points) {
        BenchServeConfig b;
        b.base_url = url;
        b.endpoint = cfg.endpoint;
        b.tokenizer = cfg.tokenizer.empty() ? cfg.model : cfg.tokenizer;
        b.random_input_len = w.input_len;
        b.random_output_len = w.output_len;
        b.max_concurrency = w.max_concurrency;
        b.num_prompts = cfg.num_prompts > 0 ? cfg.num_prompts : std::max<int64_t>(8, 4 * w.max_concurrency);
        b.ignore_eos = cfg.ignore_eos;
        b.seed = cfg.seed;
        b.num_warmups = std::min<int64_t>(w.max_concurrency, 4);
        b.ready_check_timeout_sec = 60;
        b.percentile_metrics = "ttft,tpot,itl,e2el";
        b.metric_percentiles = "50,99";
        b.disable_tqdm = true;
        const ServeBenchResult r = run_serve_bench(b, quiet);
        csv << csv_row(v, w, r.metrics, r.run.duration_s) << std::flush;
        std::printf("%-28s c=%-4lld in=%-6lld out=%-5lld  %9.1f tok/s  TTFT %8.2f ms  ITL %7.2f ms"
                    "  failed %lld\n",
                    v.label().c_str(), (long long)w.max_concurrency, (long long)w.input_len,
                    (long long)w.output_len, r.metrics.output_throughput, r.metrics.ttft.median_ms,
                    r.metrics.itl.median_ms, (long long)r.metrics.failed);
        std::fflush(stdout);
        if (w.max_concurrency == lowest_c)
          context_itl[v.label()].emplace_back(decode_context(w), r.metrics.itl.median_ms);
      }
    }
    csv.close();
    // The ITL-against-context points (lowest concurrency) and their least-squares lines.
    std::vector<std::string> labels;
    std::vector<std::pair<std::string, LinearFit>> fits;
    std::ofstream ctx(csv_path + ".context");
    ctx << "variant,context,median_itl_ms\n";
    for (const ServeVariant& v : variants) {
      labels.push_back(v.label());
      std::vector<double> xs, ys;
      for (const auto& [x, y] : context_itl[v.label()]) {
        xs.push_back(x);
        ys.push_back(y);
        ctx << v.label() << ',' << x << ',' << y << "\n";
      }
      const LinearFit f = least_squares(xs, ys);
      fits.emplace_back(v.label(), f);
      if (f.valid)
        std::printf("decode ITL fit (%s): %.4f ms per 1K context tokens + %.3f ms\n",
                    v.label().c_str(), f.slope * 1000, f.intercept);
    }
    ctx.close();
    const std::string script = cfg.output_dir + "/plots.gnuplot";
    std::ofstream(script) << gnuplot_script(csv_path, cfg.output_dir, labels, fits);
    std::cout << "wrote " << csv_path << "\n";
    // No shell: gnuplot is found in $PATH and gets the script's path as one argument.
    if (find_program("gnuplot").empty()) {
      std::cout << "gnuplot not found: no plots drawn (apt-get install gnuplot-nox, then "
                   "`gnuplot " << script << "`)\n";
      return;
    }
    const std::string gnuplot_log = cfg.output_dir + "/gnuplot.log";
    if (run_program({"gnuplot", path_argument(script)}, gnuplot_log) != 0)
      throw std::runtime_error("gnuplot failed: see " + gnuplot_log);
    std::cout << "wrote " << cfg.output_dir << "/throughput_vs_concurrency.png, "
              << "itl_vs_concurrency.png, itl_vs_context.png\n";
  });
}

}  // namespace octet
