// --load-format dummy through the engine (engine/model_loader.h, engine/kv_cache_setup.h): the
// tiny preset with the stories260K tokenizer, a vocabulary larger than the tokenizer's (ids the
// tokenizer does not know decode to nothing, as Hugging Face tokenizers drop them), the memory
// figures (weights counted by hand from the tiny preset's shapes) and the KV budget from
// --gpu-memory-utilization / --kv-cache-memory-bytes, with their errors.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "kernels/cpu/w8a8.h"
#include "test_model_paths.h"

namespace octet {
namespace {

ModelSource dummy(const std::string& model) {
  ModelSource s;
  s.model = model;
  s.load_format = "dummy";
  s.tokenizer = testing::stories();
  return s;
}

LoadOptions cpu(int world = 1) {
  LoadOptions o = make_load_options("auto", "channel");
  o.device = "cpu";
  o.world_size = world;
  return o;
}

// A config.json directory of a 3-layer model with 1000 tokens (stories260K has 512).
struct WideVocabDir {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("octet_dummy_wide_" + std::to_string(getpid()));
  WideVocabDir() {
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "config.json")
        << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
               "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
               "intermediate_size": 48, "vocab_size": 1000, "max_position_embeddings": 256})";
  }
  ~WideVocabDir() { std::filesystem::remove_all(dir); }
};

EngineArgs tiny_args() {
  EngineArgs a;
  a.model = "tiny-llama";
  a.load_format = "dummy";
  a.tokenizer = testing::stories();
  a.device = "cpu";
  a.cache.kv_cache_memory_bytes = 4 << 20;
  return a;
}

std::vector<int32_t> greedy_tokens(Engine& e, int64_t n, float temperature = 0.0f,
                                   std::string* text = nullptr) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = 3;
  p.max_tokens = n;
  p.ignore_eos = true;
  auto stream = e.add_request("r", {1, 20, 30, 40}, p);
  std::vector<int32_t> ids;
  while (auto out = stream->next()) {
    REQUIRE(out->error.empty());
    ids.insert(ids.end(), out->token_ids.begin(), out->token_ids.end());
    if (text) *text += out->text;
  }
  return ids;
}

}  // namespace

TEST_CASE("dummy load: tiny preset with the stories260K tokenizer", "[dummy]") {
  const auto m = load_model(dummy("tiny-llama"), cpu());
  CHECK(m->load_format == "dummy");
  CHECK(m->model->config().vocab_size == 512);  // the tokenizer's
  CHECK(m->tokenizer->vocab_size() == 512);
  CHECK(m->model->linear_format() == "fp8-w8a8-dynamic-channel");
  CHECK(m->eos_token_ids == std::vector<int32_t>{2});  // stories260K's </s>
  CHECK(m->host_memory_available_bytes > 0);
  CHECK(m->model_tokenizer->tokenize("Once upon a time", true) ==
        load_tokenizer(testing::stories())->encode("Once upon a time", true, true));
}

TEST_CASE("dummy load: errors name the option", "[dummy]") {
  ModelSource no_tok = dummy("tiny-llama");
  no_tok.tokenizer.clear();
  CHECK_THROWS_WITH(load_model(no_tok, cpu()), Catch::Contains("--tokenizer"));
  ModelSource bad = dummy("tiny-llama");
  bad.load_format = "safetensors";
  CHECK_THROWS_WITH(load_model(bad, cpu()), Catch::Contains("--load-format"));
  CHECK_THROWS_WITH(load_model(dummy("no-such-preset"), cpu()),
                    Catch::Contains("no-such-preset") && Catch::Contains("tiny-llama"));
  // tiny-llama's 4 heads and 2 KV heads do not split over 3 ranks.
  CHECK_THROWS_WITH(load_model(dummy("tiny-llama"), cpu(3)),
                    Catch::Contains("tensor_parallel_size 3"));
}

TEST_CASE("dummy load: ids beyond a smaller tokenizer decode to nothing", "[dummy]") {
  const WideVocabDir wide;
  const auto m = load_model(dummy(wide.dir.string()), cpu());
  CHECK(m->model->config().vocab_size == 1000);
  const Tokenizer& t = *m->tokenizer;
  CHECK(t.vocab_size() == 1000);
  const auto plain = load_tokenizer(testing::stories());
  const std::vector<int32_t> known = plain->encode("Once upon a time", false, false);
  std::vector<int32_t> mixed = {700};
  mixed.insert(mixed.end(), known.begin(), known.end());
  mixed.push_back(999);
  CHECK(t.decode(mixed, true) == plain->decode(known, true));
  CHECK(t.decode(mixed, false) == plain->decode(known, false));
  CHECK(t.token_bytes(512).empty());
  CHECK(t.token_text(999).empty());
  CHECK_FALSE(t.is_special(600));
  CHECK(t.token_bytes(known[0]) == plain->token_bytes(known[0]));
  CHECK_THROWS_AS(t.decode({1000}, false), std::out_of_range);
  CHECK_THROWS_AS(t.token_bytes(-1), std::out_of_range);
  // The streaming detokenizer and ModelTokenizer go through the same calls.
  StreamingDetokenizer stream(t, true);
  std::string streamed;
  for (int32_t id : mixed) streamed += stream.push(id);
  streamed += stream.finish();
  CHECK(streamed == plain->decode(known, true));
  CHECK(m->model_tokenizer->detokenize(mixed, true) == plain->decode(known, true));
  CHECK(m->model_tokenizer->vocab_size() == 1000);
  // A real checkpoint's tokenizer is not padded: only dummy models are.
  CHECK(pad_tokenizer_vocab(load_tokenizer(testing::stories()), 512)->vocab_size() == 512);
}

TEST_CASE("dummy engine: sampling over a vocabulary wider than the tokenizer", "[dummy]") {
  const WideVocabDir wide;
  EngineArgs a = tiny_args();
  a.model = wide.dir.string();
  auto e = Engine::create(a);
  std::string text;
  const std::vector<int32_t> ids = greedy_tokens(*e, 40, 1.0f, &text);
  REQUIRE(ids.size() == 40);
  int64_t beyond = 0;
  for (int32_t id : ids) beyond += id >= 512;
  CHECK(beyond > 0);  // ~half of a near-uniform draw over 1000 ids
  const auto plain = load_tokenizer(testing::stories());
  std::vector<int32_t> known;
  for (int32_t id : ids)
    if (id < 512) known.push_back(id);
  CHECK(text == plain->decode(known, true));
}

TEST_CASE("dummy engine: same seed same tokens, TP 2 runs", "[dummy]") {
  std::vector<int32_t> first;
  {
    auto e = Engine::create(tiny_args());
    first = greedy_tokens(*e, 12);
    CHECK(first.size() == 12);
    CHECK(e->linear_format() == "fp8-w8a8-dynamic-channel");
  }
  {
    auto e = Engine::create(tiny_args());
    CHECK(greedy_tokens(*e, 12) == first);
  }
  EngineArgs other = tiny_args();
  other.seed = 99;
  {
    auto e = Engine::create(other);
    CHECK(greedy_tokens(*e, 12) != first);
  }
  EngineArgs tp = tiny_args();
  tp.tensor_parallel_size = 2;
  auto e = Engine::create(tp);
  CHECK(greedy_tokens(*e, 12).size() == 12);
  CHECK_THAT(e->startup_report(), Catch::Contains("over 2 ranks"));
}

TEST_CASE("memory figures: weights by hand, KV per token, sequences that fit", "[dummy][kv]") {
  const auto m = load_model(dummy("tiny-llama"), cpu());
  // tiny-llama: hidden 64, 2 layers, 4 heads x 16, 2 KV heads, intermediate 128, vocab 512.
  const int64_t embed = 512 * 64 * 4, norm = 64 * 4, lm_head = 512 * 64 * 2;  // FP32, BF16
  const int64_t codes = 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 128 * 64 * 2 + 64 * 128;
  const int64_t scales = (64 + 32 + 32 + 64 + 128 + 128 + 64) * 4;
  // The AVX2 path's Rows8x32 layout pads o_proj's 4 k-parts of 16 codes to 32 codes each.
  const bool packed = w8a8_preferred_layout() == Fp8Layout::Rows8x32;
  const int64_t padding = packed ? 64 * 4 * 16 : 0;
  const int64_t weights = embed + norm + lm_head + 2 * (2 * norm + codes + padding + scales);
  CHECK(model_weight_bytes(*m->model) == weights);
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  cache.kv_cache_memory_bytes = 3 << 20;
  SchedulerConfig sched;
  sched.max_model_len = 1024;
  const KVCacheSetup s = setup_kv_cache(cache, sched, *m);
  CHECK(s.memory.weights_bytes == weights);
  CHECK(s.memory.kv_bytes_per_token == 2 * 2 * 2 * 16);  // layers x K,V x KV heads x head_dim
  CHECK(s.memory.activation_bytes > 0);
  CHECK(s.budget_bytes == 3 << 20);
  CHECK(s.memory.max_num_seqs_fit == (3 << 20) / (128 * 1024));  // 24 of 1024 tokens
  CHECK(s.memory.budget_source == "--kv-cache-memory-bytes");
  CHECK_THAT(s.report, Catch::StartsWith(packed ? "memory: weights 277.2 KiB, activations "
                                                 : "memory: weights 269.2 KiB, activations ") &&
                           Catch::Contains("KV 128 B per token (fp8_e4m3)") &&
                           Catch::Contains("KV budget 3.0 MiB (--kv-cache-memory-bytes)") &&
                           Catch::Contains("24 sequences of 1024 tokens fit in the KV budget"));
  // The default stays 1 GiB on the CPU.
  cache.kv_cache_memory_bytes = 0;
  const KVCacheSetup d = setup_kv_cache(cache, sched, *m);
  CHECK(d.budget_bytes == CacheConfig::kDefaultMemoryBytes);
  CHECK(d.memory.budget_source == "default 1 GiB");
}

TEST_CASE("gpu_memory_utilization sizes the KV budget from the host's memory", "[dummy][kv]") {
  const auto m = load_model(dummy("tiny-llama"), cpu());
  CacheConfig cache;
  cache.kv_cache_dtype = "fp8_e4m3";
  SchedulerConfig sched;
  sched.max_model_len = 256;
  sched.max_num_batched_tokens = 256;
  sched.max_num_seqs = 4;
  // A fraction leaving ~64 MiB after the weights and activations (whatever this host has).
  const double device = static_cast<double>(m->host_memory_available_bytes);
  cache.gpu_memory_utilization = (64.0 * (1 << 20) + 2e6) / device;
  const KVCacheSetup s = setup_kv_cache(cache, sched, *m);
  CHECK(s.memory.device_memory_bytes == m->host_memory_available_bytes);
  const double left = cache.gpu_memory_utilization * device -
                      static_cast<double>(s.memory.weights_bytes + s.memory.activation_bytes);
  CHECK(static_cast<double>(s.budget_bytes) <= left);
  CHECK(static_cast<double>(s.budget_bytes) > left - static_cast<double>(s.bytes_per_block));
  CHECK_THAT(s.memory.budget_source, Catch::StartsWith("--gpu-memory-utilization"));
  // --kv-cache-memory-bytes overrides it (vLLM's precedence); so does --num-kv-blocks.
  cache.kv_cache_memory_bytes = 1 << 20;
  CHECK(setup_kv_cache(cache, sched, *m).budget_bytes == 1 << 20);
  cache.kv_cache_memory_bytes = 0;
  cache.num_kv_blocks = 100;
  CHECK(setup_kv_cache(cache, sched, *m).num_usable_blocks == 100);
  cache.num_kv_blocks = 0;
  // Nothing left after the weights: a clear error naming the flag and the figures.
  cache.gpu_memory_utilization = 1000.0 / device;
  CHECK_THROWS_WITH(setup_kv_cache(cache, sched, *m),
                    Catch::Contains("--gpu-memory-utilization") &&
                        Catch::Contains("leaves no room for the KV cache") &&
                        Catch::Contains(w8a8_preferred_layout() == Fp8Layout::Rows8x32
                                            ? "277.2 KiB"    // o_proj padded, as above
                                            : "269.2 KiB"));
  // Room for blocks but not for one max_model_len sequence: the message names the source.
  cache.gpu_memory_utilization =
      (static_cast<double>(s.memory.weights_bytes + s.memory.activation_bytes) + 4096.0) /
      device;
  CHECK_THROWS_WITH(setup_kv_cache(cache, sched, *m),
                    Catch::Contains("fewer than one sequence") &&
                        Catch::Contains("--gpu-memory-utilization"));
}

}  // namespace octet
