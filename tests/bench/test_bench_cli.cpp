// `octet bench serve` and `octet plan` as a user runs them: bad options give one clear line and
// a non-zero exit; a run against a scripted server prints vLLM's table and writes its JSON;
// `octet plan` reproduces figures worked out by hand below.
#include <sys/socket.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "fake_openai_server.h"
#include "test_model_paths.h"

using octet::testing::FakeRequest;
using octet::testing::FakeServer;

namespace {

using octet::testing::run_octet;

// An OpenAI-like server: one model, streams "hi" x3 100 ms apart, or 500 for prompt "boom".
FakeServer::Handler openai_like() {
  return [](const FakeRequest& req, int fd) {
    if (req.method == "GET" && req.path == "/v1/models")
      return FakeServer::reply(fd, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"fake\",\"root\":\"fake\"}]}");
    const nlohmann::json body = nlohmann::json::parse(req.body);
    if (body["prompt"] == "boom") return FakeServer::reply(fd, 500, "{\"error\":\"boom\"}");
    FakeServer::start_sse(fd);
    for (int i = 0; i < 3; ++i) {
      FakeServer::sleep_ms(100);
      FakeServer::event(fd, "{\"choices\":[{\"text\":\"hi\"}]}");
    }
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3}}");
    FakeServer::event(fd, "[DONE]");
  };
}

}  // namespace

TEST_CASE("bench serve: bad options are one clear line and exit 2") {
  octet::testing::RunResult r = run_octet("bench serve --request-rate -1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--request-rate must be a positive number"));
  r = run_octet("bench serve --request-rate fast");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("'fast' is not a number"));
  r = run_octet("bench serve --dataset-name imagenet");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--dataset-name must be random, sharegpt or jsonl"));
  r = run_octet("bench serve --dataset-name sharegpt --dataset-path /nonexistent/sharegpt.json");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("'/nonexistent/sharegpt.json' cannot be read"));
  r = run_octet("bench serve --goodput ttft:fast");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--goodput ttft"));
  r = run_octet("bench serve --goodput latency:5");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("'latency' is not one of ttft, tpot, e2el"));
  r = run_octet("bench serve --base-url https://127.0.0.1:1");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("is not http://HOST[:PORT][/PATH]"));
}

TEST_CASE("bench serve: out-of-range numbers are usage errors (exit 2), not undefined behaviour") {
  // 1e-300 requests/s made a timer duration far beyond the clock's range (undefined behaviour);
  // NaN or infinite values and counts that would allocate without bound are refused likewise.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--request-rate 1e-300", "--request-rate must be at least 1e-06"},
      {"--request-rate nan", "--request-rate must be a positive number"},
      {"--request-rate 1e999", "--request-rate: '1e999' is not a number"},
      {"--burstiness inf", "--burstiness must be a positive finite number"},
      {"--burstiness nan", "--burstiness must be a positive finite number"},
      {"--request-timeout 1e300", "--request-timeout must be in (0, 31536000] seconds"},
      {"--request-timeout inf", "--request-timeout must be in (0, 31536000] seconds"},
      {"--ready-check-timeout-sec 1e300", "--ready-check-timeout-sec must be in [0, 31536000]"},
      {"--num-prompts 100000000000", "--num-prompts must be in [1, 10000000]"},
      {"--num-warmups 100000000000", "--num-warmups must be in [0, 10000000]"},
      {"--random-input-len 1000000000000", "--random-input-len must be at most 16777216 tokens"},
      {"--dataset-name jsonl --dataset-path /tmp", "--dataset-path '/tmp' is a directory"},
  };
  for (const auto& [args, message] : cases) {
    const octet::testing::RunResult r = run_octet("bench serve " + args);
    INFO(args << ": " << r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(message));
  }
}

TEST_CASE("bench serve: an unreachable server and URLs that are not servers") {
  int port = 0;
  {
    FakeServer gone([](const FakeRequest&, int) {});
    port = gone.port();
  }
  octet::testing::RunResult r = run_octet("bench serve --base-url http://127.0.0.1:" + std::to_string(port) + " --num-prompts 1");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("cannot connect to 127.0.0.1:" + std::to_string(port)));

  FakeServer not_http([](const FakeRequest&, int fd) { FakeServer::send_all(fd, "hello there\n"); });
  r = run_octet("bench serve --base-url " + not_http.url() + " --num-prompts 1");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("did not get an HTTP reply"));

  FakeServer web([](const FakeRequest&, int fd) { FakeServer::reply(fd, 404, "<html>no</html>"); });
  r = run_octet("bench serve --base-url " + web.url() + " --num-prompts 1");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("is not an OpenAI-compatible server: GET /v1/models gave HTTP 404"));
}

TEST_CASE("bench serve against a scripted server: table, failures and result JSON") {
  const std::string stories = octet::testing::stories();
  FakeServer server(openai_like());
  const std::string jsonl = "/tmp/octet_bench_cli_" + std::to_string(getpid()) + ".jsonl";
  const std::string result = jsonl + ".result.json";
  std::ofstream(jsonl) << "\"a cat\"\n\"boom\"\n\"a dog\"\n";
  const octet::testing::RunResult r = run_octet("bench serve --base-url " + server.url() + " --tokenizer " + stories +
                      " --dataset-name jsonl --dataset-path " + jsonl +
                      " --num-prompts 3 --max-concurrency 1 --goodput ttft:5000 tpot:5000"
                      " --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99"
                      " --result-json " + result);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("Successful requests:                     2         \n"));
  CHECK_THAT(r.output, Catch::Contains("Failed requests:                         1         \n"));
  CHECK_THAT(r.output, Catch::Contains("Maximum request concurrency:             1         \n"));
  CHECK_THAT(r.output, Catch::Contains("Total generated tokens:                  6         \n"));
  CHECK_THAT(r.output, Catch::Contains("Error 0: HTTP 500"));
  CHECK_THAT(r.output, Catch::Contains("P50 E2EL (ms):"));
  std::ifstream in(result);
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["completed"] == 2);
  CHECK(j["failed"] == 1);
  CHECK(j["total_input_tokens"] == 8);   // usage.prompt_tokens 4 x 2
  CHECK(j["total_output_tokens"] == 6);  // usage.completion_tokens 3 x 2
  CHECK(j["request_goodput"].get<double>() > 0);
  // Three chunks 100 ms apart: TTFT >= 100 ms, ITL ~100 ms, TPOT = (E2EL - TTFT) / 2 ~100 ms.
  CHECK(j["median_ttft_ms"].get<double>() >= 95);
  CHECK(j["median_itl_ms"].get<double>() >= 95);
  CHECK(j["median_itl_ms"].get<double>() < 300);
  CHECK(j["median_tpot_ms"].get<double>() >= 95);
  CHECK(j["median_e2el_ms"].get<double>() >= 295);
  CHECK(j["model_id"] == "fake");
  std::remove(jsonl.c_str());
  std::remove(result.c_str());
}

TEST_CASE("bench serve against a hostile server: each bad reply fails alone, the run completes") {
  // An endless SSE stream, a lying Content-Length, an endless error body and usage of 2^62
  // tokens: four failed requests with their reasons, one success, exit 0, sane totals.
  const std::string stories = octet::testing::stories();
  FakeServer server([](const FakeRequest& req, int fd) {
    if (req.method == "GET")
      return FakeServer::reply(fd, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"fake\"}]}");
    const std::string prompt = nlohmann::json::parse(req.body)["prompt"];
    auto flood = [fd](const std::string& piece) {
      while (::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) > 0) {
      }
    };
    if (prompt == "lying length")
      return FakeServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 999999999999999\r\n\r\n");
    if (prompt == "endless error") {
      FakeServer::send_all(fd, "HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n");
      return flood(std::string(1 << 16, 'x'));
    }
    FakeServer::start_sse(fd);
    if (prompt == "endless stream") return flood(": ping\n\n");
    FakeServer::event(fd, "{\"choices\":[{\"text\":\"hi\"}]}");
    const std::string tokens = prompt == "usage 2^62" ? "4611686018427387904" : "1";
    FakeServer::event(fd, "{\"choices\":[],\"usage\":{\"prompt_tokens\":" + tokens +
                              ",\"completion_tokens\":" + tokens + "}}");
    FakeServer::event(fd, "[DONE]");
  });
  const std::string jsonl = "/tmp/octet_bench_hostile_" + std::to_string(getpid()) + ".jsonl";
  const std::string result = jsonl + ".result.json";
  std::ofstream(jsonl) << "\"a cat\"\n\"endless stream\"\n\"lying length\"\n\"endless error\"\n"
                          "\"usage 2^62\"\n";
  const octet::testing::RunResult r = run_octet(
      "bench serve --base-url " + server.url() + " --tokenizer " + stories +
      " --dataset-name jsonl --dataset-path " + jsonl + " --num-prompts 5 --request-timeout 2"
      " --result-json " + result);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("Successful requests:                     1         \n"));
  CHECK_THAT(r.output, Catch::Contains("Failed requests:                         4         \n"));
  CHECK_THAT(r.output, Catch::Contains("timed out after 2"));
  CHECK_THAT(r.output, Catch::Contains("over the 16777216-byte limit"));
  CHECK_THAT(r.output, Catch::Contains("(error body cut at 65536 bytes)"));
  CHECK_THAT(r.output, Catch::Contains("not a token count"));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(result));
  CHECK(j["total_input_tokens"] == 1);
  CHECK(j["total_output_tokens"] == 1);
  std::remove(jsonl.c_str());
  std::remove(result.c_str());
}

TEST_CASE("plan: Llama-3.1-8B on an H100 at 128K context, by hand") {
  const octet::testing::RunResult r = run_octet("plan --model llama-3.1-8b --device h100-sxm-80gb --max-model-len 131072 "
                      "--device-memory-gib 80 --gpu-memory-utilization 0.9 --reserved-memory-gib 2 "
                      "--json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  REQUIRE(j["plans"].size() == 4);
  const nlohmann::json& bb = j["plans"][0];  // bf16 weights, bf16 KV
  const nlohmann::json& bf = j["plans"][1];  // bf16 weights, fp8 KV
  const nlohmann::json& fb = j["plans"][2];  // fp8 weights, bf16 KV
  const nlohmann::json& ff = j["plans"][3];  // fp8 weights, fp8 KV
  CHECK(bb["weight_dtype"] == "bf16");
  CHECK(bf["kv_cache_dtype"] == "fp8");
  CHECK(ff["selected"] == true);  // the defaults --weight-dtype fp8 --kv-cache-dtype fp8
  // KV per token = 2 (K, V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes = 131072 = 128 KiB.
  CHECK(bb["kv_bytes_per_token"] == 131072);
  CHECK(bf["kv_bytes_per_token"] == 65536);  // FP8: half
  // Per 128K sequence: 131072 x 131072 = 17179869184 = 16 GiB; FP8 8 GiB.
  CHECK(bb["kv_bytes_per_sequence"] == 17179869184LL);
  CHECK(bf["kv_bytes_per_sequence"] == 8589934592LL);
  // Parameters: embed + lm_head 2 x 128256 x 4096 = 1050673152; per layer q 4096x4096 +
  // k, v 2 x 1024x4096 + o 4096x4096 + MLP 3 x 4096x14336 = 218103808 linear, 2 x 4096 norms;
  // x 32 = 6979321856 linear + 262144 norms; final norm 4096. Total 8030261248.
  CHECK(j["model"]["num_parameters"] == 8030261248LL);
  // BF16 weights: 2 bytes each = 16060522496.
  CHECK(bb["weight_bytes_per_device"] == 16060522496LL);
  // FP8 weights: 6979321856 linear x 1 + FP32 scale per output channel (4096 + 2 x 1024 +
  // 4096 + 2 x 14336 + 4096 = 43008 per layer, x 32 x 4 bytes = 5505024) + 16-bit rest
  // (1050673152 + 262144 + 4096 = 1050939392, x 2 = 2101878784) = 9086705664.
  CHECK(ff["weight_bytes_per_device"] == 9086705664LL);
  // Budget = 80 GiB x 0.9 - 2 GiB = 75161927680 bytes, minus the weights:
  //   bf16 weights: 59101405184 -> / 16 GiB = 3.44 -> 3; / 8 GiB = 6.88 -> 6
  //   fp8 weights:  66075222016 -> / 16 GiB = 3.85 -> 3; / 8 GiB = 7.69 -> 7
  CHECK(bb["kv_budget_bytes_per_device"] == 59101405184LL);
  CHECK(ff["kv_budget_bytes_per_device"] == 66075222016LL);
  CHECK(bb["sequences_fit"] == 3);
  CHECK(bf["sequences_fit"] == 6);
  CHECK(fb["sequences_fit"] == 3);
  CHECK(ff["sequences_fit"] == 7);
  CHECK(bb["batch_fits"] == true);  // batch 1 <= 3
  // One sequence at 128K reads weights + its KV per step, at 3.35 TB/s:
  //   bf16/bf16: 16060522496 + 17179869184 = 33240391680 B -> 9.9225 ms -> 100.78 tokens/s
  //   fp8/fp8:   9086705664 + 8589934592 = 17676640256 B -> 5.2766 ms -> 189.52 tokens/s
  CHECK(bb["bytes_per_decode_step"] == 33240391680LL);
  CHECK(ff["bytes_per_decode_step"] == 17676640256LL);
  CHECK(bb["decode_step_floor_ms"].get<double>() == Approx(9.92250498).epsilon(1e-6));
  CHECK(bb["decode_tokens_per_s_floor"].get<double>() == Approx(100.78).epsilon(1e-4));
  CHECK(ff["decode_step_floor_ms"].get<double>() == Approx(5.27660903).epsilon(1e-6));
  CHECK(ff["decode_tokens_per_s_floor"].get<double>() == Approx(189.517).epsilon(1e-4));
}

TEST_CASE("plan: batch, tensor parallelism, skip layers and the table") {
  // Batch 3 at fp8/fp8: 9086705664 + 3 x 8589934592 = 34856509440 B -> 10.40493 ms -> 288.32/s.
  octet::testing::RunResult r = run_octet("plan --model llama-3.1-8b --device h100-sxm-80gb --max-model-len 131072 "
                "--batch-size 3 --json");
  REQUIRE(r.exit_code == 0);
  nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["plans"][3]["bytes_per_decode_step"] == 34856509440LL);
  CHECK(j["plans"][3]["decode_tokens_per_s_floor"].get<double>() == Approx(288.32).epsilon(1e-4));
  // Defaults: 81559 MiB x 0.9 - 1024 MiB = 72379.1 MiB; minus 15316.5 MiB of BF16 weights =
  // 57062.6 MiB = 3.48 x 16 GiB: bf16/bf16 fits 3, so batch 3 fits.
  CHECK(j["plans"][0]["sequences_fit"] == 3);
  CHECK(j["plans"][0]["batch_fits"] == true);
  // TP 2: 4 KV heads per device, so 4 GiB of FP8 KV per 128K sequence per device; weights
  // 9086705664 / 2 = 4543352832 per device.
  r = run_octet("plan --model llama-3.1-8b --device h100-sxm-80gb --max-model-len 131072 "
            "--tensor-parallel-size 2 --json");
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.output);
  CHECK(j["plans"][3]["kv_bytes_per_sequence_per_device"] == 4294967296LL);
  CHECK(j["plans"][3]["weight_bytes_per_device"] == 4543352832LL);
  // Two layers kept 16-bit under FP8: 30 x 8 x 128 x 2 x 1 + 2 x 8 x 128 x 2 x 2 = 69632 B.
  r = run_octet("plan --model llama-3.1-8b --device h100-sxm-80gb --max-model-len 1024 "
            "--kv-cache-dtype-skip-layers 0,31 --json");
  REQUIRE(r.exit_code == 0);
  j = nlohmann::json::parse(r.output);
  CHECK(j["plans"][3]["kv_bytes_per_token"] == 69632);
  // The table prints the same figures.
  r = run_octet("plan --model llama-3.1-8b --device h100-sxm-80gb --max-model-len 131072");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("KV per token (KiB)                           128.0            64.0"));
  CHECK_THAT(r.output, Catch::Contains("KV per sequence (GiB)                       16.000           8.000"));
  // Errors.
  r = run_octet("plan --model llama-9-1t --device h100-sxm-80gb");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("neither a preset"));
  r = run_octet("plan --model llama-3.1-8b --device tpu-v5");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("--device must be"));
  r = run_octet("plan --model llama-3.1-8b --kv-cache-dtype-skip-layers 40");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("layer 40 is outside"));
}

TEST_CASE("plan reads a GGUF's shapes") {
  // stories260K: 5 layers, 4 KV heads x head_dim 8 (dim 64, 8 heads): BF16 KV
  // 2 x 5 x 4 x 8 x 2 = 640 bytes per token.
  const octet::testing::RunResult r = run_octet("plan --model " + octet::testing::stories() + " --device cpu "
                      "--device-memory-gib 1 --bandwidth-gbs 10 --max-model-len 512 --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["model"]["num_hidden_layers"] == 5);
  CHECK(j["plans"][0]["kv_bytes_per_token"] == 640);
  CHECK(j["plans"][0]["kv_bytes_per_sequence"] == 640 * 512);
}
