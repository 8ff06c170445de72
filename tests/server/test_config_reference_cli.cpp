// docs/config.md against the binary: the committed page is byte for byte what
// `octet serve --help-config-markdown` prints, and every flag, YAML key and environment
// variable the page names for `octet serve` is accepted by the real parsers with the default
// the page gives, and leaves the config at its defaults.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_run.h"
#include "config/config_reference.h"
#include "config/serve_config.h"
#include "server/cli/cli.h"

using octet::OptionDoc;
using octet::ServeConfig;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

/// The first line where a and b differ (1-based) and both lines, for the failure message.
std::string first_difference(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string la, lb;
  for (int line = 1;; ++line) {
    const bool ga = static_cast<bool>(std::getline(sa, la));
    const bool gb = static_cast<bool>(std::getline(sb, lb));
    if (!ga && !gb) return "(only the final newline differs)";
    if (!ga || !gb || la != lb)
      return "line " + std::to_string(line) + ":\n  docs/config.md: " + (ga ? la : "(end)") +
             "\n  binary:         " + (gb ? lb : "(end)");
  }
}

/// The documented options of `octet serve` as one comparable text (key = default per line).
std::string values_of(ServeConfig& c) {
  std::ostringstream os;
  ServeConfig::visit(c, [&](auto& field, const char* key, const char*) {
    os << key << " = " << octet::format_default(field) << "\n";
  });
  return os.str();
}

ServeConfig parse(std::vector<std::string> args) {
  args.insert(args.begin(), "serve");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  ServeConfig cfg;
  std::string help;
  const bool parsed =
      octet::cli::parse_flags(cfg, static_cast<int>(argv.size()), argv.data(), "serve", help);
  REQUIRE(parsed);
  return cfg;
}

/// The value to type for a documented default ("" stands for the empty string).
std::string typed(const OptionDoc& o) { return o.default_value == "\"\"" ? "" : o.default_value; }

/// `s` as a YAML double-quoted scalar (a default may hold quotes: ["*"]).
std::string yaml_quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

}  // namespace

TEST_CASE("docs/config.md is what octet serve --help-config-markdown prints",
          "[server][config][reference]") {
  // A set OCTET_ variable must not change the page.
  const octet::testing::RunResult r = octet::testing::run_command(
      "OCTET_PORT=1234 OCTET_KV_CACHE_DTYPE=fp8 " + std::string(OCTET_BINARY) +
      " serve --help-config-markdown");  // stdout only
  REQUIRE(r.exit_code == 0);
  const std::string& out = r.output;
  const std::string committed = read_file(std::string(OCTET_SOURCE_DIR) + "/docs/config.md");
  if (out != committed)
    FAIL("docs/config.md is out of date: regenerate it from the repository root with\n"
         "  build/octet serve --help-config-markdown > docs/config.md\nand commit it. First "
         "difference at " + first_difference(committed, out));
  CHECK(out == octet::config_reference_markdown());
}

TEST_CASE("every documented serve flag parses with its documented default",
          "[server][config][reference]") {
  ServeConfig defaults;
  const std::string expected = values_of(defaults);
  for (const OptionDoc& o : octet::describe_options<ServeConfig>()) {
    INFO(o.flag << " " << o.default_value);
    REQUIRE(o.flag == "--" + octet::cli::flag_name(o.key.c_str()));
    if (o.type == "bool") {
      ServeConfig c = parse({o.default_value == "true" ? o.flag : "--no-" + o.flag.substr(2)});
      CHECK(values_of(c) == expected);
    } else if (o.key != "config") {  // --config "" reads no file
      ServeConfig c = parse({o.flag, typed(o)});
      CHECK(values_of(c) == expected);
    }
  }
}

TEST_CASE("every documented YAML key is read with its documented default",
          "[server][config][reference]") {
  std::ostringstream yaml;
  for (const OptionDoc& o : octet::describe_options<ServeConfig>()) {
    if (o.key == "config") continue;  // documented as not a file key
    yaml << o.key << ": " << (o.type == "string" ? yaml_quoted(typed(o)) : o.default_value)
         << "\n";
  }
  const std::string path = "/tmp/octet_config_reference_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(path) << yaml.str();
  ServeConfig c;
  CHECK_NOTHROW(c.apply_config_file(path));
  std::remove(path.c_str());
  ServeConfig defaults;
  CHECK(values_of(c) == values_of(defaults));
}

TEST_CASE("every documented environment variable becomes its flag",
          "[server][config][reference]") {
  ServeConfig defaults;
  const std::string expected = values_of(defaults);
  for (const OptionDoc& o : octet::describe_options<ServeConfig>()) {
    if (o.key == "config" || typed(o).empty()) continue;  // an empty variable counts as unset
    const std::string var = ServeConfig::env_var_name(o.key);
    const std::string value = typed(o);
    INFO(var << "=" << value);
    const std::vector<std::string> args =
        ServeConfig::with_environment({"serve"}, [&](const std::string& name) -> const char* {
          return name == var ? value.c_str() : nullptr;
        });
    REQUIRE(args.size() >= 2);
    const std::string want = o.type != "bool" ? o.flag
                             : value == "true" ? o.flag
                                               : "--no-" + o.flag.substr(2);
    CHECK(args[1] == want);
    std::vector<std::string> rest(args.begin() + 1, args.end());
    ServeConfig c = parse(rest);
    CHECK(values_of(c) == expected);
  }
}
