// The configuration reference (config/config_reference.h, docs/config.md) checked against
// rows written by hand from the declarations in config/*.h, so the generator is not only
// compared with its own output (tests/server/test_config_reference_cli.cpp does that, against
// the committed file).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config_reference.h"

using namespace octet;

namespace {

/// The text of section "## `command`" up to the next "## " heading.
std::string section(const std::string& doc, const std::string& command) {
  const std::string heading = "\n## `" + command + "`\n";
  const size_t begin = doc.find(heading);
  REQUIRE(begin != std::string::npos);
  const size_t end = doc.find("\n## ", begin + heading.size());
  return doc.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

/// The table row of `flag` in `text` (the line starting "| `flag`"), or "" when absent.
std::string row(const std::string& text, const std::string& flag) {
  const std::string start = "\n| `" + flag + "`";
  const size_t at = text.find(start);
  if (at == std::string::npos) return "";
  const size_t end = text.find('\n', at + 1);
  return text.substr(at + 1, end - at - 1);
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

/// A config written for this test: one option of each type, help texts with Markdown specials.
struct ToyConfig {
  std::string name = "a|b";
  int64_t count = -3;
  double ratio = 0.25;
  bool flag = false;
  std::string empty;

  template <class Visitor>
  static void visit(ToyConfig& c, Visitor&& v) {
    v(c.name, "name", "x | y, <s> & \\n");
    v(c.count, "count", "how many");
    v(c.ratio, "ratio", "a fraction");
    v(c.flag, "some_flag", "on or off");
    v(c.empty, "empty", "nothing");
  }
};

}  // namespace

TEST_CASE("serve: kv_cache_dtype's row names its flag, key, variable and default auto",
          "[config][reference]") {
  const std::string serve = section(config_reference_markdown(), "octet serve");
  // CacheConfig::kv_cache_dtype = "auto" (config/engine_config.h).
  const std::string r = row(serve, "--kv-cache-dtype");
  INFO(r);
  CHECK(starts_with(r, "| `--kv-cache-dtype` | `kv_cache_dtype` | `OCTET_KV_CACHE_DTYPE` | "
                       "string | `auto` | KV cache dtype: auto (bf16), bf16 (= bfloat16), "));
  CHECK(r.size() > 2);
  CHECK(r.substr(r.size() - 2) == " |");
}

TEST_CASE("serve: exact rows of an integer, a number, a bool and an empty string",
          "[config][reference]") {
  const std::string serve = section(config_reference_markdown(), "octet serve");
  CHECK(row(serve, "--port") ==
        "| `--port` | `port` | `OCTET_PORT` | integer | `8000` | TCP port to listen on (0 = any "
        "free port, printed at start-up) |");
  // 16 << 20 = 16777216, as a user would type it.
  CHECK(row(serve, "--max-body-bytes") ==
        "| `--max-body-bytes` | `max_body_bytes` | `OCTET_MAX_BODY_BYTES` | integer | "
        "`16777216` | largest request body accepted (413 beyond) |");
  CHECK(row(serve, "--idle-timeout") ==
        "| `--idle-timeout` | `idle_timeout` | `OCTET_IDLE_TIMEOUT` | number | `60` | seconds a "
        "keep-alive connection may stay idle before it is closed |");
  CHECK(row(serve, "--enable-prefix-caching") ==
        "| `--enable-prefix-caching` / `--no-enable-prefix-caching` | `enable_prefix_caching` | "
        "`OCTET_ENABLE_PREFIX_CACHING` | bool | `true` | reuse KV blocks of identical prompt "
        "prefixes (--no-enable-prefix-caching turns it off) |");
  CHECK(row(serve, "--disable-log-requests") ==
        "| `--disable-log-requests` / `--no-disable-log-requests` | `disable_log_requests` | "
        "`OCTET_DISABLE_LOG_REQUESTS` | bool | `false` | do not write the access-log line of "
        "each request (method, path, status, tokens, TTFT, latency) |");
  CHECK(row(serve, "--served-model-name") ==
        "| `--served-model-name` | `served_model_name` | `OCTET_SERVED_MODEL_NAME` | string | "
        "`\"\"` | model name clients use in requests and /v1/models (default: --model as given) |");
}

TEST_CASE("serve: machine-dependent options show their declared symbolic defaults",
          "[config][reference]") {
  const std::string serve = section(config_reference_markdown(), "octet serve");
  CHECK(starts_with(row(serve, "--device"),
                    "| `--device` | `device` | `OCTET_DEVICE` | string | `auto` | "));
  CHECK(starts_with(row(serve, "--threads"),
                    "| `--threads` | `threads` | `OCTET_THREADS` | integer | `0` | CPU worker "));
  CHECK(starts_with(row(serve, "--gpu-memory-utilization"),
                    "| `--gpu-memory-utilization` | `gpu_memory_utilization` | "
                    "`OCTET_GPU_MEMORY_UTILIZATION` | number | `0` | "));
  CHECK(starts_with(row(serve, "--http-threads"),
                    "| `--http-threads` | `http_threads` | `OCTET_HTTP_THREADS` | integer | `2` | "));
}

TEST_CASE("serve: --config has no YAML key (a file cannot name another file)",
          "[config][reference]") {
  const std::string serve = section(config_reference_markdown(), "octet serve");
  CHECK(starts_with(row(serve, "--config"), "| `--config` | - | `OCTET_CONFIG` | string | `\"\"` | "));
}

TEST_CASE("serve lists the HTTP options, then the engine's, in declaration order",
          "[config][reference]") {
  const std::string serve = section(config_reference_markdown(), "octet serve");
  const std::vector<std::string> order = {
      "--config", "--host", "--port", "--disable-log-requests", "--model", "--load-format",
      "--nnodes", "--kv-cache-dtype", "--enable-prefix-caching", "--max-num-seqs",
      "--scheduling-policy"};
  size_t last = 0;
  for (const std::string& f : order) {
    INFO(f);
    const size_t at = serve.find("\n| `" + f + "`");
    REQUIRE(at != std::string::npos);
    CHECK(at > last);
    last = at;
  }
  CHECK(row(serve, "--max-tokens").empty());  // a generate option, not serve's
}

TEST_CASE("other commands: flags only, with their own defaults", "[config][reference]") {
  const std::string doc = config_reference_markdown();
  const std::string generate = section(doc, "octet generate");
  CHECK(generate.find("| Flag | Type | Default | Description |\n|---|---|---|---|\n") !=
        std::string::npos);
  CHECK(row(generate, "--max-tokens") ==
        "| `--max-tokens` | integer | `128` | maximum number of tokens to generate (>= 0) |");
  CHECK(row(generate, "--temperature") ==
        "| `--temperature` | number | `1` | sampling temperature; 0 (below 1e-5) = greedy |");
  CHECK(generate.find("OCTET_") == std::string::npos);
  // PlanConfig's own defaults differ from serve's: fp8 and 0.9.
  const std::string plan = section(doc, "octet plan");
  CHECK(row(plan, "--kv-cache-dtype") ==
        "| `--kv-cache-dtype` | string | `fp8` | auto, bf16, fp16, fp8, fp8_e4m3 or fp8_e5m2 |");
  CHECK(row(plan, "--gpu-memory-utilization") ==
        "| `--gpu-memory-utilization` | number | `0.9` | fraction of device memory used |");
  for (const char* c : {"octet perplexity", "octet quantize", "octet calibrate", "octet kv-report",
                        "octet bench latency", "octet bench engine", "octet bench serve",
                        "octet bench sweep"}) {
    INFO(c);
    CHECK(section(doc, c).find("| `--") != std::string::npos);
  }
  CHECK(row(section(doc, "octet bench sweep"), "--ignore-eos") ==
        "| `--ignore-eos` / `--no-ignore-eos` | bool | `true` | every request makes its full "
        "output length |");
}

TEST_CASE("the header states the precedence and how to regenerate the file",
          "[config][reference]") {
  const std::string doc = config_reference_markdown();
  CHECK(starts_with(doc, "# octet configuration reference\n"));
  CHECK(doc.find("Flags > environment > file > defaults.") != std::string::npos);
  CHECK(doc.find("build/octet serve --help-config-markdown > docs/config.md") !=
        std::string::npos);
  CHECK(doc.find("[octet bench serve](#octet-bench-serve)") != std::string::npos);
}

TEST_CASE("the reference does not read the environment", "[config][reference]") {
  const std::string before = config_reference_markdown();
  setenv("OCTET_PORT", "1234", 1);
  setenv("OCTET_KV_CACHE_DTYPE", "fp8", 1);
  const std::string after = config_reference_markdown();
  unsetenv("OCTET_PORT");
  unsetenv("OCTET_KV_CACHE_DTYPE");
  CHECK(before == after);
}

TEST_CASE("describe_options: types, defaults as typed, flags", "[config][reference]") {
  const std::vector<OptionDoc> d = describe_options<ToyConfig>();
  REQUIRE(d.size() == 5);
  CHECK(d[0].key == "name");
  CHECK(d[0].flag == "--name");
  CHECK(d[0].type == "string");
  CHECK(d[0].default_value == "a|b");
  CHECK(d[1].type == "integer");
  CHECK(d[1].default_value == "-3");
  CHECK(d[2].type == "number");
  CHECK(d[2].default_value == "0.25");
  CHECK(d[3].flag == "--some-flag");
  CHECK(d[3].type == "bool");
  CHECK(d[3].default_value == "false");
  CHECK(d[4].default_value == "\"\"");
}

TEST_CASE("format_default: shortest round-trip numbers", "[config][reference]") {
  CHECK(format_default(0.0) == "0");
  CHECK(format_default(60.0) == "60");
  CHECK(format_default(0.9) == "0.9");
  CHECK(format_default(1e-5) == "1e-05");
  CHECK(format_default(int64_t{1} << 40) == "1099511627776");
  CHECK(format_default(true) == "true");
  CHECK(format_default(std::string("fcfs")) == "fcfs");
}

TEST_CASE("options_table escapes '|', '<', '&' and backslashes in help, '|' in defaults",
          "[config][reference]") {
  const std::string t = options_table(describe_options<ToyConfig>(), false);
  CHECK(t ==
        "| Flag | Type | Default | Description |\n"
        "|---|---|---|---|\n"
        "| `--name` | string | `a\\|b` | x \\| y, &lt;s> &amp; \\\\n |\n"
        "| `--count` | integer | `-3` | how many |\n"
        "| `--ratio` | number | `0.25` | a fraction |\n"
        "| `--some-flag` / `--no-some-flag` | bool | `false` | on or off |\n"
        "| `--empty` | string | `\"\"` | nothing |\n");
  const std::string served = options_table(describe_options<ToyConfig>(), true);
  CHECK(row(served, "--count") ==
        "| `--count` | `count` | `OCTET_COUNT` | integer | `-3` | how many |");
  CHECK(escape_markdown_cell("<|im_start|>") == "&lt;\\|im_start\\|>");
}
