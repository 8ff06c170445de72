// OCTET_<KEY> environment variables of `octet serve` (ServeConfig::with_environment): every
// declared option, bools as --x / --no-x, and the precedence flags > environment > --config
// file > defaults, through the real flag parser.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "config/serve_config.h"
#include "server/cli/cli.h"

using octet::ServeConfig;

namespace {

using Env = std::map<std::string, std::string>;

std::vector<std::string> expand(std::vector<std::string> args, const Env& env) {
  args.insert(args.begin(), "serve");
  return ServeConfig::with_environment(args, [&](const std::string& name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

/// Flags and environment as `octet serve` parses them.
ServeConfig parse(std::vector<std::string> args, const Env& env) {
  const std::vector<std::string> full = expand(std::move(args), env);
  std::vector<const char*> argv;
  for (const auto& a : full) argv.push_back(a.c_str());
  ServeConfig cfg;
  std::string help;
  const bool parsed =
      octet::cli::parse_flags(cfg, static_cast<int>(argv.size()), argv.data(), "serve", help);
  REQUIRE(parsed);
  return cfg;
}

}  // namespace

TEST_CASE("env_var_name is OCTET_ and the upper-case key") {
  CHECK(ServeConfig::env_var_name("kv_cache_dtype") == "OCTET_KV_CACHE_DTYPE");
  CHECK(ServeConfig::env_var_name("port") == "OCTET_PORT");
  CHECK(ServeConfig::env_var_name("disable_log_requests") == "OCTET_DISABLE_LOG_REQUESTS");
}

TEST_CASE("variables become flags appended after the command line") {
  CHECK(expand({"--model", "m.gguf"}, {{"OCTET_PORT", "9000"}}) ==
        std::vector<std::string>{"serve", "--model", "m.gguf", "--port", "9000"});
  CHECK(expand({}, {}) == std::vector<std::string>{"serve"});
  // Unknown OCTET_ variables (the scripts' OCTET_CACHE_DIR, ...) and empty values are ignored.
  CHECK(expand({}, {{"OCTET_CACHE_DIR", "/x"}, {"OCTET_HOST", ""}, {"PORT", "1"}}) ==
        std::vector<std::string>{"serve"});
}

TEST_CASE("every declared option is read from its variable, engine options included") {
  const ServeConfig cfg = parse({}, {{"OCTET_MODEL", "/models/m.gguf"},
                                     {"OCTET_PORT", "9123"},
                                     {"OCTET_KV_CACHE_DTYPE", "fp8_e4m3"},
                                     {"OCTET_MAX_NUM_SEQS", "7"},
                                     {"OCTET_SHUTDOWN_TIMEOUT", "2.5"},
                                     {"OCTET_LOG_FORMAT", "json"},
                                     {"OCTET_SERVED_MODEL_NAME", "a name with spaces"}});
  CHECK(cfg.engine.model == "/models/m.gguf");
  CHECK(cfg.port == 9123);
  CHECK(cfg.engine.cache.kv_cache_dtype == "fp8_e4m3");
  CHECK(cfg.engine.scheduler.max_num_seqs == 7);
  CHECK(cfg.shutdown_timeout == 2.5);
  CHECK(cfg.log_format == "json");
  CHECK(cfg.served_model_name == "a name with spaces");
}

TEST_CASE("a flag on the command line overrides its variable, in both spellings") {
  CHECK(parse({"--port", "1"}, {{"OCTET_PORT", "2"}}).port == 1);
  CHECK(parse({"--port=3"}, {{"OCTET_PORT", "2"}}).port == 3);
  // A flag that merely starts like another is not that flag.
  CHECK(parse({"--max-num-seqs", "5"}, {{"OCTET_MAX_NUM_SEQS", "9"}}).engine.scheduler.max_num_seqs ==
        5);
}

TEST_CASE("bool variables: 1/true/yes/on set, 0/false/no/off unset, either flag wins") {
  for (const char* v : {"1", "true", "TRUE", "yes", "on"}) {
    CAPTURE(v);
    CHECK(parse({}, {{"OCTET_DISABLE_LOG_REQUESTS", v}}).disable_log_requests);
  }
  for (const char* v : {"0", "false", "No", "off"}) {
    CAPTURE(v);
    CHECK_FALSE(parse({}, {{"OCTET_ENABLE_PREFIX_CACHING", v}}).engine.cache.enable_prefix_caching);
  }
  CHECK(parse({"--enable-prefix-caching"}, {{"OCTET_ENABLE_PREFIX_CACHING", "0"}})
            .engine.cache.enable_prefix_caching);
  CHECK_FALSE(parse({"--no-disable-log-requests"}, {{"OCTET_DISABLE_LOG_REQUESTS", "1"}})
                  .disable_log_requests);
  try {
    expand({}, {{"OCTET_DISABLE_LOG_REQUESTS", "maybe"}});
    FAIL("no error");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) ==
          "OCTET_DISABLE_LOG_REQUESTS must be 1, true, yes, on, 0, false, no or off, got 'maybe'");
  }
}

TEST_CASE("a bad value is the flag parser's error, as on the command line") {
  CHECK_THROWS_AS(parse({}, {{"OCTET_PORT", "eighty"}}), std::invalid_argument);
}

TEST_CASE("the environment overrides the --config file, which OCTET_CONFIG may name") {
  const std::string path = "/tmp/octet_serve_env_test_" + std::to_string(getpid()) + ".yaml";
  {
    std::ofstream(path) << "port: 7000\nmax_num_waiting: 11\n";
  }
  const ServeConfig a = parse({"--config", path}, {{"OCTET_PORT", "7001"}});
  CHECK(a.port == 7001);
  CHECK(a.max_num_waiting == 11);
  const ServeConfig b = parse({}, {{"OCTET_CONFIG", path}});
  CHECK(b.port == 7000);
  CHECK(b.config == path);
  std::remove(path.c_str());
}
