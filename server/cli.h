#pragma once
// Command-line parsing derived from a config struct's field list (config/*.h `visit`):
// field "max_tokens" becomes flag --max-tokens; bool fields are switches. Uses
// Boost.program_options.
#include <cstdint>
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

/// Parses argv (after the subcommand) into `config`. Returns false and fills `help` when
/// --help was given. Throws std::invalid_argument with program_options' message for unknown
/// flags or bad values.
template <class Config>
bool parse_flags(Config& config, int argc, const char* const* argv, const std::string& usage,
                 std::string& help) {
  namespace po = boost::program_options;
  po::options_description desc(usage);
  desc.add_options()("help,h", "show this help");
  Config::visit(config, [&](auto& field, const char* key, const char* text) {
    using T = std::remove_reference_t<decltype(field)>;
    const std::string flag = flag_name(key);
    if constexpr (std::is_same_v<T, bool>) {
      desc.add_options()(flag.c_str(), po::bool_switch(&field), text);
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
  if (vm.count("help")) {
    std::ostringstream os;
    os << desc;
    help = os.str();
    return false;
  }
  return true;
}

}  // namespace octet::cli
