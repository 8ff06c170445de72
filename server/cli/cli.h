#pragma once
// Command-line parsing derived from a config struct's field list (config/*.h `visit`):
// field "max_tokens" becomes flag --max-tokens; a bool field "x" becomes the pair --x / --no-x
// (vLLM's BooleanOptionalAction: --x sets true, --no-x false, neither keeps the default). A
// config with `apply_config_file(path)` and a "config" field reads that file (--config FILE)
// first, so flags given on the command line override the file. Uses Boost.program_options.
#include <cstdint>
#include <cstring>
#include <deque>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <boost/program_options.hpp>

namespace octet::cli {

/// "max_tokens" -> "max-tokens".
inline std::string flag_name(const char* key) {
  std::string s(key);
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

template <class Config, class = void>
struct has_config_file : std::false_type {};
template <class Config>
struct has_config_file<Config, std::void_t<decltype(std::declval<Config&>().apply_config_file(
                                   std::string()))>> : std::true_type {};

/// The value of --config FILE / --config=FILE in argv, or "" when absent.
inline std::string find_config_flag(int argc, const char* const* argv) {
  std::string path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config") && i + 1 < argc) path = argv[++i];
    else if (!std::strncmp(argv[i], "--config=", 9)) path = argv[i] + 9;
  }
  return path;
}

/// Parses argv (after the subcommand) into `config`. Returns false and fills `help` when
/// --help was given. Throws std::invalid_argument with program_options' message for unknown
/// flags or bad values, and when both --x and --no-x are given.
template <class Config>
bool parse_flags(Config& config, int argc, const char* const* argv, const std::string& usage,
                 std::string& help) {
  namespace po = boost::program_options;
  if constexpr (has_config_file<Config>::value) {
    const std::string path = find_config_flag(argc, argv);
    if (!path.empty()) config.apply_config_file(path);
  }
  po::options_description desc(usage);
  desc.add_options()("help,h", "show this help");
  struct BoolFlag {
    bool* field;
    std::string name;
    bool set = false, unset = false;
  };
  std::deque<BoolFlag> bools;  // stable addresses for bool_switch
  Config::visit(config, [&](auto& field, const char* key, const char* text) {
    using T = std::remove_reference_t<decltype(field)>;
    const std::string flag = flag_name(key);
    if constexpr (std::is_same_v<T, bool>) {
      BoolFlag& b = bools.emplace_back(BoolFlag{&field, flag});
      const std::string help_text = std::string(text) + (field ? " (default: on)" : "");
      desc.add_options()(flag.c_str(), po::bool_switch(&b.set), help_text.c_str());
      desc.add_options()(("no-" + flag).c_str(), po::bool_switch(&b.unset),
                         ("turn --" + flag + " off").c_str());
    } else {
      desc.add_options()(flag.c_str(), po::value<T>(&field)->default_value(field), text);
    }
  });
  po::variables_map vm;
  try {
    // No positional arguments (a stray word is an error, not silently dropped) and no
    // abbreviated flags.
    const po::positional_options_description no_positional;
    po::store(po::command_line_parser(argc, argv)
                  .options(desc)
                  .positional(no_positional)
                  .style(po::command_line_style::default_style &
                         ~po::command_line_style::allow_guessing)
                  .run(),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw std::invalid_argument(e.what());
  }
  for (const BoolFlag& b : bools) {
    if (b.set && b.unset)
      throw std::invalid_argument("--" + b.name + " and --no-" + b.name + " contradict");
    if (b.set) *b.field = true;
    if (b.unset) *b.field = false;
  }
  if (vm.count("help")) {
    std::ostringstream os;
    os << desc;
    help = os.str();
    return false;
  }
  return true;
}

}  // namespace octet::cli
