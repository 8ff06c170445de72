// Structured outputs (engine/structured_output.h) on xgrammar: validation errors name the field;
// the engine's outputs are in the language of their JSON schema / regex / choice / EBNF grammar
// (checked by independent means: nlohmann::json and hand-written field checks, std::regex);
// a constrained request ends with "stop" when its grammar ends; a bad spec fails its request
// alone; unconstrained rows are untouched (bitwise); preemption keeps outputs valid and equal to
// their solo runs; a pending compile never delays other requests. The tiny stories260K
// (SentencePiece, byte fallback); SmolLM2 (byte-level BPE): test_structured_output_smollm2.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine/structured_output.h"
#include "engine_test_support.h"
#include "structured_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::collect_outcome;
using testing::Result;

using testing::check_person;
using testing::kPersonSchema;
using testing::so_params;

/// A JSON schema without free whitespace (any_whitespace false).
StructuredOutputParams compact(const std::string& schema) {
  StructuredOutputParams so = so_params(StructuredOutputKind::Json, schema, "json_schema");
  so.any_whitespace = false;
  return so;
}

SamplingParams constrained(StructuredOutputParams so, int64_t max_tokens, float temperature = 0.0f,
                           int64_t seed = -1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_tokens = max_tokens;
  p.structured_outputs = std::move(so);
  return p;
}

/// n stories260K token ids in [259, 512): no byte-fallback token (ids 3..258 are <0x00>..<0xFF>),
/// so the prompt never ends inside a UTF-8 character whose completion would be emitted (as
/// U+FFFD) with the output's first text.
std::vector<int32_t> text_prompt(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t& t : p) t = static_cast<int32_t>(259 + rng() % 253);
  return p;
}

// Unquantized stories260K, max_model_len 256, 64 blocks of 16.
EngineArgs stories_args(int64_t num_kv_blocks = 64) {
  return testing::engine_args(testing::stories(), {.quantization = "none",
                                                   .num_kv_blocks = num_kv_blocks,
                                                   .max_model_len = 256});
}

/// The error a request's stream ended with, and whether the engine marked it the request's
/// own fault (RequestOutput::invalid_request, error_param).
struct Failure {
  std::string error, param, finish_reason;
  bool invalid_request = false;
  size_t num_tokens = 0;
  int64_t num_prompt_tokens = 0;
};
Failure read_failure(RequestStream& s) {
  Failure f;
  while (auto o = s.next()) {
    f.num_tokens += o->token_ids.size();
    if (o->finished) {
      f.error = o->error;
      f.param = o->error_param;
      f.invalid_request = o->invalid_request;
      f.finish_reason = o->finish_reason;
      f.num_prompt_tokens = o->num_prompt_tokens;
    }
  }
  return f;
}

void require_invalid(const StructuredOutputParams& p, const std::string& needle) {
  INFO("kind " << structured_output_kind_name(p.kind) << " spec " << p.spec);
  try {
    validate_structured_output(p);
    FAIL("no error");
  } catch (const RequestError& e) {
    CHECK(e.kind() == RequestErrorKind::InvalidRequest);
    CHECK(e.param() == p.field);
    const std::string msg = e.what();
    CHECK(msg.find(p.field) != std::string::npos);
    CHECK(msg.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("structured outputs: validate names the field of a bad schema, regex, grammar or tag",
          "[structured]") {
  require_invalid(so_params(StructuredOutputKind::Json, "{\"type\": ", "response_format"), "json");
  require_invalid(so_params(StructuredOutputKind::Json, R"({"type": "no-such-type"})", "json_schema"),
                  "json");
  require_invalid(so_params(StructuredOutputKind::Regex, "([a-z", "regex"), "regex");
  require_invalid(so_params(StructuredOutputKind::Grammar, "root ::= undefined_rule", "grammar"),
                  "grammar");
  require_invalid(so_params(StructuredOutputKind::Grammar, "root ::= \"a", "grammar"), "grammar");
  require_invalid(so_params(StructuredOutputKind::StructuralTag, "{\"type\": \"nope\"}",
                            "structural_tag"),
                  "structural_tag");
  StructuredOutputParams empty_choice = so_params(StructuredOutputKind::Choice, "", "choice");
  require_invalid(empty_choice, "empty");

  // Valid specs pass.
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Json, kPersonSchema)));
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::JsonObject, "")));
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Regex, "[a-c]+x")));
  CHECK_NOTHROW(validate_structured_output(
      so_params(StructuredOutputKind::Grammar, "root ::= \"(\" [0-9] \")\"")));
  StructuredOutputParams choice = so_params(StructuredOutputKind::Choice, "");
  choice.choice = {"a \"quoted\" one", "back\\slash", "tab\there", ""};
  CHECK_NOTHROW(validate_structured_output(choice));
  CHECK_NOTHROW(validate_structured_output(StructuredOutputParams{}));  // none: nothing to check
}

TEST_CASE("structured outputs: a JSON schema's pattern repetitions and literals and depth are bounded",
          "[structured]") {
  // xgrammar builds each counted repetition of a schema's pattern in time quadratic in its count
  // (a{50000}: minutes on the prepare thread, uncancellable): at most kMaxPatternRepeat each,
  // kMaxPatternRepeatTotal in all.
  STATIC_REQUIRE(kMaxPatternRepeat == 1000);
  STATIC_REQUIRE(kMaxPatternRepeatTotal == 4000);
  STATIC_REQUIRE(kMaxPatternNestedRepeat == 16);
  STATIC_REQUIRE(kMaxPatternVariable == 32);
  const auto pattern = [](const std::string& re) {
    return so_params(StructuredOutputKind::Json,
                     nlohmann::json{{"type", "string"}, {"pattern", re}}.dump(), "response_format");
  };
  CHECK_NOTHROW(validate_structured_output(pattern("^a{1000}$")));
  CHECK_NOTHROW(validate_structured_output(pattern("^[a-z]{3,1000}x{2,}$")));
  for (const char* re : {"^a{1001}$", "^a{2,50000}$", "^a{50000,}$", "^(ab){99999999999999999999}$",
                         "^[{]{1001}", "^\\\\{1001}", "^x{5}(y|z{1001})"}) {
    INFO(re);
    require_invalid(pattern(re), "repetition counts");
  }
  // Braces that are not a count: a class member, an escaped brace, a code point escape.
  CHECK_NOTHROW(validate_structured_output(pattern("^[{5000}]+\\{5000}\\u{5000}$")));
  // Real patterns pass: semver (groups with (?: and nested *), IPv4, MAC, e-mail, date-time.
  for (const char* re :
       {"^(0|[1-9]\\d*)\\.(0|[1-9]\\d*)\\.(0|[1-9]\\d*)(?:-((?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*)"
        "(?:\\.(?:0|[1-9]\\d*|\\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\\+([0-9a-zA-Z-]+(?:\\.[0-9a-zA-Z-]+)*))?$",
        "^(\\d{1,3}\\.){3}\\d{1,3}$", "^([0-9a-f]{2}:){5}[0-9a-f]{2}$",
        "^[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\\.[a-zA-Z]{2,}$",
        "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?(Z|[+-]\\d{2}:\\d{2})$", "^.{0,1000}$"}) {
    INFO(re);
    CHECK_NOTHROW(validate_structured_output(pattern(re)));
  }
  // Nested repetitions (product of counts over 16) and adjacent variable-length runs (copies
  // beyond the longest over 24): (.{0,8}){0,8} took 15 s to compile, 24 x .{0,3} 23 s.
  require_invalid(pattern("^(.{0,8}){0,8}$"), "nested repetitions");
  require_invalid(pattern("^(a{100}){20}$"), "nested repetitions");
  CHECK_NOTHROW(validate_structured_output(pattern("^(.{0,4}){0,4}$")));
  std::string optional, alternatives, spaced;
  for (int i = 0; i < 33; ++i) optional += ".?";
  CHECK_NOTHROW(validate_structured_output(pattern(optional)));  // 32 beyond the longest
  require_invalid(pattern(optional + ".?"), "variable-length repetitions");
  require_invalid(pattern("^.{0,500}.{0,500}$"), "variable-length repetitions");
  require_invalid(pattern("^(?:.{0,3}){1}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}.{0,3}"
                          ".{0,3}$"),
                  "variable-length repetitions");
  // Alternations of other lengths are variable too ((|.) is .?; 100 of them took 27 s), and
  // xgrammar reads {0, 3} with spaces as a count (25 of them took 13 s).
  for (int i = 0; i < 34; ++i) alternatives += "(|.)";
  require_invalid(pattern(alternatives), "variable-length repetitions");
  require_invalid(pattern("(.|..|...|....){16}"), "variable-length repetitions");
  for (int i = 0; i < 12; ++i) spaced += ".{0, 3}";
  require_invalid(pattern(spaced), "variable-length repetitions");
  require_invalid(pattern("^a{ 5000 }$"), "repetition counts");
  // patternProperties keys are regexes too; a property named like a keyword is still a schema.
  require_invalid(so_params(StructuredOutputKind::Json,
                            R"({"type":"object","patternProperties":{"^a{5000}$":{"type":"integer"}}})"),
                  "repetition counts");
  for (const char* name : {"enum", "const", "default", "examples"}) {
    INFO(name);
    const nlohmann::json schema{
        {"type", "object"},
        {"properties", {{name, {{"type", "string"}, {"pattern", "^a{5000}$"}}}}}};
    require_invalid(so_params(StructuredOutputKind::Json, schema.dump()), "repetition counts");
  }
  // The total over every pattern of the schema, at any depth (not inside enum / const values).
  nlohmann::json props;
  for (int i = 0; i < 4; ++i)
    props["p" + std::to_string(i)] = {{"type", "string"}, {"pattern", "^a{1000}$"}};
  nlohmann::json schema{{"type", "object"}, {"properties", props}};
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Json, schema.dump())));
  schema["properties"]["extra"] = {{"type", "array"}, {"items", {{"pattern", "^b{1}$"}}}};
  require_invalid(so_params(StructuredOutputKind::Json, schema.dump()), "in all");
  schema["properties"].erase("extra");
  schema["properties"]["e"] = {{"enum", {nlohmann::json{{"pattern", "^a{5000}$"}}}}};
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Json, schema.dump())));
  // Structural tags hold schemas too.
  const nlohmann::json tag{
      {"type", "structural_tag"},
      {"format", {{"type", "json_schema"}, {"json_schema", {{"type", "string"}, {"pattern", "^a{5000}$"}}}}}};
  require_invalid(so_params(StructuredOutputKind::StructuralTag, tag.dump(), "structural_tag"),
                  "repetition counts");
  // Regex and EBNF repetitions are xgrammar's own (linear) repeat: not bounded.
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Regex, "a{50000}")));

  // Enum and const values: kMaxStructuredChoiceBytes of JSON text in all.
  const auto big_enum = [](int n) {  // n values of about 1000 bytes
    nlohmann::json e{{"enum", nlohmann::json::array()}};
    for (int i = 0; i < n; ++i) e["enum"].push_back(std::to_string(i) + std::string(1000, 'a'));
    return e.dump();
  };
  require_invalid(so_params(StructuredOutputKind::Json, big_enum(300)), "enum and const");
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Json, big_enum(200))));

  // Nesting: the parsers recurse, so a schema text nests at most kMaxStructuredSpecDepth deep.
  const auto nested = [](int depth) {  // `depth` levels of objects
    std::string s;
    for (int d = 1; d < depth; ++d) s += R"({"type":"array","items":)";
    s += R"({"type":"string"})";
    return s + std::string(size_t(depth - 1), '}');
  };
  CHECK_NOTHROW(validate_structured_output(so_params(StructuredOutputKind::Json, nested(127))));
  require_invalid(so_params(StructuredOutputKind::Json, nested(129)), "nested deeper than 128");
  require_invalid(so_params(StructuredOutputKind::Json, nested(100001)), "nested deeper than 128");
}

TEST_CASE("structured outputs: SamplingParams::validate bounds the spec and the choices",
          "[structured]") {
  SamplingParams p;
  p.structured_outputs = so_params(StructuredOutputKind::Regex, std::string(kMaxStructuredSpecBytes, 'a'),
                                   "regex");
  CHECK_NOTHROW(p.validate());
  p.structured_outputs.spec += "a";
  try {
    p.validate();
    FAIL("no error");
  } catch (const SamplingParamError& e) {
    CHECK(e.field() == "regex");
  }
  p.structured_outputs = so_params(StructuredOutputKind::Choice, "", "choice");
  CHECK_THROWS_AS(p.validate(), SamplingParamError);  // no choices
  p.structured_outputs.choice.assign(kMaxStructuredChoices + 1, "x");
  CHECK_THROWS_AS(p.validate(), SamplingParamError);
  p.structured_outputs.choice.assign(kMaxStructuredChoices, "x");
  CHECK_NOTHROW(p.validate());
  // A spec beyond the bound is not checked when nothing is constrained.
  p.structured_outputs = StructuredOutputParams{};
  p.structured_outputs.spec.assign(kMaxStructuredSpecBytes + 1, 'a');
  CHECK_NOTHROW(p.validate());
}

TEST_CASE("structured outputs: apply_token_bitmask and sample() honour the mask", "[structured]") {
  // vocab 70: words 0..2, bits LSB first. Allowed: 0, 31, 32, 69 only.
  const int64_t vocab = 70;
  std::vector<int32_t> mask(3, 0);
  mask[0] = static_cast<int32_t>((1u << 0) | (1u << 31));
  mask[1] = 1;                 // token 32
  mask[2] = 1 << (69 - 64);    // token 69
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[i] = static_cast<float>(i % 7);  // 6 is the max
  std::vector<float> masked = logits;
  apply_token_bitmask(masked.data(), vocab, mask.data());
  for (int64_t i = 0; i < vocab; ++i) {
    INFO("token " << i);
    if (i == 0 || i == 31 || i == 32 || i == 69)
      CHECK(masked[i] == logits[i]);
    else
      CHECK(std::isinf(masked[i]));
  }
  // Greedy: logits 0 -> 0, 31 -> 3, 32 -> 4, 69 -> 6: token 69. Raw logprobs of the masked
  // distribution: log(e^6 / (e^0 + e^3 + e^4 + e^6)); top list only the 4 allowed tokens.
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 10;
  std::mt19937_64 rng(1);
  const SampleResult r = sample(logits.data(), vocab, p, {1}, {}, {}, rng, mask.data());
  REQUIRE(r.ok());
  CHECK(r.token_id == 69);
  const double z = std::exp(0.0) + std::exp(3.0) + std::exp(4.0) + std::exp(6.0);
  CHECK(r.logprob == Approx(6.0 - std::log(z)).epsilon(1e-5));
  CHECK(r.rank == 1);
  REQUIRE(r.top_logprobs.size() == 4);
  CHECK(r.top_logprobs[0].token_id == 69);
  CHECK(r.top_logprobs[1].token_id == 32);
  CHECK(r.top_logprobs[2].token_id == 31);
  CHECK(r.top_logprobs[3].token_id == 0);
  CHECK(r.top_logprobs[3].logprob == Approx(0.0 - std::log(z)).epsilon(1e-5));
  // Sampling never draws a masked token.
  p.temperature = 1.0f;
  p.logprobs = -1;
  for (int i = 0; i < 200; ++i) {
    const SampleResult s = sample(logits.data(), vocab, p, {1}, {}, {}, rng, mask.data());
    REQUIRE(s.ok());
    CHECK((s.token_id == 0 || s.token_id == 31 || s.token_id == 32 || s.token_id == 69));
  }
  // Everything masked: an error, no token.
  std::vector<int32_t> none(3, 0);
  const SampleResult e = sample(logits.data(), vocab, p, {1}, {}, {}, rng, none.data());
  CHECK(!e.ok());
  CHECK(e.error.find("structured output grammar allows no token") != std::string::npos);
}

TEST_CASE("structured outputs: JSON schema, regex, choice and EBNF outputs are in their language",
          "[structured]") {
  auto engine = Engine::create(stories_args());
  const std::vector<int32_t> prompt = text_prompt(12, 3);

  SECTION("json schema, greedy and sampled, compact and any whitespace") {
    for (bool any_ws : {false, true}) {
      for (int64_t seed : {-2, 1, 2, 3}) {  // -2: greedy
        INFO("any_whitespace " << any_ws << " seed " << seed);
        StructuredOutputParams so = so_params(StructuredOutputKind::Json, kPersonSchema, "json_schema");
        so.any_whitespace = any_ws;
        const SamplingParams p =
            constrained(so, 200, seed < 0 ? 0.0f : 1.0f, seed < 0 ? -1 : seed);
        const Result r = collect(*engine->add_request("json", prompt, p));
        INFO("output: " << r.text);
        if (!any_ws) {
          // Compact: bounded fields and xgrammar's separators ", " and ": " only: it ends.
          check_person(r.text);
          CHECK(r.finish_reason == "stop");
          CHECK(r.text.find_first_of("\n\t") == std::string::npos);
        } else if (r.finish_reason == "stop") {
          check_person(r.text);
        } else {
          // Any whitespace lets a tiny model pad forever (as in vLLM): cut by max_tokens.
          CHECK(r.finish_reason == "length");
          CHECK(r.text.rfind("{", 0) == 0);
        }
      }
    }
  }
  SECTION("json_object") {
    const Result r = collect(*engine->add_request(
        "obj", prompt, constrained(so_params(StructuredOutputKind::JsonObject, ""), 200, 1.0f, 7)));
    INFO("output: " << r.text);
    if (r.finish_reason == "stop") CHECK(nlohmann::json::parse(r.text).is_object());
    else CHECK(r.text.rfind("{", 0) == 0);  // cut by max_tokens: still an object's prefix
  }
  SECTION("regex") {
    const std::string re = "[a-c]{2,5}x(yz)?";
    for (int64_t seed : {-1, 11, 12}) {
      const Result r = collect(*engine->add_request(
          "re", prompt, constrained(so_params(StructuredOutputKind::Regex, re, "regex"), 50,
                                    seed < 0 ? 0.0f : 1.0f, seed)));
      INFO("output: " << r.text);
      CHECK(std::regex_match(r.text, std::regex(re)));
      CHECK(r.finish_reason == "stop");
    }
  }
  SECTION("choice") {
    StructuredOutputParams so = so_params(StructuredOutputKind::Choice, "", "choice");
    so.choice = {"red", "green", "light blue", "say \"hi\""};
    std::set<std::string> seen;
    for (int64_t seed = 20; seed < 28; ++seed) {
      const Result r = collect(*engine->add_request("ch", prompt, constrained(so, 30, 1.0f, seed)));
      INFO("output: " << r.text);
      CHECK(std::find(so.choice.begin(), so.choice.end(), r.text) != so.choice.end());
      CHECK(r.finish_reason == "stop");
      seen.insert(r.text);
    }
    CHECK(!seen.empty());
  }
  SECTION("structural tag") {
    const std::string tag =
        R"({"type": "structural_tag", "format": {"type": "tag", "begin": "<n>",
            "content": {"type": "regex", "pattern": "[0-9]{2,3}"}, "end": "</n>"}})";
    for (int64_t seed : {-1, 41}) {
      const Result r = collect(*engine->add_request(
          "tag", prompt, constrained(so_params(StructuredOutputKind::StructuralTag, tag, "structural_tag"),
                                     30, seed < 0 ? 0.0f : 1.0f, seed)));
      INFO("output: " << r.text);
      CHECK(std::regex_match(r.text, std::regex("<n>[0-9]{2,3}</n>")));
      CHECK(r.finish_reason == "stop");
    }
  }
  SECTION("EBNF grammar") {
    const std::string ebnf = R"G(root ::= "(" num (op num)* ")"
num ::= [0-9] | [1-9] [0-9]
op ::= "+" | "*")G";
    for (int64_t seed : {-1, 31, 32, 33}) {
      const Result r = collect(*engine->add_request(
          "g", prompt, constrained(so_params(StructuredOutputKind::Grammar, ebnf, "grammar"), 100,
                                   seed < 0 ? 0.0f : 1.0f, seed)));
      INFO("output: " << r.text);
      if (r.finish_reason == "stop")
        CHECK(std::regex_match(r.text, std::regex(R"(\((0|[1-9][0-9]?)([+*](0|[1-9][0-9]?))*\))")));
      else  // max_tokens: a prefix of the language
        CHECK(std::regex_match(r.text, std::regex(R"(\((0|[1-9][0-9]?)([+*](0|[1-9][0-9]?)?)*)")));
    }
  }
}

TEST_CASE("structured outputs: a grammar's end stops the request, even with ignore_eos",
          "[structured]") {
  auto engine = Engine::create(stories_args());
  StructuredOutputParams so = so_params(StructuredOutputKind::Choice, "", "choice");
  so.choice = {"once upon"};
  SamplingParams p = constrained(so, 100);
  p.ignore_eos = true;
  p.logprobs = 0;
  const Result r = collect(*engine->add_request("end", text_prompt(5, 1), p));
  CHECK(r.text == "once upon");
  CHECK(r.finish_reason == "stop");
  CHECK(r.token_ids.size() < 100);
  // The last token is the EOS the grammar ended with (its text dropped, as any EOS).
  const int32_t eos = 2;  // stories260K (llama2.c): </s>
  CHECK(r.token_ids.back() == eos);
}

TEST_CASE("structured outputs: logprobs are those of the masked distribution", "[structured]") {
  auto engine = Engine::create(stories_args());
  StructuredOutputParams so = so_params(StructuredOutputKind::Choice, "", "choice");
  so.choice = {"red", "green", "blue"};
  SamplingParams p = constrained(so, 20);
  p.logprobs = 20;
  const Result r = collect(*engine->add_request("lp", text_prompt(8, 2), p));
  REQUIRE(!r.logprobs.empty());
  // The first position allows only tokens that begin a choice: far fewer than 20 of stories'
  // 512, all listed, their probabilities summing to 1 over the masked distribution.
  const TokenLogprobs& first = r.logprobs[0];
  CHECK(first.top.size() < 20);
  double mass = 0.0;
  for (const auto& [id, lp] : first.top) mass += std::exp(static_cast<double>(lp));
  CHECK(mass == Approx(1.0).epsilon(1e-4));
  CHECK(first.rank == 1);  // greedy
  CHECK(std::find(so.choice.begin(), so.choice.end(), r.text) != so.choice.end());
}

TEST_CASE("structured outputs: a bad spec fails only its request", "[structured]") {
  auto engine = Engine::create(stories_args());
  std::vector<NewRequest> reqs(3);
  reqs[0].request_id = "bad";
  reqs[0].prompt_token_ids = text_prompt(6, 1);
  reqs[0].params = constrained(so_params(StructuredOutputKind::Json, "{\"type\": [", "response_format"), 20);
  reqs[1].request_id = "good";
  reqs[1].prompt_token_ids = text_prompt(6, 2);
  reqs[1].params = testing::greedy_params(10, -1);
  reqs[2].request_id = "good-json";
  reqs[2].prompt_token_ids = text_prompt(6, 3);
  reqs[2].params = constrained(compact(kPersonSchema), 200);
  auto streams = engine->add_requests(std::move(reqs));
  const Failure bad = read_failure(*streams[0]);
  CHECK(!bad.error.empty());
  CHECK(bad.invalid_request);
  CHECK(bad.param == "response_format");
  CHECK(bad.error.find("response_format") != std::string::npos);
  CHECK(bad.num_tokens == 0);
  CHECK(bad.num_prompt_tokens == 6);
  const Result good = collect(*streams[1]);
  CHECK(good.token_ids.size() == 10);
  check_person(collect(*streams[2]).text);
  CHECK(engine->wait_idle(std::chrono::milliseconds(5000)));
  const EngineStats st = engine->stats();
  CHECK(st.alive);
  CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
}

TEST_CASE("structured outputs: a grammar allowing nothing (min_tokens vs EOS) fails alone",
          "[structured]") {
  auto engine = Engine::create(stories_args());
  StructuredOutputParams so = so_params(StructuredOutputKind::Choice, "", "choice");
  so.choice = {"ab"};
  SamplingParams p = constrained(so, 50);
  p.min_tokens = 40;  // the grammar ends long before: only EOS is allowed, and min_tokens masks it
  auto failing = engine->add_request("stuck", text_prompt(6, 1), p);
  auto other = engine->add_request("other", text_prompt(6, 2), testing::greedy_params(8, -1));
  const Failure f = read_failure(*failing);
  CHECK(f.error.find("structured output grammar allows no token") != std::string::npos);
  CHECK(f.finish_reason == "abort");
  // The request's own constraint admits nothing: a client error naming its field (HTTP 400).
  CHECK(f.invalid_request);
  CHECK(f.param == "choice");
  CHECK(collect(*other).token_ids.size() == 8);
}

TEST_CASE("structured outputs: n = 2 choices each follow the grammar", "[structured]") {
  auto engine = Engine::create(stories_args());
  const std::string re = "(yes|no), [a-z]{3,6}\\.";
  std::vector<NewRequest> reqs(2);
  for (int i = 0; i < 2; ++i) {
    reqs[i].request_id = "n-" + std::to_string(i);
    reqs[i].prompt_token_ids = text_prompt(10, 5);
    reqs[i].params =
        constrained(so_params(StructuredOutputKind::Regex, re, "regex"), 40, 1.0f, 100 + i);
  }
  auto streams = engine->add_requests(std::move(reqs));
  for (auto& s : streams) {
    const Result r = collect(*s);
    INFO("output: " << r.text);
    CHECK(std::regex_match(r.text, std::regex(re)));
  }
}

TEST_CASE("structured outputs: unconstrained rows of a mixed batch equal their solo runs",
          "[structured]") {
  auto engine = Engine::create(stories_args());
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(text_prompt(10 + 3 * i, 40 + i));
  std::vector<Result> solo;
  for (int i = 0; i < 4; ++i)
    solo.push_back(collect(*engine->add_request("solo" + std::to_string(i), prompts[i],
                                                testing::greedy_params(24, 3))));
  std::vector<NewRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    NewRequest a;
    a.request_id = "plain" + std::to_string(i);
    a.prompt_token_ids = prompts[i];
    a.params = testing::greedy_params(24, 3);
    reqs.push_back(a);
    NewRequest b;
    b.request_id = "json" + std::to_string(i);
    b.prompt_token_ids = prompts[i];
    b.params = constrained(compact(kPersonSchema), 200, 1.0f, i);
    reqs.push_back(b);
  }
  auto streams = engine->add_requests(std::move(reqs));
  for (int i = 0; i < 4; ++i) {
    INFO("request " << i);
    testing::require_same_logprobs(solo[i], collect(*streams[2 * i]));
    check_person(collect(*streams[2 * i + 1]).text);
  }
}

TEST_CASE("structured outputs: preemption by recompute keeps outputs valid and as solo",
          "[structured]") {
  auto engine = Engine::create(stories_args(/*num_kv_blocks=*/16));  // one 256-token sequence
  const std::string re = "[a-z]{40}\\.";
  std::vector<Result> solo;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(text_prompt(40, 70 + i));
  for (int i = 0; i < 6; ++i)
    solo.push_back(collect(*engine->add_request(
        "solo" + std::to_string(i), prompts[i],
        constrained(so_params(StructuredOutputKind::Regex, re, "regex"), 80))));
  CHECK(engine->stats().num_preemptions == 0);
  std::vector<NewRequest> reqs(6);
  for (int i = 0; i < 6; ++i) {
    reqs[i].request_id = "b" + std::to_string(i);
    reqs[i].prompt_token_ids = prompts[i];
    reqs[i].params = constrained(so_params(StructuredOutputKind::Regex, re, "regex"), 80);
  }
  auto streams = engine->add_requests(std::move(reqs));
  for (int i = 0; i < 6; ++i) {
    INFO("request " << i);
    const Result r = collect(*streams[i]);
    INFO("output: " << r.text << " (" << r.finish_reason << ", " << r.token_ids.size()
                    << " tokens)");
    CHECK(std::regex_match(r.text, std::regex(re)));
    CHECK(r.token_ids == solo[i].token_ids);
  }
  CHECK(engine->stats().num_preemptions > 0);
}

TEST_CASE("structured outputs: a request waiting for its compile does not delay the others",
          "[structured]") {
  auto engine = Engine::create(stories_args());
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, released = false;
  engine->set_structured_output_compile_hook([&](const StructuredOutputParams&) {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  auto held = engine->add_request(
      "held", text_prompt(6, 1),
      constrained(so_params(StructuredOutputKind::Regex, "[a-c]{3}", "regex"), 10));
  {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return entered; }));
  }
  // The compile is held: the unconstrained request runs to its end meanwhile.
  const Result free_run =
      collect(*engine->add_request("free", text_prompt(6, 2), testing::greedy_params(12, -1)));
  CHECK(free_run.token_ids.size() == 12);
  CHECK(engine->stats().num_requests_waiting == 1);  // the held one, counted as waiting
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  const Result r = collect(*held);
  INFO("output: " << r.text);
  CHECK(std::regex_match(r.text, std::regex("[a-c]{3}")));
  engine->set_structured_output_compile_hook(nullptr);
}

TEST_CASE("structured outputs: an abort while compiling ends the request", "[structured]") {
  auto engine = Engine::create(stories_args());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  engine->set_structured_output_compile_hook([released](const StructuredOutputParams&) {
    released.wait();
  });
  auto held = engine->add_request(
      "held", text_prompt(6, 1),
      constrained(so_params(StructuredOutputKind::Regex, "[a-c]{3}", "regex"), 10));
  engine->abort("held");
  const Result r = collect_outcome(*held);
  CHECK(r.finish_reason == "abort");
  CHECK(r.token_ids.empty());
  release.set_value();
  CHECK(engine->wait_idle(std::chrono::milliseconds(5000)));
  engine->set_structured_output_compile_hook(nullptr);
}

}  // namespace octet
