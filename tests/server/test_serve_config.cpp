// `octet serve` options: flags derived from ServeConfig::visit (with --x / --no-x for bools),
// the YAML config file with the same snake_case keys, and flags overriding the file.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "config/serve_config.h"
#include "server/cli/cli.h"

using octet::ServeConfig;

namespace {

/// Parses flags as `octet serve` would (argv[0] is the command name).
ServeConfig parse(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  ServeConfig cfg;
  std::string help;
  // Called outside REQUIRE so that its exceptions reach parse_error().
  const bool parsed =
      octet::cli::parse_flags(cfg, static_cast<int>(argv.size()), argv.data(), "serve", help);
  REQUIRE(parsed);
  return cfg;
}

std::string parse_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

std::string write_yaml(const std::string& text) {
  static int counter = 0;
  const std::string path = "/tmp/octet_serve_config_test_" + std::to_string(getpid()) + "_" +
                           std::to_string(counter++) + ".yaml";
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("serve defaults", "[server][config]") {
  const ServeConfig c = parse({"--model", "m.gguf"});
  CHECK(c.host == "0.0.0.0");
  CHECK(c.port == 8000);
  CHECK(c.model_name() == "m.gguf");
  CHECK(c.engine.model == "m.gguf");
  CHECK(c.engine.cache.enable_prefix_caching);
  CHECK_FALSE(c.engine.cache.calculate_kv_scales);
  CHECK(c.api_key.empty());
  CHECK(c.shutdown_timeout == 30.0);
  CHECK(c.max_num_waiting == 1024);
}

TEST_CASE("flags for server and engine options", "[server][config]") {
  const ServeConfig c = parse({"--model", "m", "--port", "9001", "--served-model-name", "smol",
                               "--kv-cache-dtype", "fp8_e4m3", "--max-num-seqs", "8",
                               "--api-key", "k", "--shutdown-timeout", "2.5"});
  CHECK(c.port == 9001);
  CHECK(c.model_name() == "smol");
  CHECK(c.engine.cache.kv_cache_dtype == "fp8_e4m3");
  CHECK(c.engine.scheduler.max_num_seqs == 8);
  CHECK(c.api_key == "k");
  CHECK(c.shutdown_timeout == 2.5);
}

TEST_CASE("bool flags have --x and --no-x", "[server][config]") {
  CHECK_FALSE(parse({"--no-enable-prefix-caching"}).engine.cache.enable_prefix_caching);
  CHECK(parse({"--enable-prefix-caching"}).engine.cache.enable_prefix_caching);
  CHECK(parse({"--calculate-kv-scales"}).engine.cache.calculate_kv_scales);
  CHECK_FALSE(parse({"--no-calculate-kv-scales"}).engine.cache.calculate_kv_scales);
  CHECK_FALSE(parse({"--no-enable-chunked-prefill"}).engine.scheduler.enable_chunked_prefill);
  CHECK(parse_error({"--enable-prefix-caching", "--no-enable-prefix-caching"}) ==
        "--enable-prefix-caching and --no-enable-prefix-caching contradict");
}

TEST_CASE("unknown flags and stray words are errors", "[server][config]") {
  CHECK(parse_error({"--no-such-flag"}) != "(no error)");
  CHECK(parse_error({"stray"}) != "(no error)");
  CHECK(parse_error({"--port", "x"}) != "(no error)");
}

TEST_CASE("YAML config file, flags override it", "[server][config]") {
  const std::string path = write_yaml(
      "model: /models/smol.gguf\nport: 8123\nkv_cache_dtype: fp8_e4m3\n"
      "enable_prefix_caching: false\nserved_model_name: smol\nidle_timeout: 5.5\n");
  const ServeConfig a = parse({"--config", path});
  CHECK(a.config == path);
  CHECK(a.engine.model == "/models/smol.gguf");
  CHECK(a.port == 8123);
  CHECK(a.engine.cache.kv_cache_dtype == "fp8_e4m3");
  CHECK_FALSE(a.engine.cache.enable_prefix_caching);
  CHECK(a.model_name() == "smol");
  CHECK(a.idle_timeout == 5.5);
  // Flags win, in either position relative to --config.
  const ServeConfig b = parse({"--port", "9000", "--config=" + path, "--enable-prefix-caching"});
  CHECK(b.port == 9000);
  CHECK(b.engine.cache.enable_prefix_caching);
  CHECK(b.engine.model == "/models/smol.gguf");
  std::remove(path.c_str());
}

TEST_CASE("config file errors name the file and key", "[server][config]") {
  const std::string unknown = write_yaml("port: 1\nbogus_key: 3\n");
  CHECK(parse_error({"--config", unknown}) == "--config " + unknown + ": unknown option 'bogus_key'");
  const std::string bad_type = write_yaml("port: eighty\n");
  CHECK(parse_error({"--config", bad_type}) ==
        "--config " + bad_type + ": 'port' must be an integer, got 'eighty'");
  const std::string nested = write_yaml("config: other.yaml\n");
  CHECK(parse_error({"--config", nested}) ==
        "--config " + nested + ": 'config' cannot be set in a file");
  const std::string list = write_yaml("- a\n- b\n");
  CHECK(parse_error({"--config", list}) ==
        "--config " + list + ": expected a mapping of option keys");
  for (const auto& p : {unknown, bad_type, nested, list}) std::remove(p.c_str());
}

/// The std::runtime_error (a bad file: exit 1) that parsing `args` throws, or "(no error)".
std::string file_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_CASE("a bad config file is named with its path and line, one line, exit 1",
          "[server][config]") {
  using Catch::Matchers::Contains;
  CHECK(file_error({"--config", "/nonexistent/x.yaml"}) ==
        "--config /nonexistent/x.yaml: cannot open: No such file or directory");
  // yaml-cpp kept the first of a repeated key and dropped the other silently.
  const std::string dup = write_yaml("port: 1\nmodel: m\nport: 2\n");
  CHECK(file_error({"--config", dup}) ==
        "--config " + dup + ": line 3: 'port' is set more than once");
  // Not YAML: yaml-cpp's own message, behind the flag and the path.
  const std::string broken = write_yaml("port: [1, 2\n");
  CHECK_THAT(file_error({"--config", broken}), Contains("--config " + broken + ": not valid YAML"));
  const std::string complex_key = write_yaml("? [a, b]\n: 1\n");
  CHECK_THAT(file_error({"--config", complex_key}),
             Contains("--config " + complex_key + ": line 1"));
  // An endless file is read up to kMaxConfigFileBytes, not for ever.
  CHECK_THAT(file_error({"--config", "/dev/zero"}), Contains("--config /dev/zero") &&
                                                        Contains("limit"));
  // Flow nesting deeper than yaml-cpp's guard: an error, not a stack overflow.
  const std::string deep = write_yaml("port: " + std::string(100000, '[') + "\n");
  CHECK_THAT(file_error({"--config", deep}), Contains("--config " + deep));
  for (const auto& p : {dup, broken, complex_key, deep}) std::remove(p.c_str());
}

TEST_CASE("serve validation names the flag", "[server][config]") {
  auto error = [](ServeConfig c) {
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  ServeConfig ok;
  ok.engine.model = "m";
  CHECK(error(ok) == "(no error)");
  ServeConfig c = ok;
  c.port = 70000;
  CHECK(error(c) == "--port must be in [0, 65535], got 70000");
  c = ok;
  c.read_timeout = 0;
  CHECK(error(c) == "--read-timeout must be positive, got 0");
  c = ok;
  c.max_num_waiting = 0;
  CHECK(error(c) == "--max-num-waiting must be positive, got 0");
  c = ok;
  c.engine.model.clear();
  CHECK(error(c) == "--model is required");
  c = ok;
  c.root_path = "/llm";
  CHECK(error(c) == "(no error)");
  for (const char* bad : {"llm", "/", "/llm/", "/l?m", "/l m", "/l%2Fm"}) {
    INFO(bad);
    c.root_path = bad;
    CHECK(error(c).rfind("--root-path must be a path prefix such as /llm", 0) == 0);
  }
}

TEST_CASE("serve options are validated into what their type and arithmetic hold",
          "[server][config]") {
  auto error = [](const std::vector<std::string>& args) {
    try {
      ServeConfig c = parse(args);
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  using Catch::Matchers::Contains;
  const std::vector<std::string> m = {"--model", "m"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.begin(), m.begin(), m.end());
    return a;
  };
  // The issue's examples: a uint32 truncation and seconds -> milliseconds overflows.
  CHECK_THAT(error(with({"--max-header-bytes", "4294967296"})),
             Contains("--max-header-bytes must be in [1, 4294967295]") && Contains("4294967296"));
  CHECK(error(with({"--max-header-bytes", "4294967295", "--max-body-bytes", "1024"})) ==
        "(no error)");
  CHECK_THAT(error(with({"--idle-timeout", "1e16"})), Contains("--idle-timeout must be at most"));
  CHECK_THAT(error(with({"--read-timeout", "1e300"})), Contains("--read-timeout must be at most"));
  CHECK_THAT(error(with({"--shutdown-timeout", "1e300"})),
             Contains("--shutdown-timeout must be at most"));
  CHECK_THAT(error(with({"--shutdown-timeout", "inf"})), Contains("--shutdown-timeout"));
  CHECK_THAT(error(with({"--idle-timeout", "nan"})), Contains("--idle-timeout must be positive"));
  CHECK(error(with({"--idle-timeout", "604800", "--shutdown-timeout", "0"})) == "(no error)");
  CHECK_THAT(error(with({"--max-body-bytes", "2000000000000"})), Contains("--max-body-bytes"));
  CHECK_THAT(error(with({"--max-connections", "0"})), Contains("--max-connections"));
  CHECK_THAT(error(with({"--max-connections", "9223372036854775807"})),
             Contains("--max-connections"));
  CHECK_THAT(error(with({"--num-prepare-threads", "0"})), Contains("--num-prepare-threads"));
  CHECK_THAT(error(with({"--num-prepare-threads", "100000"})), Contains("--num-prepare-threads"));
  CHECK_THAT(error(with({"--max-queued-prepares", "-1"})), Contains("--max-queued-prepares"));
  CHECK_THAT(error(with({"--max-total-body-bytes", "0"})), Contains("--max-total-body-bytes"));
  CHECK_THAT(error(with({"--max-total-body-bytes", "1000", "--max-body-bytes", "2000"})),
             Contains("--max-total-body-bytes") && Contains("--max-body-bytes"));
  CHECK_THAT(error(with({"--max-num-waiting", "9223372036854775807"})),
             Contains("--max-num-waiting"));
  CHECK_THAT(error(with({"--port", "-1"})), Contains("--port"));
  // Engine options, through the serve flags.
  CHECK_THAT(error(with({"--max-num-seqs", "9223372036854775807"})), Contains("--max-num-seqs"));
  CHECK_THAT(error(with({"--max-model-len", "4294967296"})), Contains("--max-model-len"));
  CHECK_THAT(error(with({"--max-num-batched-tokens", "4294967296"})),
             Contains("--max-num-batched-tokens"));
  CHECK_THAT(error(with({"--num-kv-blocks", "4294967296"})), Contains("--num-kv-blocks"));
  CHECK_THAT(error(with({"--kv-cache-memory-bytes", "9223372036854775807"})),
             Contains("--kv-cache-memory-bytes"));
  CHECK_THAT(error(with({"--block-size", "4294967296"})), Contains("--block-size"));
}

TEST_CASE("the YAML config path is validated the same way", "[server][config]") {
  auto error = [](const std::string& path) {
    try {
      ServeConfig c = parse({"--config", path});
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  using Catch::Matchers::Contains;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"max_header_bytes: 4294967296\n", "--max-header-bytes"},
      {"idle_timeout: 1e16\n", "--idle-timeout"},
      {"read_timeout: 1e300\n", "--read-timeout"},
      {"shutdown_timeout: 1e300\n", "--shutdown-timeout"},
      {"max_connections: 0\n", "--max-connections"},
      {"max_num_seqs: 9223372036854775807\n", "--max-num-seqs"},
      {"num_kv_blocks: 4294967296\n", "--num-kv-blocks"}};
  for (const auto& [yaml, flag] : cases) {
    const std::string path = write_yaml("model: m\n" + yaml);
    INFO(yaml);
    CHECK_THAT(error(path), Contains(flag));
    std::remove(path.c_str());
  }
  const std::string ok = write_yaml("model: m\nmax_connections: 8\nnum_prepare_threads: 3\n");
  CHECK(error(ok) == "(no error)");
  const ServeConfig c = parse({"--config", ok});
  CHECK(c.max_connections == 8);
  CHECK(c.num_prepare_threads == 3);
  std::remove(ok.c_str());
}

TEST_CASE("CORS options are vLLM's JSON lists, from flags, YAML and the environment",
          "[server][config][cors]") {
  auto error = [](const std::vector<std::string>& args) {
    try {
      ServeConfig c = parse(args);
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const ServeConfig d = parse({"--model", "m"});
  CHECK(d.allowed_origins == R"(["*"])");
  CHECK(d.allowed_methods == R"(["*"])");
  CHECK(d.allowed_headers == R"(["*"])");
  CHECK_FALSE(d.allow_credentials);
  const ServeConfig f = parse({"--model", "m", "--allowed-origins", R"(["http://a.example"])",
                               "--allowed-methods", "[]", "--allow-credentials"});
  CHECK(f.allowed_origins == R"(["http://a.example"])");
  CHECK(f.allowed_methods == "[]");
  CHECK(f.allow_credentials);
  CHECK(error({"--model", "m", "--allowed-origins", R"(["http://a.example", "*"])",
               "--allowed-headers", R"(["Authorization", "X-Custom"])"}) == "(no error)");
  // vLLM parses them with json.loads; anything but a list of strings is refused by name.
  CHECK(error({"--model", "m", "--allowed-origins", "*"}) ==
        R"(--allowed-origins must be a JSON list of strings such as '["http://localhost:3000"]', )"
        R"(got '*' (not JSON))");
  CHECK(error({"--model", "m", "--allowed-methods", R"("GET")"}) ==
        R"(--allowed-methods must be a JSON list of strings such as '["http://localhost:3000"]', )"
        R"(got '"GET"' (not a list))");
  CHECK(error({"--model", "m", "--allowed-headers", R"(["a", 2])"}) ==
        R"(--allowed-headers must be a JSON list of strings such as '["http://localhost:3000"]', )"
        R"(got '["a", 2]' (element 1 is not a string))");
  CHECK(error({"--model", "m", "--allowed-headers", R"(["a\u000d\u000ab"])"}) ==
        R"(--allowed-headers must be a JSON list of strings such as '["http://localhost:3000"]', )"
        R"(got '["a\u000d\u000ab"]' (element 0 holds a control character))");
  CHECK(error({"--model", "m", "--allowed-origins", ""}).rfind("--allowed-origins must be", 0) ==
        0);

  // YAML: a sequence of strings, or the JSON text as a string (vLLM's form).
  const std::string yaml = write_yaml(
      "model: m\nallowed_origins: [http://a.example, \"https://b.example:8443\"]\n"
      "allowed_methods: '[\"GET\", \"POST\"]'\nallowed_headers: []\nallow_credentials: true\n");
  const ServeConfig y = parse({"--config", yaml});
  CHECK(y.allowed_origins == R"(["http://a.example","https://b.example:8443"])");
  CHECK(y.allowed_methods == R"(["GET", "POST"])");
  CHECK(y.allowed_headers == "[]");
  CHECK(y.allow_credentials);
  CHECK(error({"--config", yaml}) == "(no error)");
  const std::string nested = write_yaml("allowed_origins: [[a]]\n");
  CHECK(error({"--config", nested}) ==
        "--config " + nested + ": 'allowed_origins' must be a list of strings");
  const std::string mapping = write_yaml("allowed_headers: {a: b}\n");
  CHECK(error({"--config", mapping}) ==
        "--config " + mapping + ": 'allowed_headers' must be a list of strings");
  const std::string not_json = write_yaml("model: m\nallowed_origins: http://a.example\n");
  CHECK(error({"--config", not_json}).rfind("--allowed-origins must be a JSON list", 0) == 0);
  for (const auto& p : {yaml, nested, mapping, not_json}) std::remove(p.c_str());

  // OCTET_ALLOWED_ORIGINS becomes the flag.
  const std::vector<std::string> args =
      ServeConfig::with_environment({"serve"}, [](const std::string& name) -> const char* {
        return name == "OCTET_ALLOWED_ORIGINS" ? R"(["http://a.example"])" : nullptr;
      });
  CHECK(args == std::vector<std::string>{"serve", "--allowed-origins", R"(["http://a.example"])"});
}
