// Hostile config.json / GGUF metadata (issue 23, items 2, 3, 5, 10): every one is a
// ModelFileError naming the file and the field, raised before anything is sized from the value;
// never a crash, a hang, a truncated integer or gigabytes of memory. Real shapes still pass.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "gguf_writer.h"
#include "config/file_read.h"
#include "models/config_json.h"
#include "models/gguf.h"
#include "models/model_config.h"
#include "models/model_file_error.h"

using namespace octet;
using namespace octet::testing;
using nlohmann::json;
using Catch::Contains;
using Catch::Equals;
using Catch::StartsWith;

namespace {

const char* kPath = "/m/config.json";

/// A Llama-3.1-8B shaped config.json.
json llama8b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "intermediate_size": 14336, "vocab_size": 128256, "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0, "max_position_embeddings": 131072, "hidden_act": "silu",
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "tie_word_embeddings": false})");
}

/// The ModelFileError message of from_hf_config(c), "" when it parsed.
std::string hf_error(const json& c) {
  try {
    ModelConfig::from_hf_config(c, kPath);
  } catch (const ModelFileError& e) {
    CHECK(e.path() == kPath);
    return e.what();
  }
  return "";
}

json with(json c, const std::string& key, const json& v) {
  c[key] = v;
  return c;
}

}  // namespace

TEST_CASE("real config.json shapes pass validation", "[config][hostile]") {
  const ModelConfig c = ModelConfig::from_hf_config(llama8b(), kPath);
  CHECK(c.hidden_size == 4096);
  CHECK(c.bos_token_id == 128000);
  CHECK(c.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  // Llama 3.1 405B: the largest dense Llama.
  json big = llama8b();
  big["hidden_size"] = 16384;
  big["num_hidden_layers"] = 126;
  big["num_attention_heads"] = 128;
  big["intermediate_size"] = 53248;
  CHECK(hf_error(big) == "");
  // Qwen2.5-7B: a window larger than max_position_embeddings is legal.
  json qwen = json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
    "intermediate_size": 18944, "vocab_size": 152064, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "max_position_embeddings": 32768, "sliding_window": 131072,
    "use_sliding_window": false, "max_window_layers": 28, "bos_token_id": 151643,
    "eos_token_id": 151645, "tie_word_embeddings": false})");
  CHECK(hf_error(qwen) == "");
}

TEST_CASE("huge dimensions are one-line errors naming the field", "[config][hostile]") {
  // hidden_size 2^62 killed `octet plan` with SIGFPE; 300,000,000 layers allocated 2.5 GB.
  CHECK_THAT(hf_error(with(llama8b(), "hidden_size", int64_t{1} << 62)),
             StartsWith(std::string(kPath) + ": hidden_size is 4611686018427387904, must be in "
                                             "[1, 1048576]"));
  CHECK_THAT(hf_error(with(llama8b(), "num_hidden_layers", 300000000)),
             Contains("num_hidden_layers is 300000000"));
  CHECK_THAT(hf_error(with(llama8b(), "intermediate_size", int64_t{1} << 40)),
             Contains("intermediate_size"));
  CHECK_THAT(hf_error(with(llama8b(), "vocab_size", int64_t{1} << 40)), Contains("vocab_size"));
  CHECK_THAT(hf_error(with(llama8b(), "max_position_embeddings", int64_t{1} << 40)),
             Contains("max_position_embeddings"));
  CHECK_THAT(hf_error(with(llama8b(), "head_dim", int64_t{1} << 40)), Contains("head_dim"));
  CHECK_THAT(hf_error(with(llama8b(), "num_attention_heads", 18446744073709551615ull)),
             Contains("num_attention_heads"));
  // Each size within its cap, but the product is not: 2^20 x 2^22 x 3 x 4096 layers.
  json product = llama8b();
  product["hidden_size"] = 1 << 20;
  product["intermediate_size"] = 1 << 22;
  product["num_hidden_layers"] = 4096;
  product["num_attention_heads"] = 8192;
  product["num_key_value_heads"] = 8;
  CHECK_THAT(hf_error(product), Contains("more than 2^42 parameters"));
  // Qwen2 windows: a positive sliding_window beyond the cap.
  json qwen = with(llama8b(), "model_type", "qwen2");
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["use_sliding_window"] = true;
  qwen["sliding_window"] = int64_t{1} << 40;
  CHECK_THAT(hf_error(qwen), Contains("sliding_window is 1099511627776"));
}

TEST_CASE("floats that must be positive and normal", "[config][hostile]") {
  // rope_theta 1e-300 became 0 as float: server ready, every request 500.
  CHECK_THAT(hf_error(with(llama8b(), "rope_theta", 1e-300)), Contains("rope_theta is 0"));
  CHECK_THAT(hf_error(with(llama8b(), "rope_theta", 1e300)), Contains("rope_theta is inf"));
  CHECK_THAT(hf_error(with(llama8b(), "rms_norm_eps", 1e-50)), Contains("rms_norm_eps"));
  json rp = llama8b();
  rp["rope_scaling"]["factor"] = 1e-60;
  CHECK_THAT(hf_error(rp), Contains("rope_scaling.factor"));
  rp["rope_scaling"]["factor"] = 1e60;
  CHECK_THAT(hf_error(rp), Contains("rope_scaling.factor"));
  json v5 = llama8b();
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 1e-45}, {"rope_theta", 1e4}};
  CHECK_THAT(hf_error(v5), Contains("rope_scaling.factor"));
  // Normal values whose RoPE frequencies overflow float: 1 / (theta^(126/128) x factor).
  json lin = with(llama8b(), "rope_theta", 1e-30);
  lin["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1e-30}};
  CHECK_THAT(hf_error(lin), Contains("RoPE frequency"));
}

TEST_CASE("token ids are range-checked, never truncated", "[config][hostile]") {
  // 4294967299 = 2^32 + 3 used to become 3.
  CHECK_THAT(hf_error(with(llama8b(), "eos_token_id", 4294967299ll)),
             Contains("eos_token_id: must be an integer in [0, 2147483647], got 4294967299"));
  CHECK_THAT(hf_error(with(llama8b(), "eos_token_id", json::array({128001, 4294967299ll}))),
             Contains("eos_token_id[1]: must be an integer"));
  CHECK_THAT(hf_error(with(llama8b(), "eos_token_id", 2.5)), Contains("eos_token_id"));
  CHECK_THAT(hf_error(with(llama8b(), "eos_token_id", "2")), Contains("eos_token_id"));
  CHECK_THAT(hf_error(with(llama8b(), "bos_token_id", -1)), Contains("bos_token_id"));
  CHECK_THAT(hf_error(with(llama8b(), "bos_token_id", 128256)),
             Contains("bos_token_id 128256 is not below vocab_size 128256"));
  CHECK_THAT(hf_error(with(llama8b(), "eos_token_id", json::array({128001, 200000}))),
             Contains("eos_token_id[1] 200000 is not below vocab_size 128256"));
  CHECK(hf_error(with(llama8b(), "eos_token_id", nullptr)) == "");
}

TEST_CASE("a deeply nested value in an error message does not recurse", "[config][hostile]") {
  // json::dump() of a value nested 500,000 deep recursed once per level. (Values are moved into
  // place: copying such a json recurses too.)
  auto deep = [] {
    const size_t depth = 500000;
    return json::parse(std::string(depth, '[') + std::string(depth, ']'));
  };
  json c = llama8b();
  c["hidden_size"] = deep();
  const std::string msg = hf_error(c);
  CHECK_THAT(msg, Contains("hidden_size must be a positive integer below 2^63, got an array of 1"));
  CHECK(msg.size() < 200);
  c = llama8b();
  c["rope_scaling"] = deep();
  CHECK_THAT(hf_error(c), Contains("rope_scaling must be an object or null, got an array of 1"));
  c = llama8b();
  c["hidden_act"] = deep();
  CHECK_THAT(hf_error(c), Contains("unsupported hidden_act an array of 1"));
}

namespace {

/// A GGUF of llama metadata only (validation runs before any tensor is looked at).
std::string gguf_with(const TempDir& dir, uint32_t type, const std::string& key,
                      const Bytes& value) {
  GGUFWriter w;
  w.kv_str("general.architecture", "llama");
  for (const char* k : {"llama.embedding_length", "llama.attention.head_count",
                        "llama.attention.head_count_kv", "llama.block_count",
                        "llama.feed_forward_length", "llama.vocab_size"})
    if (key != k) {
      const std::string s = k;
      w.kv_u32(k, s == "llama.block_count" ? 1 : s == "llama.embedding_length" ? 64 : 8);
    }
  w.kv(key, type, value);
  const std::string path = dir.file("m.gguf");
  w.write(path);
  return path;
}

std::string gguf_error(const std::string& path) {
  try {
    ModelConfig::from_gguf(GGUFFile::open(path));
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("GGUF metadata goes through the same validation", "[config][hostile][gguf]") {
  TempDir dir;
  std::string p = gguf_with(dir, kU64, "llama.embedding_length", Bytes().u64(uint64_t{1} << 62));
  CHECK_THAT(gguf_error(p),
             StartsWith(p + ": llama.embedding_length is 4611686018427387904, must be in"));
  p = gguf_with(dir, kF64, "llama.rope.freq_base", Bytes().f64(1e-300));
  CHECK_THAT(gguf_error(p), Contains("llama.rope.freq_base is 0"));
  p = gguf_with(dir, kU32, "llama.block_count", Bytes().u32(300000000));
  CHECK_THAT(gguf_error(p), Contains("llama.block_count is 300000000"));
  p = gguf_with(dir, kU64, "llama.context_length", Bytes().u64(uint64_t{1} << 40));
  CHECK_THAT(gguf_error(p), Contains("llama.context_length"));
}

TEST_CASE("config JSON files are read bounded, with errors naming the file", "[config][hostile]") {
  // /dev/zero used to be read without limit; a FIFO or device is never read past the cap.
  CHECK_THROWS_WITH(read_config_json("/dev/zero"),
                    StartsWith("/dev/zero: larger than the 67108864-byte limit"));
  // Number overflow is nlohmann's out_of_range, not a parse_error (found by fuzz_config_json).
  CHECK_THROWS_WITH(parse_config_json(R"({"hidden_size": 1e999})", kPath),
                    StartsWith(std::string(kPath) + ": malformed JSON: number overflow"));
  CHECK_THROWS_WITH(parse_config_json(R"({"a": )", kPath),
                    StartsWith(std::string(kPath) + ": malformed JSON: parse error at line 1, "
                                                    "column 7"));
  CHECK_THROWS_WITH(parse_config_json("[1]", kPath),
                    Equals(std::string(kPath) + ": not a JSON object (got [1])"));
  const std::string deep = "{\"a\": " + std::string(70, '[') + std::string(70, ']') + "}";
  CHECK_THROWS_WITH(parse_config_json(deep, kPath),
                    StartsWith(std::string(kPath) + ": JSON nested deeper than 64 levels"));
  const std::string ok = "{\"a\": " + std::string(60, '[') + std::string(60, ']') + "}";
  CHECK(parse_config_json(ok, kPath).contains("a"));
}

TEST_CASE("a long list of objects parses in linear time", "[config][hostile]") {
  // nlohmann's callback parser (the first depth guard) rescanned the parent list at the end of
  // each object: 300,000 objects took minutes (a ShareGPT file, a long added_tokens list). The
  // ctest timeout, not a timed assertion, catches a return to it.
  std::string list = "{\"a\": [";
  for (int i = 0; i < 300000; ++i) list += i ? ",{\"b\":1}" : "{\"b\":1}";
  list += "], \"s\": \"[[[[ not nesting\"}";
  const auto j = parse_config_json(list, kPath);
  CHECK(j["a"].size() == 300000);
  CHECK(json_nesting_depth(list, 64) == 3);
  CHECK(json_nesting_depth(R"(["\"[[[", [[1]]])", 64) == 3);
  CHECK(json_nesting_depth(std::string(100, '['), 64) == 65);
}
