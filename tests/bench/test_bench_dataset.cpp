// Workloads (bench/dataset.h): random prompts re-tokenized to exact lengths with the real
// stories260K tokenizer, ShareGPT and JSONL files, arrival times.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include <catch2/catch.hpp>

#include "bench/dataset.h"
#include "config/file_read.h"
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

TEST_CASE("random lengths are uniform in floor(L(1-r))..ceil(L(1+r))") {
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
  CHECK_THROWS_WITH(jsonl_dataset("/nonexistent/x.jsonl", *tok, 1, 7),
                    Catch::Contains("--dataset-path '/nonexistent/x.jsonl': cannot open"));
  std::remove(sg.c_str());
  std::remove(jl.c_str());
  std::remove(bad.c_str());
}

TEST_CASE("dataset files: bounded reads, nesting and counts are checked, one line naming the flag") {
  auto tok = load_bench_tokenizer(octet::testing::stories());
  // A (sparse) file one byte over kMaxDatasetFileBytes: refused from its size, not read (the
  // old reader slurped all of it, over a GiB, before parsing).
  const std::string huge = temp_file("huge.json", "");
  REQUIRE(::truncate(huge.c_str(), static_cast<off_t>(octet::kMaxDatasetFileBytes) + 1) == 0);
  CHECK_THROWS_WITH(sharegpt_dataset(huge, *tok, 1, 0, 0),
                    Catch::StartsWith("--dataset-path '" + huge + "': larger than the 1073741824-byte limit"));
  CHECK_THROWS_WITH(jsonl_dataset(huge, *tok, 1, 7), Catch::Contains("1073741824-byte limit"));
  // JSON nested 1,000,000 deep is refused at depth 64, not built (about 100 MB as a tree).
  const std::string deep = temp_file("deep.json", std::string(1000000, '['));
  CHECK_THROWS_WITH(sharegpt_dataset(deep, *tok, 1, 0, 0), Catch::Contains("nests deeper than 64"));
  CHECK_THROWS_AS(jsonl_dataset(deep, *tok, 1, 7), std::invalid_argument);
  // output_tokens must be a positive count within the length bound.
  for (const char* v : {"-5", "0", "4611686018427387904", "18446744073709551615", "\"x\"", "1.5"}) {
    const std::string f = temp_file("o.jsonl", std::string("{\"prompt\": \"a\", \"output_tokens\": ") + v + "}\n");
    INFO(v);
    CHECK_THROWS_WITH(jsonl_dataset(f, *tok, 1, 7),
                      Catch::Contains("line 1: output_tokens must be an integer in [1, 16777216]"));
  }
  // Cycling a big prompt: the workload's text stays within the dataset cap.
  std::string words;
  while (words.size() < (64 << 10)) words += "a cat ";
  const std::string big = temp_file("big.jsonl", "\"" + words + "\"\n");
  CHECK_THROWS_WITH(jsonl_dataset(big, *tok, 20000, 7), Catch::Contains("lower --num-prompts"));
  for (const std::string& f : {huge, deep, big, temp_file("o.jsonl", "")}) std::remove(f.c_str());
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
  CHECK_THROWS_AS(arrival_times(4, 1.0, INFINITY, 0), std::invalid_argument);
  // Degenerate gamma gaps (shape 1e-300 rounds every draw to 0, or overflows their sum): every
  // arrival is a finite time in [0, n / rate], never NaN (which became an undefined duration).
  for (double b : {1e-300, 1e-30}) {
    for (double rate : {1e-6, 1.0, 1e300}) {
      const auto d = arrival_times(16, rate, b, 3);
      for (double x : d) {
        INFO("burstiness " << b << " rate " << rate << " arrival " << x);
        CHECK(std::isfinite(x));
        CHECK(x >= 0);
        CHECK(x <= 16 / rate);
      }
    }
  }
}
