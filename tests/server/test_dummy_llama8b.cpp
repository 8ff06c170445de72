// A Llama-3.1-8B-shaped dummy model starts on the CPU and reports its memory figures without a
// host copy of the model (issue 11 item 7 acceptance; CTest label `heavy`: ~10 GB of weights
// are generated, minutes on a shared machine). Runs the real `octet bench latency` under
// /usr/bin/time -v and prints its peak RSS.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "test_model_paths.h"

namespace {

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

constexpr int64_t kGiB = int64_t{1} << 30;

}  // namespace

TEST_CASE("llama-3.1-8b dummy starts and reports its memory figures", "[dummy][heavy]") {
  const std::string stories = octet::testing::stories();
  // Weights by hand (HF config: hidden 4096, 32 layers, 32 heads x 128, 8 KV heads,
  // intermediate 14336, vocab 128256): E4M3 linears with FP32 per-channel scales, FP32 norms,
  // FP32 embedding table, BF16 lm_head.
  const int64_t h = 4096, kv = 8 * 128, ffn = 14336, vocab = 128256;
  const int64_t layer = (h * h * 2 + kv * h * 2 + ffn * h * 3) +
                        (h + kv + kv + h + ffn + ffn + h) * 4 + 2 * h * 4;
  const int64_t weights = 32 * layer + vocab * h * 4 + vocab * h * 2 + h * 4;
  REQUIRE(weights == 10137911296);  // 9.44 GiB
  if (mem_available_bytes() < weights + 4 * kGiB) {
    std::fprintf(stderr, "SKIP: %.1f GiB of memory available, the 8B dummy needs ~12\n",
                 static_cast<double>(mem_available_bytes()) / kGiB);
    std::exit(77);
  }
  const std::string err = "/tmp/octet_dummy_8b_" + std::to_string(getpid()) + ".log";
  const std::string cmd = "/usr/bin/time -v " + std::string(OCTET_BINARY) +
                          " bench latency --load-format dummy --model llama-3.1-8b --tokenizer " +
                          stories +
                          " --device cpu --max-model-len 4096 --input-len 16 --output-len 1 "
                          "--num-iters 1 --num-iters-warmup 0 --kv-cache-dtype fp8_e4m3 "
                          ">/dev/null 2>" + err;
  const int status = std::system(cmd.c_str());
  std::string log;
  {
    std::ifstream in(err);
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::remove(err.c_str());
  INFO(log);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(log.find("model llama-3.1-8b: 32 layers, fp8-w8a8-dynamic-channel linears, "
                 "max_model_len 4096") != std::string::npos);
  // 64 KiB of FP8 KV per token (32 layers x K,V x 8 heads x 128); 1 GiB holds 4 x 4096 tokens.
  CHECK(log.find("memory: weights 9.44 GiB, activations ") != std::string::npos);
  CHECK(log.find("KV 64.0 KiB per token (fp8_e4m3), KV budget 1.00 GiB (default 1 GiB), "
                 "4 sequences of 4096 tokens fit in the KV budget") != std::string::npos);
  std::smatch m;
  REQUIRE(std::regex_search(log, m, std::regex("Maximum resident set size \\(kbytes\\): (\\d+)")));
  const int64_t rss = std::stoll(m[1]) * 1024;
  std::printf("llama-3.1-8b dummy: peak RSS %.2f GiB (weights %.2f GiB + 1 GiB KV)\n",
              static_cast<double>(rss) / kGiB, static_cast<double>(weights) / kGiB);
  // The weights, the KV cache, the activations and one tensor in flight; a host copy of the
  // model's linears (6.5 GiB) would not fit under this bound.
  CHECK(rss < weights + 4 * kGiB);
}
