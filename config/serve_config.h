#pragma once
// Options of `octet serve`: the HTTP front end's own settings followed by every EngineArgs
// option, each declared once (name, default, help). Flags (--max-num-waiting), config-file keys
// (max_num_waiting, in the YAML file given by --config) and the startup printout derive from
// visit() (STYLE.md 4). Every option is also read from an environment variable, OCTET_ and its
// key in upper case (OCTET_KV_CACHE_DTYPE for --kv-cache-dtype; with_environment()). Flags
// override the environment, the environment overrides the file, the file the defaults.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/engine_args.h"

namespace octet {

struct ServeConfig {
  /// Longest timeout accepted (one week): far from the overflow of a millisecond clock.
  static constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;

  std::string config;                // YAML file of the same snake_case keys ("" = none)
  std::string host = "0.0.0.0";
  int64_t port = 8000;
  std::string served_model_name;     // "" = the --model argument as given (vLLM's default)
  std::string api_key;  // "" = none; else required on every path but /health and /metrics
  // CORS (vLLM's flags, Starlette's CORSMiddleware): JSON lists of strings, server/http/cors.h.
  std::string allowed_origins = R"(["*"])";
  std::string allowed_methods = R"(["*"])";
  std::string allowed_headers = R"(["*"])";
  bool allow_credentials = false;
  std::string root_path;             // "" = none; "/llm": /llm/v1/... is answered as /v1/...
  std::string chat_template;         // Jinja file overriding the model's template ("" = none)
  bool special_tokens_in_content = true;  // false = message contents are plain text
  bool enable_auto_tool_choice = false;   // tool_choice "auto" (needs tool_call_parser)
  std::string tool_call_parser;           // hermes | llama3_json | mistral ("" = none)
  int64_t max_body_bytes = 16 << 20;     // larger bodies get 413
  int64_t max_header_bytes = 16 << 10;   // larger request headers get 431
  double idle_timeout = 60.0;        // seconds a keep-alive connection may wait for a request
  double read_timeout = 30.0;        // seconds to receive a body / to accept a response write
  double shutdown_timeout = 30.0;    // seconds in-flight requests get after SIGTERM/SIGINT
  int64_t max_num_waiting = 1024;    // engine requests waiting before new ones get 503
  int64_t max_logprobs = 20;         // largest logprobs / top_logprobs / prompt_logprobs (vLLM);
                                     // -1 = the vocabulary size
  bool enable_prompt_tokens_details = false;  // usage.prompt_tokens_details (vLLM's flag)
  bool return_tokens_as_token_ids = false;    // logprob tokens as "token_id:N" (vLLM's flag)
  int64_t http_threads = 2;          // I/O threads (they only parse, enqueue and stream)
  int64_t num_prepare_threads = 2;   // threads that parse, render and tokenize request bodies
  int64_t max_queued_prepares = 64;  // requests being prepared or queued before new ones get 503
  int64_t max_connections = 512;     // open client connections before new ones get 503
  int64_t max_total_body_bytes = 256 << 20;  // request-body bytes held across connections
  std::string log_format = "text";   // text | json (one JSON object per line)
  std::string log_level = "info";    // trace | debug | info | warning | error | critical | off
  bool disable_log_requests = false;  // true = no access-log line per request
  EngineArgs engine;

  template <class Visitor>
  static void visit(ServeConfig& c, Visitor&& v) {
    v(c.config, "config", "YAML file with any of these options as snake_case keys; flags "
                          "given on the command line override it. Every option is also read "
                          "from the environment variable OCTET_<KEY> (e.g. "
                          "OCTET_KV_CACHE_DTYPE=fp8; a bool: 1/true/yes/on or 0/false/no/off) "
                          "when its flag is absent: flags > environment > file > defaults");
    v(c.host, "host", "address to listen on");
    v(c.port, "port", "TCP port to listen on (0 = any free port, printed at start-up)");
    v(c.served_model_name, "served_model_name",
      "model name clients use in requests and /v1/models (default: --model as given)");
    v(c.api_key, "api_key",
      "require 'Authorization: Bearer KEY' on every path except /health and /metrics "
      "(default: none)");
    v(c.allowed_origins, "allowed_origins",
      "CORS, as vLLM's flag: JSON list of the origins whose browser pages may call the API "
      "([\"*\"]: any; '[\"http://localhost:3000\"]': that one; []: none; in a --config "
      "file also a YAML list). A preflight (OPTIONS with Origin and "
      "Access-Control-Request-Method) is answered before --api-key is checked; a response to "
      "an allowed Origin carries Access-Control-Allow-Origin");
    v(c.allowed_methods, "allowed_methods",
      "CORS, as vLLM's flag: JSON list of the methods a preflight may ask for ([\"*\"]: "
      "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT)");
    v(c.allowed_headers, "allowed_headers",
      "CORS, as vLLM's flag: JSON list of the request headers a preflight may ask for "
      "([\"*\"]: any, echoed back; Accept, Accept-Language, Content-Language and "
      "Content-Type are always allowed)");
    v(c.allow_credentials, "allow_credentials",
      "CORS, as vLLM's flag: let pages send requests with credentials (cookies, fetch's "
      "credentials: \"include\"): responses to an allowed origin name that origin (never "
      "\"*\") and carry Access-Control-Allow-Credentials: true");
    v(c.root_path, "root_path",
      "path prefix under which a reverse proxy forwards requests, as vLLM's --root-path: with "
      "/llm, /llm/v1/completions is answered as /v1/completions (paths without the prefix "
      "still work)");
    v(c.chat_template, "chat_template",
      "Jinja chat template file overriding the model's own template");
    v(c.special_tokens_in_content, "special_tokens_in_content",
      "parse special-token text (<|im_start|>, <|eot_id|>, ...) inside chat message contents "
      "as control tokens, as vLLM and Hugging Face do; --no-special-tokens-in-content "
      "tokenizes contents as plain text, so that a user cannot forge a system turn (the "
      "template's own special tokens still count)");
    v(c.enable_auto_tool_choice, "enable_auto_tool_choice",
      "allow tool_choice \"auto\" (the default when a request has tools): the model decides "
      "when to call tools, and --tool-call-parser reads the calls from its output (vLLM's "
      "flag; \"required\" and named tool choices work without it)");
    v(c.tool_call_parser, "tool_call_parser",
      "how tool calls are read from the model's output under tool_choice \"auto\": hermes "
      "(<tool_call>{...}</tool_call>: Hermes, Qwen2.5, Qwen3), llama3_json (Llama 3.1 / 3.2 "
      "JSON calls) or mistral ([TOOL_CALLS] [...]); needs --enable-auto-tool-choice");
    v(c.max_body_bytes, "max_body_bytes", "largest request body accepted (413 beyond)");
    v(c.max_header_bytes, "max_header_bytes", "largest request header accepted (431 beyond)");
    v(c.idle_timeout, "idle_timeout",
      "seconds a keep-alive connection may stay idle before it is closed");
    v(c.read_timeout, "read_timeout",
      "seconds a client may take to send a request's head, then its body (408 Request "
      "Timeout beyond), or to read a response write");
    v(c.shutdown_timeout, "shutdown_timeout",
      "seconds in-flight requests may take to finish after SIGTERM or SIGINT");
    v(c.max_num_waiting, "max_num_waiting",
      "waiting engine requests beyond which new requests get 503");
    v(c.max_logprobs, "max_logprobs",
      "largest logprobs / top_logprobs / prompt_logprobs a request may ask for, as vLLM's "
      "--max-logprobs (default 20; -1 = no cap: the vocabulary size, as vLLM; -1 in a request "
      "asks for the whole vocabulary and so gets 400 unless this is at least the vocabulary "
      "size; each returned token then carries k entries, so large values cost memory and "
      "response size)");
    v(c.enable_prompt_tokens_details, "enable_prompt_tokens_details",
      "add usage.prompt_tokens_details.cached_tokens (prompt tokens served by the prefix cache) "
      "to responses, as vLLM's flag");
    v(c.return_tokens_as_token_ids, "return_tokens_as_token_ids",
      "write every logprob token as \"token_id:N\" (the token's id), for tokens that are "
      "not valid UTF-8 on their own; as vLLM's flag, and the request field of the same name");
    v(c.http_threads, "http_threads", "HTTP I/O threads (they never run the model)");
    v(c.num_prepare_threads, "num_prepare_threads",
      "threads that parse request bodies, render chat templates and tokenize, off the I/O "
      "threads");
    v(c.max_queued_prepares, "max_queued_prepares",
      "requests being prepared or waiting for a prepare thread beyond which new ones get 503");
    v(c.max_connections, "max_connections",
      "open client connections beyond which new ones get 503 and are closed");
    v(c.max_total_body_bytes, "max_total_body_bytes",
      "request-body bytes all connections together may hold (503 beyond); a body without "
      "Content-Length counts as --max-body-bytes");
    v(c.log_format, "log_format",
      "log line format: text, or json (one object per line: time, level, request_id, message, "
      "and the access-log fields)");
    v(c.log_level, "log_level",
      "lowest level logged: trace, debug, info, warning, error, critical or off");
    v(c.disable_log_requests, "disable_log_requests",
      "do not write the access-log line of each request (method, path, status, tokens, TTFT, "
      "latency)");
    EngineArgs::visit(c.engine, v);
  }

  /// Largest --config file read (bytes): a serve config is a few KiB, and yaml-cpp holds a
  /// few hundred bytes per node, so a small cap keeps a hostile file's parse small.
  static constexpr size_t kMaxConfigFileBytes = size_t{256} << 10;

  /// True for the options whose value is a JSON list of strings (parse_json_string_list):
  /// allowed_origins, allowed_methods, allowed_headers. A --config file may give them as a
  /// YAML sequence of strings or as a string holding the JSON list.
  static bool is_json_list(const std::string& key);

  /// Reads a YAML mapping of option keys (snake_case, as visit() names them) into this config.
  /// A bad file, named with its path: std::runtime_error (exit 1) when it cannot be read, is
  /// larger than kMaxConfigFileBytes, is not YAML, or sets a key twice (with its line); a bad
  /// option in it, named with its key: std::invalid_argument (exit 2, as the flag) for a key
  /// that is not an option (or is "config"), a value of the wrong type or not a mapping (a
  /// sequence is a value only for is_json_list keys).
  void apply_config_file(const std::string& path);

  /// Throws std::invalid_argument naming the flag for values out of range (port outside
  /// [0, 65535], non-positive limits or timeouts, timeouts over kMaxTimeoutSeconds, byte limits
  /// the HTTP parser cannot hold, a CORS list that is not a JSON list of strings, ...) and for
  /// invalid engine options.
  void validate() const;

  /// The environment variable of option `key`: "OCTET_" and the key in upper case
  /// ("kv_cache_dtype" -> "OCTET_KV_CACHE_DTYPE").
  static std::string env_var_name(const std::string& key);

  /// The command line `args` (args[0] is the program or subcommand name) with the options the
  /// environment sets appended: for each option of visit() whose flag is absent from args
  /// (--foo-bar, --foo-bar=V, and for a bool also --no-foo-bar), a set, non-empty variable
  /// OCTET_FOO_BAR adds "--foo-bar V"; for a bool, 1/true/yes/on adds --foo-bar and
  /// 0/false/no/off adds --no-foo-bar. The flag parser then checks the values as it checks
  /// flags, so flags override the environment, and the environment (being flags) overrides the
  /// --config file. `getenv` returns nullptr for an unset variable. Throws
  /// std::invalid_argument naming the variable for a bool value that is none of the above.
  static std::vector<std::string> with_environment(
      std::vector<std::string> args,
      const std::function<const char*(const std::string&)>& getenv);

  /// The model name the server answers to: served_model_name, else engine.model.
  std::string model_name() const {
    return served_model_name.empty() ? engine.model : served_model_name;
  }
};

}  // namespace octet
