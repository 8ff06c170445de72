// `octet generate` end to end: runs the real binary and checks its output and exit codes.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

using octet::testing::RunResult;

/// `octet ARGS`, stdout and stderr together.
RunResult run(const std::string& args) { return octet::testing::run_octet(args); }

const std::string kStories = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";

}  // namespace

TEST_CASE("generate --json reproduces the stories260K golden tokens", "[cli][golden]") {
  std::ifstream in(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.greedy.json");
  REQUIRE(in.good());
  const auto golden = nlohmann::json::parse(in);
  const RunResult r = run("generate --model " + kStories +
                          " --prompt-ids 1 --max-tokens 200 --temperature 0 --json "
                          "--quantization none");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["prompt_token_ids"] == std::vector<int>{1});
  CHECK(j["token_ids"] == golden["expected_token_ids"]);
  CHECK(j["tokens_per_second"].get<double>() > 0.0);
  const std::string text = j["text"];
  const std::string starts = golden["expected_text_starts_with"];
  CHECK(text.rfind(starts, 0) == 0);
}

TEST_CASE("generate runs FP8 W8A8 by default and reports it", "[cli][fp8]") {
  const RunResult r = run("generate --model " + kStories +
                          " --prompt-ids 1 --max-tokens 40 --temperature 0 --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto j = nlohmann::json::parse(r.output);
  CHECK(j["token_ids"].size() == 40);
  // FP8 changes the numerics but the tiny model still tells its story from the same start.
  std::ifstream in(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.greedy.json");
  const auto golden = nlohmann::json::parse(in);
  CHECK(j["token_ids"][0] == golden["expected_token_ids"][0]);
  const RunResult bad = run("generate --model " + kStories + " --prompt-ids 1 --quantization int4");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("--quantization") != std::string::npos);
}

TEST_CASE("generate with a text prompt and a seed is reproducible", "[cli]") {
  const std::string args = "generate --model " + kStories +
                           " --prompt 'Once upon a time' --max-tokens 20 --temperature 0.8 "
                           "--top-p 0.9 --seed 7 --json";
  const RunResult a = run(args), b = run(args);
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const auto ja = nlohmann::json::parse(a.output), jb = nlohmann::json::parse(b.output);
  CHECK(ja["token_ids"] == jb["token_ids"]);
  CHECK(ja["token_ids"].size() <= 20);
  CHECK(ja["prompt_token_ids"][0] == 1);  // BOS added for the llama tokenizer
}

TEST_CASE("generate takes any 64-bit seed, as the server's 'seed'", "[cli]") {
  const std::string args = "generate --model " + kStories +
                           " --prompt-ids 1 --max-tokens 40 --temperature 1.0 --json --seed ";
  auto ids = [&](const std::string& seed) {
    const RunResult r = run(args + seed);
    INFO(seed << ": " << r.output);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.output)["token_ids"];
  };
  for (const char* seed : {"-5", "-9223372036854775808", "9223372036854775807"})
    CHECK(ids(seed) == ids(seed));
  CHECK(ids("-5") != ids("5"));
}

TEST_CASE("a tiny temperature is greedy (as vLLM), not an overflow", "[cli]") {
  const RunResult a = run("generate --model " + kStories +
                          " --prompt-ids 1 --max-tokens 30 --temperature 1e-39 --json "
                          "--quantization none");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  std::ifstream in(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.greedy.json");
  const auto golden = nlohmann::json::parse(in)["expected_token_ids"];
  const auto ids = nlohmann::json::parse(a.output)["token_ids"];
  for (size_t i = 0; i < 30; ++i) CHECK(ids[i] == golden[i]);
}

TEST_CASE("generate reports bad input clearly and never crashes", "[cli][errors]") {
  SECTION("missing model file") {
    const RunResult r = run("generate --model /nonexistent/model.gguf --prompt-ids 1");
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("/nonexistent/model.gguf") != std::string::npos);
  }
  SECTION("token id outside the vocabulary") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1,99999");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("99999") != std::string::npos);
  }
  SECTION("malformed --prompt-ids") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1,x");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("'x'") != std::string::npos);
  }
  SECTION("both prompt forms") {
    const RunResult r = run("generate --model " + kStories + " --prompt hi --prompt-ids 1");
    CHECK(r.exit_code == 2);
  }
  SECTION("unknown flag") {
    const RunResult r = run("generate --model " + kStories + " --prompt hi --bogus 3");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("bogus") != std::string::npos);
  }
  SECTION("prompt plus max_tokens beyond the context") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1 --max-tokens 100000");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("context length") != std::string::npos);
  }
  SECTION("a stray word is a usage error, not silently dropped") {
    const RunResult r = run("generate --model " + kStories + " --prompt Hello world");
    CHECK(r.exit_code == 2);
  }
  SECTION("abbreviated flags are not guessed") {
    const RunResult r = run("generate --mod " + kStories + " --prompt-ids 1");
    CHECK(r.exit_code == 2);
  }
  SECTION("a trailing comma in --prompt-ids") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1,2,");
    CHECK(r.exit_code == 2);
  }
  SECTION("a named pipe as --model does not hang") {
    const std::string fifo = "/tmp/octet_test_fifo_" + std::to_string(::getpid());
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const RunResult r = run("generate --model " + fifo + " --prompt-ids 1");
    ::unlink(fifo.c_str());
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("not a regular file") != std::string::npos);
  }
  SECTION("a failed write is an error") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1 --max-tokens 3 "
                            "--json > /dev/full");
    CHECK(r.exit_code == 1);
  }
  SECTION("bench beyond the context length") {
    // Beyond int32 positions: rejected by the option's range, naming the flag.
    const RunResult r = run("bench latency --model " + kStories + " --input-len 99999999999");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("--input-len") != std::string::npos);
    CHECK(r.output.find("2147483647") != std::string::npos);
    // Within int32 but beyond the model: the context-length error.
    const RunResult r2 = run("bench latency --model " + kStories + " --input-len 100000");
    CHECK(r2.exit_code == 2);
    CHECK(r2.output.find("context length") != std::string::npos);
  }
  SECTION("max_tokens at the int64 limit does not overflow") {
    const RunResult r = run("generate --model " + kStories +
                            " --prompt-ids 1 --max-tokens 9223372036854775807");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("--max-tokens must be in [0, 2147483647]") != std::string::npos);
    const RunResult r2 = run("generate --model " + kStories +
                             " --prompt-ids 1 --max-tokens 2147483647");
    CHECK(r2.exit_code == 2);
    CHECK(r2.output.find("context length") != std::string::npos);
  }
  SECTION("a directory that is not a checkpoint") {
    const RunResult r = run("generate --model /tmp --prompt-ids 1");
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("without config.json") != std::string::npos);
  }
  SECTION("perplexity of a directory or a FIFO is an error, not a hang") {
    const RunResult r = run("perplexity --model " + kStories + " --text /tmp");
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("not a readable regular file") != std::string::npos);
  }
  SECTION("temperature out of range") {
    const RunResult r = run("generate --model " + kStories + " --prompt-ids 1 --temperature -1");
    CHECK(r.exit_code == 2);
    CHECK(r.output.find("temperature") != std::string::npos);
  }
}

TEST_CASE("generate --prompts-file runs every line concurrently, each as it runs alone",
          "[cli][engine]") {
  char path[] = "/tmp/octet_prompts_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  const std::vector<std::string> prompts = {"Once upon a time", "The little dog",
                                            "Lily and Tom went to the park"};
  {
    std::ofstream out(path);
    for (const std::string& p : prompts) out << p << "\n\n";  // empty lines are skipped
  }
  for (const std::string dtype : {"bf16", "fp8"}) {
    INFO("kv_cache_dtype " << dtype);
    const std::string common = " --max-tokens 24 --temperature 0 --json --kv-cache-dtype " +
                               dtype + " --calculate-kv-scales";
    const RunResult all = run("generate --model " + kStories + " --prompts-file " + path + common);
    INFO(all.output);
    REQUIRE(all.exit_code == 0);
    std::vector<nlohmann::json> lines;
    std::stringstream ss(all.output);
    std::string line;
    while (std::getline(ss, line))
      if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
    REQUIRE(lines.size() == prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      const RunResult one =
          run("generate --model " + kStories + " --prompt '" + prompts[i] + "'" + common);
      REQUIRE(one.exit_code == 0);
      const auto j = nlohmann::json::parse(one.output);
      CHECK(lines[i]["prompt_token_ids"] == j["prompt_token_ids"]);
      CHECK(lines[i]["token_ids"] == j["token_ids"]);
      CHECK(lines[i]["text"] == j["text"]);
      CHECK(lines[i]["kv_cache_dtype"] == dtype);
    }
  }
  // A JSON string line is decoded: "\n" escapes give a multi-line prompt.
  {
    std::ofstream out(path);
    out << "\"Once upon\\na time\"\n";
  }
  const RunResult json_line = run("generate --model " + kStories + " --prompts-file " + path +
                                  " --max-tokens 4 --temperature 0 --json");
  REQUIRE(json_line.exit_code == 0);
  const RunResult two_lines =
      run("generate --model " + kStories + " --prompt 'Once upon\na time' --max-tokens 4 "
          "--temperature 0 --json");
  REQUIRE(two_lines.exit_code == 0);
  CHECK(nlohmann::json::parse(json_line.output)["prompt_token_ids"] ==
        nlohmann::json::parse(two_lines.output)["prompt_token_ids"]);
  {
    std::ofstream out(path);
    out << "\"unterminated\n";
  }
  const RunResult bad_json = run("generate --model " + kStories + " --prompts-file " + path);
  CHECK(bad_json.exit_code == 1);  // a bad file, not a usage error
  CHECK(bad_json.output.find("line 1") != std::string::npos);
  CHECK(bad_json.output.find("--prompts-file") != std::string::npos);
  std::remove(path);
  const RunResult bad = run("generate --model " + kStories + " --prompts-file /nonexistent.txt");
  CHECK(bad.exit_code == 1);
  CHECK(bad.output.find("/nonexistent.txt") != std::string::npos);
  // An endless file is read up to kMaxPromptsFileBytes (64 MiB), then refused: one line naming
  // the flag, the path and the limit, before the model loads.
  const RunResult endless = run("generate --model " + kStories + " --prompts-file /dev/zero");
  CHECK(endless.exit_code == 1);
  CHECK(endless.output.find("--prompts-file /dev/zero") != std::string::npos);
  CHECK(endless.output.find("limit") != std::string::npos);
  const RunResult dtype = run("generate --model " + kStories + " --prompt-ids 1 --kv-cache-dtype int8");
  CHECK(dtype.exit_code == 2);
  CHECK(dtype.output.find("--kv-cache-dtype") != std::string::npos);
  const RunResult bs = run("generate --model " + kStories + " --prompt-ids 1 --block-size 12");
  CHECK(bs.exit_code == 2);
  CHECK(bs.output.find("--block-size") != std::string::npos);
}
