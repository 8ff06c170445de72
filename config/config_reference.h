#pragma once
// The configuration reference (docs/config.md), made from the same visit() declarations that
// make each command's flags, `octet serve`'s config-file keys and its OCTET_<KEY> environment
// variables (STYLE.md 4), so the page cannot name an option, a default or a help text the
// binary does not have. `octet serve --help-config-markdown` prints it; a test compares that
// output with the committed docs/config.md byte for byte.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace octet {

/// One option as the reference shows it.
struct OptionDoc {
  std::string key;            // snake_case name: the YAML key ("kv_cache_dtype")
  std::string flag;           // "--kv-cache-dtype" (a bool also has "--no-" + the rest)
  std::string type;           // "string", "integer", "number" or "bool"
  std::string default_value;  // as a user types it: auto, 8000, 0.9, true, "" (empty string)
  std::string help;           // the declared help text, unescaped
};

/// "kv_cache_dtype" -> "--kv-cache-dtype" (the rule of server/cli/cli.h's flag_name).
std::string flag_of_key(std::string_view key);

/// A declared default as a user types it on the command line or in YAML: strings as they are
/// ("" for the empty string), integers in decimal, bools true / false, numbers in the shortest
/// form that reads back to the same double (60, 0.9, 0).
std::string format_default(const std::string& v);
std::string format_default(int64_t v);
std::string format_default(double v);
std::string format_default(bool v);

/// Every option of `Config` (a struct with a static visit(Config&, Visitor), config/*.h) in
/// visit() order, with the defaults of a default-constructed Config: the declared defaults,
/// never a value measured on this machine (thread counts and devices are declared 0 / auto).
template <class Config>
std::vector<OptionDoc> describe_options() {
  Config defaults;
  std::vector<OptionDoc> out;
  Config::visit(defaults, [&](auto& field, const char* key, const char* help) {
    using T = std::remove_cvref_t<decltype(field)>;
    static_assert(std::is_same_v<T, std::string> || std::is_same_v<T, int64_t> ||
                      std::is_same_v<T, double> || std::is_same_v<T, bool>,
                  "describe_options: add the option type to OptionDoc::type");
    const char* type = std::is_same_v<T, bool>      ? "bool"
                       : std::is_same_v<T, int64_t> ? "integer"
                       : std::is_same_v<T, double>  ? "number"
                                                    : "string";
    out.push_back(OptionDoc{key, flag_of_key(key), type, format_default(field), help});
  });
  return out;
}

/// `text` safe inside a Markdown table cell: '|' -> "\|", '\' -> "\\", '<' -> "&lt;" and
/// '&' -> "&amp;" (so "<|im_start|>" is shown, not read as an HTML tag). Everything else,
/// '>' included, is kept.
std::string escape_markdown_cell(std::string_view text);

/// A Markdown table with one row per option. with_file_and_env adds the columns of
/// `octet serve`: the YAML key of --config files ("-" for the option named "config", which a
/// file cannot set) and the environment variable (ServeConfig::env_var_name).
std::string options_table(const std::vector<OptionDoc>& options, bool with_file_and_env);

/// The whole of docs/config.md: a header (precedence, how to regenerate), then one section per
/// command (`octet serve` first, with YAML keys and environment variables; the other commands
/// take flags only). Depends on nothing but the declarations: not on the environment, the
/// machine or the current directory.
std::string config_reference_markdown();

}  // namespace octet
