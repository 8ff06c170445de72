// Broken GGUF files: each gives ModelFileError("<path>: <problem>") naming the file and the
// problem, never a crash or a huge allocation.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>

#include "gguf_writer.h"
#include "models/gguf.h"

using namespace octet;
using namespace octet::testing;
using Catch::Contains;
using Catch::StartsWith;

namespace {

// The message of the ModelFileError that opening `path` throws ("" and a failure if none).
std::string open_error(const std::string& path) {
  try {
    GGUFFile::open(path);
  } catch (const ModelFileError& e) {
    CHECK(e.path() == path);
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected ModelFileError, got " << e.what());
  }
  FAIL("opening " << path << " did not fail");
  return "";
}

std::vector<uint8_t> f32_bytes(std::initializer_list<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.begin(), b.size());
  return b;
}

// A valid file with a string, an array, two tensors; the last tensor's data ends the file.
GGUFWriter valid_writer() {
  GGUFWriter w;
  w.kv_str("general.architecture", "llama");
  w.kv("tokens", kArr, array_value(kStr, 3, Bytes().str("<s>").str("hello").str("</s>")));
  w.kv_u32("llama.block_count", 2);
  // Tensor infos of 51 bytes each: name 8 + 19, n_dims 4, dim 8, type 4, offset 8.
  w.tensor({"blk.0.attn_q.weight", {4}, 0, f32_bytes({1, 2, 3, 4}), {}});  // 16 bytes at 0
  w.tensor({"blk.0.ffn_up.weight", {8}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}), {}});  // at 32
  return w;
}

// A file with one tensor info, where `name` has the given dims and type id.
std::string write_tensor_file(const TempDir& dir, const std::string& file,
                              std::vector<uint64_t> dims, uint32_t type, size_t data_bytes = 32) {
  GGUFWriter w;
  w.tensor({"weird", std::move(dims), type, std::vector<uint8_t>(data_bytes, 0), {}});
  const std::string path = dir.file(file);
  w.write(path);
  return path;
}

}  // namespace

TEST_CASE("gguf error: truncated file at named cut points", "[gguf][errors]") {
  TempDir dir;
  const std::string full = dir.file("full.gguf");
  const Layout l = valid_writer().write(full);
  REQUIRE_NOTHROW(GGUFFile::open(full));
  const auto bytes = [&] {
    std::ifstream in(full, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
  }();
  REQUIRE(bytes.size() == l.total);

  // Counts are checked against the bytes left first (3 entries need at least 3 x 13 bytes, 2
  // tensor infos 2 x 32), then each field as it is read.
  struct Cut { size_t at; std::string what; };
  const Cut cuts[] = {
      {2, "magic of header"},
      {10, "tensor count of header"},
      {l.metadata_begin + 4, "3 metadata entries"},
      {l.metadata_begin + 40, "string value of metadata 'general.architecture'"},
      {l.metadata_begin + 50, "key of metadata entry #1"},
      {l.tensor_infos_begin - 2, "uint32 value of metadata 'llama.block_count'"},
      {l.tensor_infos_begin + 3, "2 tensor infos"},
      {l.tensor_infos_begin + 67, "tensor name of tensor info #1"},
      {l.tensor_infos_begin + 92, "tensor type of tensor 'blk.0.ffn_up.weight'"},
      {l.data_begin, "tensor 'blk.0.attn_q.weight' data"},     // no data at all
      {l.total - 1, "tensor 'blk.0.ffn_up.weight' data (32 bytes at data offset 32)"},  // mid data
  };
  for (const Cut& c : cuts) {
    INFO("cut at byte " << c.at);
    const std::string path = dir.file("cut" + std::to_string(c.at) + ".gguf");
    GGUFWriter::write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(c.at)));
    const std::string msg = open_error(path);
    CHECK_THAT(msg, StartsWith(path + ": ") && Contains("truncated") && Contains(c.what));
  }
}

TEST_CASE("gguf error: every truncation point fails cleanly", "[gguf][errors]") {
  TempDir dir;
  const auto bytes = valid_writer().serialize();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    INFO("cut at byte " << cut);
    const std::string path = dir.file("cut.gguf");
    GGUFWriter::write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(cut)));
    CHECK_THROWS_AS(GGUFFile::open(path), ModelFileError);
  }
  const std::string empty = dir.file("empty.gguf");
  GGUFWriter::write_bytes(empty, {});
  CHECK_THAT(open_error(empty), StartsWith(empty + ": ") && Contains("empty file"));
}

TEST_CASE("gguf error: missing file and a directory", "[gguf][errors]") {
  TempDir dir;
  const std::string missing = dir.file("nope.gguf");
  CHECK_THAT(open_error(missing), StartsWith(missing + ": ") && Contains("cannot open") &&
                                      Contains("No such file"));
  const std::string sub = dir.file("sub");
  std::filesystem::create_directory(sub);
  CHECK_THAT(open_error(sub), StartsWith(sub + ": ") && Contains("not a regular file"));
}

TEST_CASE("gguf error: wrong magic", "[gguf][errors]") {
  TempDir dir;
  GGUFWriter w = valid_writer();
  w.magic = "GGML";
  const std::string path = dir.file("magic.gguf");
  w.write(path);
  CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("not a GGUF file") &&
                                   Contains("\"GGML\""));
}

TEST_CASE("gguf error: unsupported version", "[gguf][errors]") {
  TempDir dir;
  for (uint32_t v : {0u, 1u, 4u}) {
    GGUFWriter w = valid_writer();
    w.version = v;
    const std::string path = dir.file("v" + std::to_string(v) + ".gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") &&
                                     Contains("unsupported GGUF version " + std::to_string(v)));
  }
  GGUFWriter w = valid_writer();
  w.version = 0x03000000u;  // version 3 written big-endian
  const std::string path = dir.file("be.gguf");
  w.write(path);
  CHECK_THAT(open_error(path), Contains("big-endian"));
}

TEST_CASE("gguf error: unknown tensor type at open and known-but-unsupported at dequantize", "[gguf][errors]") {
  TempDir dir;
  const std::string p99 = write_tensor_file(dir, "t99.gguf", {32}, 99);
  CHECK_THAT(open_error(p99), StartsWith(p99 + ": ") && Contains("'weird'") &&
                                  Contains("unsupported tensor type 99"));
  const std::string p4 = write_tensor_file(dir, "t4.gguf", {32}, 4);  // removed Q4_2
  CHECK_THAT(open_error(p4), Contains("unsupported tensor type 4"));

  const std::string iq = write_tensor_file(dir, "iq.gguf", {256}, 16, 66);  // IQ2_XXS
  const GGUFFile f = GGUFFile::open(iq);
  CHECK(f.tensor("weird").type == GGMLType::IQ2_XXS);
  CHECK(f.tensor("weird").nbytes == 66);
  CHECK_THROWS_AS(f.dequantize(f.tensor("weird")), ModelFileError);
  CHECK_THROWS_WITH(f.dequantize(f.tensor("weird")),
                    StartsWith(iq + ": ") && Contains("'weird'") && Contains("IQ2_XXS") &&
                        Contains("cannot dequantize"));
}

TEST_CASE("gguf error: bad general.alignment", "[gguf][errors]") {
  TempDir dir;
  struct Case { std::string name; uint32_t type; Bytes value; std::string problem; };
  const Case cases[] = {
      {"zero", kU32, Bytes().u32(0), "general.alignment 0 is not a non-zero power of two"},
      {"48", kU32, Bytes().u32(48), "general.alignment 48 is not a non-zero power of two"},
      {"neg", kI32, Bytes().i32(-32), "general.alignment -32 is not a non-zero power of two"},
      {"str", kStr, Bytes().str("32"), "general.alignment must be an integer, got string"},
  };
  for (const Case& c : cases) {
    GGUFWriter w;
    w.kv("general.alignment", c.type, c.value);
    const std::string path = dir.file("align_" + c.name + ".gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains(c.problem));
  }
}

TEST_CASE("gguf error: tensor offset not a multiple of the alignment", "[gguf][errors]") {
  TempDir dir;
  GGUFWriter w;
  w.tensor({"a", {4}, 0, f32_bytes({1, 2, 3, 4}), uint64_t(16)});
  const std::string path = dir.file("misaligned.gguf");
  w.write(path);
  CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("tensor 'a' data offset 16") &&
                                   Contains("alignment 32"));
}

TEST_CASE("gguf error: bad dims (overflow zero too many above INT64_MAX)", "[gguf][errors]") {
  TempDir dir;
  const std::string over = write_tensor_file(dir, "over.gguf", {uint64_t(1) << 32, uint64_t(1) << 32}, 0);
  CHECK_THAT(open_error(over), StartsWith(over + ": ") && Contains("'weird'") && Contains("overflow"));
  const std::string bytes_over = write_tensor_file(dir, "bover.gguf", {uint64_t(1) << 62}, 0);
  CHECK_THAT(open_error(bytes_over), Contains("'weird'") && Contains("overflows"));
  const std::string zero = write_tensor_file(dir, "zero.gguf", {4, 0}, 0);
  CHECK_THAT(open_error(zero), StartsWith(zero + ": ") && Contains("dim 1 is 0"));
  const std::string neg = write_tensor_file(dir, "neg.gguf", {~uint64_t(0)}, 0);
  CHECK_THAT(open_error(neg), Contains("dim 0 is -1"));
  const std::string five = write_tensor_file(dir, "five.gguf", {1, 1, 1, 1, 8}, 0);
  CHECK_THAT(open_error(five), Contains("'weird' has 5 dims"));
  const std::string none = write_tensor_file(dir, "none.gguf", {}, 0);
  CHECK_THAT(open_error(none), Contains("'weird' has 0 dims"));
}

TEST_CASE("gguf error: row length not a multiple of the block size", "[gguf][errors]") {
  TempDir dir;
  const std::string path = write_tensor_file(dir, "rows.gguf", {33, 1}, 8, 64);  // Q8_0
  CHECK_THAT(open_error(path), StartsWith(path + ": ") &&
                                   Contains("row length 33 is not a multiple of the Q8_0 block size 32"));
}

TEST_CASE("gguf error: duplicate metadata key and duplicate tensor name", "[gguf][errors]") {
  TempDir dir;
  GGUFWriter w;
  w.kv_u32("llama.block_count", 2).kv_str("x", "y").kv_u32("llama.block_count", 3);
  const std::string path = dir.file("dupkey.gguf");
  w.write(path);
  CHECK_THAT(open_error(path), StartsWith(path + ": ") &&
                                   Contains("duplicate metadata key 'llama.block_count'"));

  GGUFWriter t;
  t.tensor({"a", {4}, 0, f32_bytes({1, 2, 3, 4}), {}}).tensor({"a", {4}, 0, f32_bytes({1, 2, 3, 4}), {}});
  const std::string tpath = dir.file("duptensor.gguf");
  t.write(tpath);
  CHECK_THAT(open_error(tpath), StartsWith(tpath + ": ") && Contains("duplicate tensor name 'a'"));
}

TEST_CASE("gguf error: huge counts and lengths are rejected before allocating", "[gguf][errors]") {
  TempDir dir;
  {  // an array claiming 2^61 uint64 elements
    GGUFWriter w;
    w.kv("big", kArr, array_value(kU64, uint64_t(1) << 61, Bytes().u64(1)));
    const std::string path = dir.file("bigarray.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("2305843009213693952") &&
                                     Contains("metadata 'big'"));
  }
  {  // a string claiming 2^63 bytes
    GGUFWriter w;
    w.kv("s", kStr, Bytes().u64(uint64_t(1) << 63).str("abc"));
    const std::string path = dir.file("bigstring.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("truncated") &&
                                     Contains("metadata 's'"));
  }
  {  // an array of strings whose count fits as bytes but not as 8-byte lengths
    GGUFWriter w;
    w.kv("strs", kArr, array_value(kStr, 1000, Bytes().str("x")));
    const std::string path = dir.file("strcount.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), Contains("1000 array elements"));
  }
  {  // huge tensor and metadata counts in the header
    GGUFWriter w = valid_writer();
    w.tensor_count_override = ~uint64_t(0);
    const std::string path = dir.file("bigtensors.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("tensor infos"));
    GGUFWriter k = valid_writer();
    k.kv_count_override = uint64_t(1) << 40;
    const std::string kpath = dir.file("bigkv.gguf");
    k.write(kpath);
    CHECK_THAT(open_error(kpath), StartsWith(kpath + ": ") && Contains("metadata entries"));
  }
}

TEST_CASE("gguf error: tensor data past the end of the file and offset overflow and overlap", "[gguf][errors]") {
  TempDir dir;
  GGUFWriter w;
  w.tensor({"a", {4}, 0, f32_bytes({1, 2, 3, 4}), {}});
  w.tensor({"far", {4}, 0, {}, uint64_t(1) << 20});  // info says 16 bytes at 1 MiB; none written
  const std::string path = dir.file("far.gguf");
  w.write(path);
  CHECK_THAT(open_error(path), StartsWith(path + ": ") && Contains("truncated") &&
                                   Contains("tensor 'far' data") && Contains("past the end"));

  GGUFWriter o;
  o.tensor({"wrap", {4}, 0, {}, ~uint64_t(31)});  // aligned, but offset + size overflows
  const std::string opath = dir.file("wrap.gguf");
  o.write(opath);
  CHECK_THAT(open_error(opath), Contains("tensor 'wrap' data") && Contains("past the end"));

  GGUFWriter v;
  v.tensor({"x", {16}, 0, std::vector<uint8_t>(64, 0), {}});
  v.tensor({"y", {4}, 0, f32_bytes({1, 2, 3, 4}), uint64_t(32)});  // inside x's 64 bytes
  const std::string vpath = dir.file("overlap.gguf");
  v.write(vpath);
  CHECK_THAT(open_error(vpath), StartsWith(vpath + ": ") && Contains("'x' and 'y' overlap"));
}

TEST_CASE("gguf error: bad metadata value types and bools and nesting", "[gguf][errors]") {
  TempDir dir;
  {
    GGUFWriter w;
    w.kv("k", 13, Bytes().u32(0));
    const std::string path = dir.file("vt.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), StartsWith(path + ": ") &&
                                     Contains("unknown metadata value type 13") && Contains("'k'"));
  }
  {
    GGUFWriter w;
    w.kv("k", kArr, array_value(77, 1, Bytes().u32(0)));
    const std::string path = dir.file("at.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), Contains("unknown array element type 77"));
  }
  {
    GGUFWriter w;
    w.kv("flag", kBool, Bytes().u8(2));
    const std::string path = dir.file("bool.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), Contains("bool value 2") && Contains("'flag'"));
  }
  {  // 20 nested arrays: rejected by depth, not by the stack
    Bytes v = array_value(kU8, 1, Bytes().u8(7));
    for (int i = 0; i < 19; ++i) v = array_value(kArr, 1, v);
    GGUFWriter w;
    w.kv("deep", kArr, v);
    const std::string path = dir.file("deep.gguf");
    w.write(path);
    CHECK_THAT(open_error(path), Contains("nested deeper than") && Contains("'deep'"));
  }
}
