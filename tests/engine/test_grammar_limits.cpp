// The grammar compiler's limits (engine/grammar_compiler.h) on the tiny stories260K model: the
// cache is bounded by bytes (least recently used evicted first; an entry over the whole budget
// is used but not kept), and a request waiting for its grammar longer than the compile timeout
// fails alone with a 400-kind error naming its field, while unconstrained requests and requests
// whose grammar is cached run on, even with both compile workers stuck. Outcomes only: the
// stuck compiles are held by a hook until the test releases them, never raced against a clock.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/grammar_compiler.h"
#include "engine/structured_output.h"
#include "engine_test_support.h"
#include "models/tokenizer.h"
#include "structured_test_support.h"
#include "test_model_paths.h"

namespace octet {
namespace {

using testing::collect;
using testing::so_params;

StructuredOutputParams regex(const std::string& pattern) {
  return so_params(StructuredOutputKind::Regex, pattern, "regex");
}

std::unique_ptr<GrammarCompilerService> service(int64_t cache_bytes) {
  const LoadedModel& m = testing::stories_model();
  return std::make_unique<GrammarCompilerService>(*m.tokenizer, m.eos_token_ids,
                                                  m.tokenizer->vocab_size(), nullptr, 2,
                                                  cache_bytes);
}

/// Bytes one cached entry of `p` takes, by the cache's documented rule: its key plus the
/// compiled grammar's MemorySizeBytes().
int64_t entry_bytes(const StructuredOutputParams& p) {
  auto s = service(int64_t{1} << 30);
  const CompiledGrammarPtr g = s->compile(p).get();
  return static_cast<int64_t>(structured_output_key(p).size()) +
         static_cast<int64_t>(g->MemorySizeBytes());
}

}  // namespace

TEST_CASE("grammar cache: bounded by bytes, least recently used evicted first",
          "[structured][grammar_limits]") {
  const StructuredOutputParams a = regex("[a-c]{3}"), b = regex("[d-f]{4}"),
                               c = regex("[g-i]{5}");
  const int64_t sa = entry_bytes(a), sb = entry_bytes(b), sc = entry_bytes(c);
  INFO("entry bytes " << sa << " " << sb << " " << sc);
  REQUIRE(sa > 0);
  // Room for any two of them, never all three.
  const int64_t budget = std::max({sa + sb, sa + sc, sb + sc});
  REQUIRE(budget < sa + sb + sc);
  auto s = service(budget);
  std::atomic<int> compiles{0};
  s->set_before_compile([&](const StructuredOutputParams&) { ++compiles; });

  s->compile(a).get();
  s->compile(b).get();
  CHECK(compiles == 2);
  CHECK(s->cache_stats().num_entries == 2);
  CHECK(s->cache_stats().bytes == sa + sb);
  s->compile(a).get();  // a hit: a is now the most recently used
  CHECK(compiles == 2);
  s->compile(c).get();  // over budget: b, the least recently used, goes
  CHECK(compiles == 3);
  CHECK(s->cache_stats().num_entries == 2);
  CHECK(s->cache_stats().bytes == sa + sc);
  s->compile(a).get();  // still cached
  s->compile(c).get();
  CHECK(compiles == 3);
  s->compile(b).get();  // evicted: compiled again
  CHECK(compiles == 4);
  CHECK(s->cache_stats().bytes <= budget);
}

TEST_CASE("grammar cache: an entry larger than the budget is used but not kept",
          "[structured][grammar_limits]") {
  const StructuredOutputParams a = regex("[a-c]{3}");
  auto s = service(entry_bytes(a) - 1);
  std::atomic<int> compiles{0};
  s->set_before_compile([&](const StructuredOutputParams&) { ++compiles; });
  const CompiledGrammarPtr g = s->compile(a).get();
  REQUIRE(g);
  GrammarState state(g);  // usable: the first token must be one of a, b, c
  state.fill_bitmask();
  CHECK(state.fill_error().empty());
  CHECK(s->cache_stats().num_entries == 0);
  CHECK(s->cache_stats().bytes == 0);
  s->compile(a).get();
  CHECK(compiles == 2);  // not kept, so compiled again
}

TEST_CASE("grammar compile timeout: the waiting requests fail alone, the others run",
          "[structured][grammar_limits]") {
  auto engine = Engine::create(testing::engine_args(
      testing::stories(), {.quantization = "none", .num_kv_blocks = 64, .max_model_len = 256}));
  const StructuredOutputParams cached = regex("[a-c]{3}");
  SamplingParams cp;
  cp.temperature = 0.0f;
  cp.max_tokens = 10;
  cp.structured_outputs = cached;
  const std::vector<int32_t> prompt = {1, 403, 407, 261};
  CHECK(std::regex_match(collect(*engine->add_request("warm", prompt, cp)).text,
                         std::regex("[a-c]{3}")));

  // Every compile from now on is held until released: both workers get stuck.
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool released = false;
  engine->set_structured_output_compile_hook([&](const StructuredOutputParams&) {
    std::unique_lock<std::mutex> lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  engine->set_structured_output_compile_timeout(std::chrono::milliseconds(200));
  const std::vector<std::string> stuck_patterns = {"[d-f]{3}", "[g-i]{3}", "[j-l]{3}"};
  std::vector<std::shared_ptr<RequestStream>> stuck;
  for (size_t i = 0; i < stuck_patterns.size(); ++i) {
    SamplingParams p = cp;
    p.structured_outputs =
        so_params(StructuredOutputKind::Regex, stuck_patterns[i], "response_format");
    stuck.push_back(engine->add_request("stuck" + std::to_string(i), prompt, p));
    if (i == 1) {  // both workers inside a compile; the third waits in the queue
      std::unique_lock<std::mutex> lock(mu);
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return entered == 2; }));
    }
  }
  // An unconstrained request and one whose grammar is cached run to their end meanwhile.
  const testing::Result free_run =
      collect(*engine->add_request("free", prompt, testing::greedy_params(8, -1)));
  CHECK(free_run.token_ids.size() == 8);
  const testing::Result hit = collect(*engine->add_request("hit", prompt, cp));
  CHECK(std::regex_match(hit.text, std::regex("[a-c]{3}")));

  // The stuck ones fail with the request's own error, naming the field.
  for (size_t i = 0; i < stuck.size(); ++i) {
    INFO("stuck request " << i);
    std::string error, param, finish_reason;
    bool invalid = false;
    size_t tokens = 0;
    while (auto o = stuck[i]->next()) {
      tokens += o->token_ids.size();
      if (o->finished) {
        error = o->error;
        param = o->error_param;
        invalid = o->invalid_request;
        finish_reason = o->finish_reason;
      }
    }
    CHECK(invalid);
    CHECK(param == "response_format");
    CHECK_THAT(error, Catch::Contains("compiling the grammar of 'response_format' took longer "
                                      "than 0.2 s"));
    CHECK(tokens == 0);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
  }
  cv.notify_all();
  engine->set_structured_output_compile_hook(nullptr);
  engine->set_structured_output_compile_timeout(kDefaultGrammarCompileTimeout);
  // The engine is healthy, and every spec compiles now (the held ones finished in their
  // workers; the queued one, abandoned, is submitted again).
  for (const std::string& pattern : stuck_patterns) {
    INFO(pattern);
    SamplingParams p = cp;
    p.structured_outputs = regex(pattern);
    CHECK(std::regex_match(collect(*engine->add_request("again" + pattern, prompt, p)).text,
                           std::regex(pattern)));
  }
  CHECK(engine->wait_idle(std::chrono::milliseconds(5000)));
  const EngineStats st = engine->stats();
  CHECK(st.alive);
  CHECK(st.num_free_kv_blocks == st.num_kv_blocks);
}

namespace {

/// A JSON array text of n distinct strings of `len` bytes each ("s<i>" padded with x).
std::string string_array(int n, size_t len) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) {
    std::string v = "s" + std::to_string(i);
    v.resize(len, 'x');
    out += (i ? "," : "") + ("\"" + v + "\"");
  }
  return out + "]";
}

}  // namespace

TEST_CASE("structured output bounds: enum and const bytes of a JSON schema, choice bytes",
          "[structured][grammar_limits]") {
  // 100 strings of 1000 bytes: 100 x 1002 bytes of JSON text per enum.
  const std::string e = string_array(100, 1000);
  const auto schema = [](const std::string& a, const std::string& b) {
    return "{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":" + a +
           "},\"b\":{\"type\":\"array\",\"items\":{\"enum\":" + b + "}}}}";
  };
  // Two enums (one nested in items): 200,400 bytes, under 262,144.
  CHECK_NOTHROW(validate_structured_output(
      so_params(StructuredOutputKind::Json, schema(e, e), "response_format")));
  // A third one, as a const of the same text: 300,600 bytes, over.
  const std::string over =
      "{\"anyOf\":[" + schema(e, e) + ",{\"const\":" + e + "}]}";
  try {
    validate_structured_output(so_params(StructuredOutputKind::Json, over, "response_format"));
    FAIL("accepted 300,600 bytes of enum and const values");
  } catch (const RequestError& err) {
    CHECK(err.param() == "response_format");
    CHECK_THAT(err.what(), Catch::Contains("response_format") &&
                               Catch::Contains("enum and const values of at most 262144 bytes"));
  }
  // Choices: 262,144 bytes in all pass, one more byte fails.
  SamplingParams p;
  p.structured_outputs = so_params(StructuredOutputKind::Choice, "", "structured_outputs");
  p.structured_outputs.choice.assign(256, std::string(1024, 'c'));
  CHECK_NOTHROW(p.validate());
  p.structured_outputs.choice.back() += "c";
  CHECK_THROWS_AS(p.validate(), SamplingParamError);
}

}  // namespace octet
