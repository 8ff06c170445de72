// --load-format dummy end to end (issue 11 item 7): `octet generate` and `octet serve` on the
// tiny-llama preset with the stories260K tokenizer, run as the real binary; the start-up memory
// line; one completion over HTTP.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "kernels/cpu/w8a8.h"
#include "serve_process.h"

namespace {

using octet::testing::RunResult;

// Runs octet with `args`; its stdout is the output, stderr goes to `err_file` when given, else
// is dropped.
RunResult run(const std::string& args, const std::string& err_file = "/dev/null") {
  return octet::testing::run_command(octet_binary() + " " + args + " 2>" + err_file);
}

const std::string kDummy = "--load-format dummy --model tiny-llama --tokenizer " + kStories +
                           " --device cpu --kv-cache-memory-bytes 8388608";

}  // namespace

TEST_CASE("generate --load-format dummy: tiny preset, seeded, memory line", "[cli][dummy]") {
  const std::string err = "/tmp/octet_dummy_gen_" + std::to_string(getpid()) + ".log";
  const std::string gen = "generate " + kDummy +
                          " --prompt-ids 1,20,30 --max-tokens 10 --temperature 0 --ignore-eos";
  const RunResult a = run(gen + " --json");
  INFO(a.output);
  REQUIRE(a.exit_code == 0);
  const auto ja = nlohmann::json::parse(a.output);
  CHECK(ja["prompt_token_ids"] == std::vector<int>{1, 20, 30});
  REQUIRE(ja["token_ids"].size() == 10);
  for (int id : ja["token_ids"]) CHECK((id >= 0 && id < 512));
  CHECK(ja["linear_format"] == "fp8-w8a8-dynamic-channel");
  CHECK(ja["finish_reason"] == "length");
  // The same (default) seed gives the same weights, hence the same greedy tokens; another
  // --seed other weights.
  CHECK(nlohmann::json::parse(run(gen + " --json").output)["token_ids"] == ja["token_ids"]);
  CHECK(nlohmann::json::parse(run(gen + " --json --seed 42").output)["token_ids"] !=
        ja["token_ids"]);
  // Without --json the start-up report (stderr) leads with the memory figures.
  const RunResult t = run(gen, err);
  CHECK(t.exit_code == 0);
  const std::string log = slurp(err);
  std::remove(err.c_str());
  INFO(log);
  // 269.2 KiB row-major; the AVX2 path's Rows8x32 layout pads each of o_proj's 4 k-parts of
  // 16 codes to 32: 64 rows x 4 x 16 more bytes in each of 2 layers = 8 KiB more.
  const bool packed = octet::w8a8_preferred_layout() == octet::Fp8Layout::Rows8x32;
  CHECK(log.find(packed ? "memory: weights 277.2 KiB, activations "
                        : "memory: weights 269.2 KiB, activations ") != std::string::npos);
  CHECK(log.find("KV 256 B per token (auto = bf16), KV budget 8.0 MiB "
                 "(--kv-cache-memory-bytes), 16 sequences of 2048 tokens fit in the KV budget") !=
        std::string::npos);
}

TEST_CASE("generate --load-format dummy: errors exit 2 and name the option", "[cli][dummy]") {
  const std::string err = "/tmp/octet_dummy_err_" + std::to_string(getpid()) + ".log";
  CHECK(run("generate --load-format dummy --model tiny-llama --prompt hi", err).exit_code == 2);
  CHECK(slurp(err).find("--tokenizer") != std::string::npos);
  CHECK(run("generate --load-format weird --model tiny-llama --prompt hi", err).exit_code == 2);
  CHECK(slurp(err).find("--load-format must be auto or dummy") != std::string::npos);
  CHECK(run("generate " + kDummy + " --prompt hi --gpu-memory-utilization 1.5", err).exit_code ==
        2);
  CHECK(slurp(err).find("--gpu-memory-utilization must be in (0, 1]") != std::string::npos);
  std::remove(err.c_str());
}

TEST_CASE("OCTET_CPU_W8A8_KERNEL picks the W8A8 path or exits 2 naming the value",
          "[cli][dummy]") {
  const std::string err = "/tmp/octet_dummy_kernel_" + std::to_string(getpid()) + ".log";
  const std::string gen = "generate " + kDummy +
                          " --prompt-ids 1,20,30 --max-tokens 6 --temperature 0 --ignore-eos --json";
  const auto with = [&](const std::string& kernel) {
    return octet::testing::run_command("OCTET_CPU_W8A8_KERNEL=" + kernel + " " + octet_binary() +
                                       " " + gen + " 2>" + err);
  };
  const RunResult bad = with("avx9");
  CHECK(bad.exit_code == 2);
  CHECK(slurp(err).find("OCTET_CPU_W8A8_KERNEL=avx9: expected auto, avx512, avx2 or scalar") !=
        std::string::npos);
  // The scalar path runs anywhere; it is not bit-identical to the vector paths (its own FP32
  // summation order), so only the run is checked, not its tokens.
  const RunResult scalar = with("scalar");
  CHECK(scalar.exit_code == 0);
  CHECK(nlohmann::json::parse(scalar.output)["token_ids"].size() == 6);
  if (!octet::w8a8_avx512_available()) {
    CHECK(with("avx512").exit_code == 2);
    CHECK(slurp(err).find("this CPU lacks AVX-512") != std::string::npos);
  }
  std::remove(err.c_str());
}

TEST_CASE("serve --load-format dummy answers a completion over HTTP", "[http][dummy]") {
  ServeProcess server({"--load-format", "dummy", "--tokenizer", kStories, "--device", "cpu",
                       "--kv-cache-memory-bytes", "8388608"},
                      0, "tiny-llama");
  // 277.2 KiB with the AVX2 path's Rows8x32 layout (see the generate case above).
  CHECK(server.log().find(octet::w8a8_preferred_layout() == octet::Fp8Layout::Rows8x32
                              ? "memory: weights 277.2 KiB"
                              : "memory: weights 269.2 KiB") != std::string::npos);
  const std::string body =
      R"({"model": "tiny-llama", "prompt": "Once upon a time", "max_tokens": 6,
          "temperature": 0, "ignore_eos": true})";
  const Received r = roundtrip(server.port(), post("/v1/completions", body), 30);
  INFO(r.bytes);
  REQUIRE(r.bytes.rfind("HTTP/1.1 200", 0) == 0);
  // The one JSON object of the body (whether framed by Content-Length or one chunk).
  const size_t begin = r.bytes.find('{', r.bytes.find("\r\n\r\n"));
  const auto j = nlohmann::json::parse(r.bytes.substr(begin, r.bytes.rfind('}') + 1 - begin));
  CHECK(j["object"] == "text_completion");
  CHECK(j["model"] == "tiny-llama");
  CHECK(j["choices"][0]["finish_reason"] == "length");
  CHECK(j["usage"]["completion_tokens"] == 6);
  CHECK(j["choices"][0]["text"].is_string());
}
