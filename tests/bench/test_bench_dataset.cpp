// Workloads (bench/dataset.h): random prompts re-tokenized to exact lengths with the real
// stories260K tokenizer, ShareGPT and JSONL files, arrival times.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "bench/dataset.h"
#include "models/tokenizer.h"
#include "test_model_paths.h"

using namespace octet::bench;

namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = "/tmp/octet_bench_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("random prompts encode to exactly prefix + input length") {
  auto tok = load_bench_tokenizer(octet::testing::stories());
  RandomDatasetOptions o;
  o.num_prompts = 20;
  o.input_len = 32;
  o.output_len = 16;
  o.prefix_len = 8;
  const auto reqs = random_dataset(*tok, o);
  REQUIRE(reqs.size() == 20);
  int exact = 0;
  std::set<std::string> distinct;
  for (const RequestSpec& r : reqs) {
    CHECK(r.prompt_len == count_tokens(*tok, r.prompt));  // prompt_len is the text's length
    exact += r.prompt_len == 40;
    CHECK(r.max_tokens == 16);
    distinct.insert(r.prompt);
  }
  CHECK(exact == 20);
  CHECK(distinct.size() == 20);
  // The same seed gives the same prompts.
  CHECK(random_dataset(*tok, o)[3].prompt == reqs[3].prompt);
}

TEST_CASE("random lengths are uniform in [floor(L(1-r)), ceil(L(1+r))]") {
  auto tok = load_bench_tokenizer(octet::testing::stories());
  RandomDatasetOptions o;
  o.num_prompts = 200;
  o.input_len = 10;
  o.output_len = 20;
  o.range_ratio = 0.5;  // input in [5, 15], output in [10, 30]
  std::set<int64_t> outs;
  for (const RequestSpec& r : random_dataset(*tok, o)) {
    CHECK(r.max_tokens >= 10);
    CHECK(r.max_tokens <= 30);
    CHECK(r.prompt_len >= 5);
    CHECK(r.prompt_len <= 15);
    outs.insert(r.max_tokens);
  }
  CHECK(outs.size() > 10);  // actually spread, not one value
}

TEST_CASE("ShareGPT and JSONL files") {
  auto tok = load_bench_tokenizer(octet::testing::stories());
  const std::string story = "Once upon a time there was a little girl named Lily who liked to play.";
  const std::string sg = temp_file(
      "sharegpt.json",
      nlohmann::json::array(
          {{{"conversations", {{{"from", "human"}, {"value", story}}, {{"from", "gpt"}, {"value", story}}}}},
           {{"conversations", {{{"from", "human"}, {"value", "Hi"}}, {{"from", "gpt"}, {"value", story}}}}},
           {{"conversations", {{{"from", "human"}, {"value", story}}}}}})
          .dump());
  // Only the first is usable: the second's prompt is under 4 tokens, the third has one turn.
  const auto one = sharegpt_dataset(sg, *tok, 1, 0, 0);
  REQUIRE(one.size() == 1);
  CHECK(one[0].prompt == story);
  CHECK(one[0].max_tokens == count_tokens(*tok, story));
  CHECK(sharegpt_dataset(sg, *tok, 1, 9, 0)[0].max_tokens == 9);
  CHECK_THROWS_WITH(sharegpt_dataset(sg, *tok, 2, 0, 0), Catch::Contains("fewer than --num-prompts"));

  const std::string jl = temp_file("p.jsonl", "{\"prompt\": \"a cat\", \"output_tokens\": 5}\n\n\"a dog\"\n");
  const auto j = jsonl_dataset(jl, *tok, 3, 7);
  REQUIRE(j.size() == 3);
  CHECK(j[0].prompt == "a cat");
  CHECK(j[0].max_tokens == 5);
  CHECK(j[1].prompt == "a dog");
  CHECK(j[1].max_tokens == 7);
  CHECK(j[2].prompt == "a cat");  // cycled
  const std::string bad = temp_file("bad.jsonl", "{\"text\": 1}\n");
  CHECK_THROWS_WITH(jsonl_dataset(bad, *tok, 1, 7), Catch::Contains("line 1"));
  CHECK_THROWS_WITH(jsonl_dataset("/nonexistent/x.jsonl", *tok, 1, 7), Catch::Contains("cannot be read"));
  std::remove(sg.c_str());
  std::remove(jl.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("arrival times: all at once for inf, else rescaled to end at n / rate") {
  for (double t : arrival_times(5, INFINITY, 1.0, 0)) CHECK(t == 0);
  const auto t = arrival_times(8, 4.0, 1.0, 1);
  CHECK(t.back() == Approx(2.0).margin(1e-12));  // 8 requests at 4 req/s
  for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] >= t[i - 1]);
  CHECK(t.front() > 0);
  // Very large burstiness: gaps nearly constant (gamma with shape k has CV 1/sqrt(k)).
  const auto even = arrival_times(4, 2.0, 1e6, 1);
  CHECK(even[0] == Approx(0.5).margin(0.01));
  CHECK(even[1] == Approx(1.0).margin(0.01));
  CHECK_THROWS_AS(arrival_times(4, -1.0, 1.0, 0), std::invalid_argument);
  CHECK_THROWS_AS(arrival_times(4, 1.0, 0.0, 0), std::invalid_argument);
}
