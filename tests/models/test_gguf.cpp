// GGUF reader: metadata of every type, tensor infos, offsets and alignment on files written by the
// in-test writer, then the real stories260K and SmolLM2 files.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "gguf_writer.h"
#include "models/gguf.h"

using namespace octet;
using namespace octet::testing;
using VT = GGUFValueType;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A file with one key of every value type, in this order.
GGUFWriter every_type_writer() {
  GGUFWriter w;
  w.kv("u8", kU8, Bytes().u8(200));
  w.kv("i8", kI8, Bytes().i8(-100));
  w.kv("u16", kU16, Bytes().u16(60000));
  w.kv("i16", kI16, Bytes().i16(-30000));
  w.kv("u32", kU32, Bytes().u32(4000000000u));
  w.kv("i32", kI32, Bytes().i32(-2000000000));
  w.kv("u64", kU64, Bytes().u64((uint64_t(1) << 63) + 5));
  w.kv("i64", kI64, Bytes().i64(-(int64_t(1) << 62) - 7));
  w.kv("f32", kF32, Bytes().f32(3.3f));
  w.kv("f64", kF64, Bytes().f64(-1e300));
  w.kv("t", kBool, Bytes().u8(1));
  w.kv("f", kBool, Bytes().u8(0));
  w.kv("s", kStr, Bytes().str(std::string("h\xc3\xa9llo\0x", 8)));
  w.kv("empty", kStr, Bytes().str(""));
  w.kv("a.u32", kArr, array_value(kU32, 3, Bytes().u32(1).u32(2).u32(0xffffffffu)));
  w.kv("a.str", kArr, array_value(kStr, 3, Bytes().str("a").str("").str("ccc")));
  w.kv("a.f32", kArr, array_value(kF32, 2, Bytes().f32(0.5f).f32(-2.25f)));
  w.kv("a.i8.empty", kArr, array_value(kI8, 0, Bytes()));
  w.kv("a.bool", kArr, array_value(kBool, 2, Bytes().u8(1).u8(0)));
  Bytes inner1 = array_value(kI32, 2, Bytes().i32(1).i32(-2));
  Bytes inner2 = array_value(kI32, 1, Bytes().i32(3));
  w.kv("a.nested", kArr, array_value(kArr, 2, Bytes().raw(inner1).raw(inner2)));
  return w;
}

}  // namespace

TEST_CASE("gguf metadata: every value type reads back with its type and value", "[gguf]") {
  TempDir dir;
  const std::string path = dir.file("types.gguf");
  every_type_writer().write(path);
  const GGUFFile f = GGUFFile::open(path);

  CHECK(f.path() == path);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.tensors().empty());
  const std::vector<std::string> order = {"u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64",
                                          "f32", "f64", "t", "f", "s", "empty", "a.u32", "a.str",
                                          "a.f32", "a.i8.empty", "a.bool", "a.nested"};
  REQUIRE(f.metadata().size() == order.size());
  for (size_t i = 0; i < order.size(); ++i) CHECK(f.metadata()[i].first == order[i]);

  CHECK(f.find("u8")->type == VT::UINT8);
  CHECK(f.find("u8")->as_int() == 200);
  CHECK(f.find("i8")->type == VT::INT8);
  CHECK(f.find("i8")->as_int() == -100);
  CHECK(f.find("u16")->as_int() == 60000);
  CHECK(f.find("i16")->as_int() == -30000);
  CHECK(f.find("u32")->type == VT::UINT32);
  CHECK(f.find("u32")->as_int() == 4000000000LL);
  CHECK(f.find("i32")->as_int() == -2000000000LL);
  CHECK(f.find("u64")->type == VT::UINT64);
  CHECK(std::get<uint64_t>(f.find("u64")->value) == (uint64_t(1) << 63) + 5);
  CHECK_THROWS_WITH(f.find("u64")->as_int(), Catch::Contains("does not fit in int64"));
  CHECK(f.find("i64")->as_int() == -(int64_t(1) << 62) - 7);
  CHECK(f.find("f32")->type == VT::FLOAT32);
  CHECK(f.find("f32")->as_float() == double(3.3f));  // stored float32, widened exactly
  CHECK(f.find("f64")->as_float() == -1e300);
  CHECK(f.find("f32")->is_float());
  CHECK_FALSE(f.find("f32")->is_integer());
  CHECK(f.find("t")->as_bool());
  CHECK_FALSE(f.find("f")->as_bool());
  CHECK(f.find("s")->as_string() == std::string("h\xc3\xa9llo\0x", 8));  // bytes kept, NUL too
  CHECK(f.find("empty")->as_string().empty());

  const GGUFValue& au = *f.find("a.u32");
  CHECK(au.type == VT::ARRAY);
  CHECK(au.array_type == VT::UINT32);
  REQUIRE(au.array().size() == 3);
  CHECK(au.array().int_at(2) == 0xffffffffLL);
  CHECK(f.get_int_array("a.u32") == std::vector<int64_t>{1, 2, 0xffffffffLL});
  CHECK(f.get_string_array("a.str") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(f.get_float_array("a.f32") == std::vector<float>{0.5f, -2.25f});
  CHECK(f.find("a.i8.empty")->array_type == VT::INT8);
  CHECK(f.find("a.i8.empty")->array().empty());
  CHECK(f.find("a.bool")->array().bool_at(0));
  const GGUFValue& nested = *f.find("a.nested");
  CHECK(nested.array_type == VT::ARRAY);
  REQUIRE(nested.array().size() == 2);
  CHECK(nested.array().array_at(0).type() == VT::INT32);
  CHECK(nested.array().array_at(0).int_at(1) == -2);
  CHECK(nested.array().array_at(1).int_at(0) == 3);

  // Checked accessors name the expected and the actual type.
  CHECK_THROWS_WITH(f.find("s")->as_int(), Catch::Contains("integer") && Catch::Contains("string"));
  CHECK_THROWS_WITH(f.find("u8")->as_string(), Catch::Contains("string") && Catch::Contains("uint8"));
  CHECK_THROWS_AS(f.find("u8")->as_bool(), std::runtime_error);
  CHECK_THROWS_AS(f.find("s")->array(), std::runtime_error);
  CHECK(f.find("u8")->as_float() == 200.0);
}

TEST_CASE("gguf metadata: typed getters with fallbacks and errors naming the key", "[gguf]") {
  TempDir dir;
  const std::string path = dir.file("types.gguf");
  every_type_writer().write(path);
  const GGUFFile f = GGUFFile::open(path);

  CHECK(f.find("absent") == nullptr);
  CHECK(f.get_int("u16") == 60000);
  CHECK(f.get_int("absent", 7) == 7);
  CHECK(f.get_int("i8", 7) == -100);
  CHECK(f.get_float("f32") == double(3.3f));
  CHECK(f.get_float("u8") == 200.0);  // integers read as floats
  CHECK(f.get_float("absent", 0.25) == 0.25);
  CHECK(f.get_string("s", "x") == std::string("h\xc3\xa9llo\0x", 8));
  CHECK(f.get_string("absent", "fb") == "fb");
  CHECK(f.get_bool("t", false));
  CHECK(f.get_bool("absent", true));

  CHECK_THROWS_AS(f.get_int("absent"), ModelFileError);
  CHECK_THROWS_WITH(f.get_int("absent"), Catch::StartsWith(path + ": ") &&
                                             Catch::Contains("missing metadata key 'absent'"));
  CHECK_THROWS_WITH(f.get_string("u32"), Catch::StartsWith(path + ": ") &&
                                             Catch::Contains("'u32'") && Catch::Contains("string"));
  CHECK_THROWS_WITH(f.get_int("s", 3), Catch::Contains("'s'") && Catch::Contains("integer"));
  CHECK_THROWS_WITH(f.get_bool("u8", false), Catch::Contains("'u8'") && Catch::Contains("bool"));
  CHECK_THROWS_WITH(f.get_string_array("a.u32"), Catch::Contains("'a.u32'"));
  CHECK_THROWS_WITH(f.get_float_array("absent"), Catch::Contains("missing metadata key 'absent'"));
  CHECK_THROWS_AS(f.get_float("s"), ModelFileError);
  CHECK_THROWS_AS(f.get_int("u64"), ModelFileError);  // does not fit in int64
}

TEST_CASE("gguf tensors: names dims types offsets data pointers and F32 values", "[gguf]") {
  TempDir dir;
  const std::string path = dir.file("tensors.gguf");
  const std::vector<float> w = {1.5f, -2.f, 3.25f, 0.f, 5.f, -6.5f, 7.f, 8.f, 9.f, 10.f, 11.f, 12.f};
  GGUFWriter wr;
  wr.kv_str("general.architecture", "llama");
  wr.tensor({"w", {4, 3}, 0, f32_bytes(w), {}});                       // 48 bytes at 0
  wr.tensor({"h", {8}, 1, std::vector<uint8_t>(16, 0), {}});           // F16, 16 bytes at 64
  wr.tensor({"q8", {64, 2}, 8, std::vector<uint8_t>(4 * 34, 0), {}});  // 4 blocks at 96
  wr.tensor({"q41", {32, 1, 1, 1}, 3, std::vector<uint8_t>(20, 0), {}});
  const Layout l = wr.write(path);
  const GGUFFile f = GGUFFile::open(path);

  REQUIRE(f.tensors().size() == 4);
  CHECK(f.data_offset() == l.data_begin);
  CHECK(f.data_offset() % 32 == 0);
  CHECK(f.file_bytes() == l.total);
  const std::vector<uint64_t> offsets = {0, 64, 96, 256};
  const std::vector<uint64_t> nbytes = {48, 16, 136, 20};
  for (size_t i = 0; i < 4; ++i) {
    const GGUFTensorInfo& t = f.tensors()[i];
    CHECK(t.offset == offsets[i]);
    CHECK(t.nbytes == nbytes[i]);
  }
  const GGUFTensorInfo& tw = f.tensor("w");
  CHECK(tw.name == "w");
  CHECK(tw.dims == std::vector<int64_t>{4, 3});
  CHECK(tw.type == GGMLType::F32);
  CHECK(tw.num_elements() == 12);
  CHECK(f.tensor("h").type == GGMLType::F16);
  CHECK(f.tensor("q8").type == GGMLType::Q8_0);
  CHECK(f.tensor("q8").num_elements() == 128);
  CHECK(f.tensor("q41").dims == std::vector<int64_t>{32, 1, 1, 1});
  CHECK(f.tensor("q41").type == GGMLType::Q4_1);
  CHECK(f.tensor("q41").data == f.tensor("w").data + 256);
  CHECK(f.dequantize(tw) == w);
  CHECK(f.find_tensor("nope") == nullptr);
  CHECK_THROWS_WITH(f.tensor("nope"), Catch::StartsWith(path + ": ") &&
                                          Catch::Contains("missing tensor nope"));
  CHECK(f.dequantize(f.tensor("q8")) == std::vector<float>(128, 0.f));

  // Moving keeps the mapping and the data pointers.
  const uint8_t* before = f.tensor("w").data;
  GGUFFile moved = GGUFFile::open(path);
  const uint8_t* moved_ptr = moved.tensor("w").data;
  GGUFFile other = std::move(moved);
  CHECK(other.tensor("w").data == moved_ptr);
  CHECK(other.dequantize(other.tensor("w")) == w);
  CHECK(before != nullptr);
}

TEST_CASE("gguf alignment: a custom general.alignment of 64 places data and offsets", "[gguf]") {
  TempDir dir;
  const std::string path = dir.file("align64.gguf");
  GGUFWriter wr;
  wr.alignment = 64;
  wr.kv_u32("general.alignment", 64);
  wr.tensor({"a", {3}, 0, f32_bytes({1.f, 2.f, 3.f}), {}});  // 12 bytes at 0
  wr.tensor({"b", {2}, 0, f32_bytes({4.f, 5.f}), {}});       // at 64
  wr.tensor({"c", {1}, 0, f32_bytes({6.f}), {uint64_t(192)}});  // explicit offset, gap before
  const Layout l = wr.write(path);
  const GGUFFile f = GGUFFile::open(path);
  CHECK(f.alignment() == 64);
  CHECK(f.data_offset() == l.data_begin);
  CHECK(f.data_offset() % 64 == 0);
  CHECK(f.data_offset() > l.tensor_infos_begin);
  CHECK(f.tensor("b").offset == 64);
  CHECK(f.tensor("c").offset == 192);
  CHECK(f.dequantize(f.tensor("b")) == std::vector<float>{4.f, 5.f});
  CHECK(f.dequantize(f.tensor("c")) == std::vector<float>{6.f});

  // GGUF v2 has the same layout and is read too.
  GGUFWriter v2;
  v2.version = 2;
  v2.kv_u32("k", 9);
  v2.write(dir.file("v2.gguf"));
  const GGUFFile f2 = GGUFFile::open(dir.file("v2.gguf"));
  CHECK(f2.version() == 2);
  CHECK(f2.get_int("k") == 9);
}

TEST_CASE("gguf file: stories260K metadata and tensors", "[gguf]") {
  const std::string path = std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf";
  const GGUFFile f = GGUFFile::open(path);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.data_offset() == 14176);  // gguf-py GGUFReader.data_offset
  CHECK(f.metadata().size() == 19);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_int("llama.block_count") == 5);
  CHECK(f.get_int("llama.embedding_length") == 64);
  CHECK(f.get_int("llama.feed_forward_length") == 172);
  CHECK(f.get_int("llama.attention.head_count") == 8);
  CHECK(f.get_int("llama.attention.head_count_kv") == 4);
  CHECK(f.get_int("llama.context_length") == 2048);
  CHECK(f.get_int("llama.rope.dimension_count") == 8);
  CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") == double(1e-5f));
  CHECK(f.find("llama.rope.freq_base") == nullptr);
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_int("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f.get_int("tokenizer.ggml.eos_token_id") == 2);
  CHECK(f.get_int("tokenizer.ggml.padding_token_id") == 4294967295LL);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 512);
  CHECK(tokens[0] == "<unk>");
  CHECK(tokens[1] == "<s>");
  CHECK(tokens[2] == "</s>");
  CHECK(f.get_float_array("tokenizer.ggml.scores").size() == 512);
  CHECK(f.find("tokenizer.ggml.token_type")->array_type == VT::INT32);
  CHECK(f.get_int_array("tokenizer.ggml.token_type").size() == 512);

  REQUIRE(f.tensors().size() == 48);  // 3 + 5 layers x 9
  for (const GGUFTensorInfo& t : f.tensors()) {
    CHECK(t.type == GGMLType::F32);
    CHECK(t.offset % 32 == 0);
    CHECK(t.nbytes == uint64_t(t.num_elements()) * 4);
  }
  const GGUFTensorInfo& emb = f.tensor("token_embd.weight");
  CHECK(emb.dims == std::vector<int64_t>{64, 512});
  CHECK(emb.offset == 0);
  CHECK(f.tensor("output_norm.weight").dims == std::vector<int64_t>{64});
  CHECK(f.tensor("blk.0.attn_k.weight").dims == std::vector<int64_t>{64, 32});
  CHECK(f.tensor("blk.4.ffn_down.weight").dims == std::vector<int64_t>{172, 64});
  CHECK(f.tensor("blk.4.ffn_up.weight").dims == std::vector<int64_t>{64, 172});
  // The README says output.weight equals token_embd.weight.
  CHECK(f.dequantize(f.tensor("output.weight")) == f.dequantize(emb));
}

TEST_CASE("gguf file: SmolLM2-135M-Instruct Q4_1 checked against gguf-py", "[gguf]") {
  const std::string path = OCTET_SMOLLM2_GGUF;
  if (path.empty()) {
    FAIL("OCTET_SMOLLM2_GGUF is empty: run the setup that downloads SmolLM2-135M-Instruct.Q4_1.gguf "
         "(see README.md) and configure with -DOCTET_SMOLLM2_GGUF=<path>");
  }
  const GGUFFile f = GGUFFile::open(path);
  CHECK(f.version() == 3);
  CHECK(f.data_offset() == 1785664);  // gguf-py GGUFReader.data_offset
  CHECK(f.get_int("llama.block_count") == 30);
  CHECK(f.get_int("llama.embedding_length") == 576);
  CHECK(f.get_int("llama.attention.head_count") == 9);
  CHECK(f.get_int("llama.attention.head_count_kv") == 3);
  CHECK(f.get_float("llama.rope.freq_base") == 100000.0);
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
  CHECK_FALSE(f.get_bool("tokenizer.ggml.add_bos_token", true));
  CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 49152);
  CHECK(f.get_string_array("tokenizer.ggml.merges").size() == 48900);
  CHECK(f.get_string("tokenizer.chat_template").find("<|im_start|>") != std::string::npos);

  REQUIRE(f.tensors().size() == 272);
  int n_q41 = 0, n_q80 = 0, n_f32 = 0;
  for (const GGUFTensorInfo& t : f.tensors()) {
    n_q41 += t.type == GGMLType::Q4_1;
    n_q80 += t.type == GGMLType::Q8_0;
    n_f32 += t.type == GGMLType::F32;
  }
  CHECK(n_q41 == 210);
  CHECK(n_q80 == 1);
  CHECK(n_f32 == 61);
  CHECK(f.tensor("token_embd.weight").type == GGMLType::Q8_0);
  CHECK(f.tensor("token_embd.weight").dims == std::vector<int64_t>{576, 49152});

  std::ifstream in(std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/gguf_dequant.json");
  REQUIRE(in.good());
  const nlohmann::json golden = nlohmann::json::parse(in);
  for (const auto& g : golden["smollm2"]) {
    const GGUFTensorInfo& t = f.tensor(g["name"].get<std::string>());
    INFO("tensor " << t.name);
    CHECK(ggml_type_name(t.type) == g["type"].get<std::string>());
    CHECK(t.dims == g["dims"].get<std::vector<int64_t>>());
    const std::vector<float> x = f.dequantize(t);
    REQUIRE(int64_t(x.size()) == t.num_elements());
    for (const auto& s : g["samples"]) {
      const auto i = s[0].get<size_t>();
      INFO("element " << i);
      CHECK(x[i] == Approx(s[1].get<double>()).epsilon(1e-6).margin(1e-12));
    }
    const int64_t ne0 = t.dims[0];
    double row0 = 0, last = 0;
    for (int64_t j = 0; j < ne0; ++j) row0 += x[size_t(j)];
    for (int64_t j = 0; j < ne0; ++j) last += x[x.size() - size_t(ne0) + size_t(j)];
    CHECK(row0 == Approx(g["row0_sum"].get<double>()).epsilon(1e-9).margin(1e-9));
    CHECK(last == Approx(g["last_row_sum"].get<double>()).epsilon(1e-9).margin(1e-9));
  }
}
