// safetensors reader on hand-built files: every dtype, shapes, metadata, and each malformed
// header (truncated, header length past EOF, bad JSON, unknown dtype, shape/offset mismatch,
// overlapping offsets, offsets past EOF). Expected values are written into the bytes here.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "models/checkpoint.h"

using namespace octet;

namespace {

std::string temp_path(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "octet_test_safetensors";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

/// u64 little-endian header length, the header text, then `data`.
std::string write_file(const std::string& name, const std::string& header,
                       const std::string& data, bool pad = true) {
  std::string h = header;
  if (pad) h.append((8 - h.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  bytes += h;
  bytes += data;
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

/// open() must throw ModelFileError whose message names the file and contains `needle`.
void expect_error(const std::string& path, const std::string& needle) {
  try {
    SafetensorsFile::open(path);
    FAIL("no error for " << path << " (expected '" << needle << "')");
  } catch (const ModelFileError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(e.path() == path);
    CHECK(what.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors: dtype names and sizes", "[safetensors]") {
  CHECK(std::string(dtype_name(TensorDType::F8_E4M3)) == "F8_E4M3");
  CHECK(std::string(dtype_name(TensorDType::BF16)) == "BF16");
  CHECK(std::string(dtype_name(TensorDType::BOOL)) == "BOOL");
  CHECK(dtype_size(TensorDType::F64) == 8);
  CHECK(dtype_size(TensorDType::I64) == 8);
  CHECK(dtype_size(TensorDType::F32) == 4);
  CHECK(dtype_size(TensorDType::I32) == 4);
  CHECK(dtype_size(TensorDType::F16) == 2);
  CHECK(dtype_size(TensorDType::BF16) == 2);
  CHECK(dtype_size(TensorDType::I16) == 2);
  CHECK(dtype_size(TensorDType::F8_E5M2) == 1);
  CHECK(dtype_size(TensorDType::I8) == 1);
  CHECK(dtype_size(TensorDType::U8) == 1);
}

TEST_CASE("safetensors: every dtype, shapes, metadata and values", "[safetensors]") {
  // Data laid out back to back; offsets computed by hand.
  std::string data;
  data += raw<double>({1.5, -2.25});                      // f64   [2]      0..16
  data += raw<float>({1.0f, -2.0f, 0.5f, 3.25f, 0, 7});    // f32   [2,3]   16..40
  data += raw<uint16_t>({0x3C00, 0xC000, 0x3800});        // f16   [3]     40..46  1, -2, 0.5
  data += raw<uint16_t>({0x3F80, 0xC040});                // bf16  [1,2]   46..50  1, -3
  data += raw<uint8_t>({0x38, 0xC0, 0x7E});               // e4m3  [3]     50..53  1, -2, 448
  data += raw<uint8_t>({0x3C, 0x7B});                     // e5m2  [2]     53..55  1, 57344
  data += raw<int64_t>({-5});                             // i64   [1]     55..63
  data += raw<int32_t>({7, 8});                           // i32   [2]     63..71
  data += raw<int16_t>({-3});                             // i16   []      71..73 (scalar)
  data += raw<int8_t>({-1, 2});                           // i8    [2]     73..75
  data += raw<uint8_t>({200});                            // u8    [1,1]   75..76
  data += raw<uint8_t>({1, 0});                           // bool  [2]     76..78
  const std::string header = R"({
    "__metadata__": {"format": "pt", "note": "hand-built"},
    "f64": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]},
    "f32": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]},
    "f16": {"dtype": "F16", "shape": [3], "data_offsets": [40, 46]},
    "bf16": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [46, 50]},
    "e4m3": {"dtype": "F8_E4M3", "shape": [3], "data_offsets": [50, 53]},
    "e5m2": {"dtype": "F8_E5M2", "shape": [2], "data_offsets": [53, 55]},
    "i64": {"dtype": "I64", "shape": [1], "data_offsets": [55, 63]},
    "i32": {"dtype": "I32", "shape": [2], "data_offsets": [63, 71]},
    "i16": {"dtype": "I16", "shape": [], "data_offsets": [71, 73]},
    "i8": {"dtype": "I8", "shape": [2], "data_offsets": [73, 75]},
    "u8": {"dtype": "U8", "shape": [1, 1], "data_offsets": [75, 76]},
    "flag": {"dtype": "BOOL", "shape": [2], "data_offsets": [76, 78]},
    "empty": {"dtype": "F32", "shape": [0, 4], "data_offsets": [78, 78]}
  })";
  const std::string path = write_file("all_dtypes.safetensors", header, data);
  const SafetensorsFile f = SafetensorsFile::open(path);
  CHECK(f.path() == path);
  CHECK(f.tensors().size() == 13);
  CHECK(f.metadata().size() == 2);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("note") == "hand-built");
  CHECK(f.find("missing") == nullptr);

  const TensorView* t = f.find("f32");
  REQUIRE(t);
  CHECK(t->dtype == TensorDType::F32);
  CHECK(t->shape == std::vector<int64_t>{2, 3});
  CHECK(t->num_elements() == 6);
  CHECK(t->nbytes == 24);
  CHECK(t->file == path);
  CHECK(t->to_f32() == std::vector<float>{1.0f, -2.0f, 0.5f, 3.25f, 0.0f, 7.0f});
  CHECK(f.find("f64")->to_f32() == std::vector<float>{1.5f, -2.25f});
  CHECK(f.find("f16")->to_f32() == std::vector<float>{1.0f, -2.0f, 0.5f});
  CHECK(f.find("bf16")->to_f32() == std::vector<float>{1.0f, -3.0f});
  CHECK(f.find("bf16")->shape == std::vector<int64_t>{1, 2});
  CHECK(f.find("e4m3")->to_f32() == std::vector<float>{1.0f, -2.0f, 448.0f});
  CHECK(f.find("e5m2")->to_f32() == std::vector<float>{1.0f, 57344.0f});
  CHECK(f.find("i16")->shape.empty());
  CHECK(f.find("i16")->num_elements() == 1);
  CHECK(f.find("empty")->num_elements() == 0);
  CHECK(f.find("empty")->to_f32().empty());

  int32_t i32[2];
  std::memcpy(i32, f.find("i32")->data, 8);
  CHECK(i32[0] == 7);
  CHECK(i32[1] == 8);
  CHECK(f.find("u8")->data[0] == 200);
  CHECK(f.find("flag")->dtype == TensorDType::BOOL);
  CHECK(f.find("i8")->dtype == TensorDType::I8);
  CHECK(f.find("i64")->dtype == TensorDType::I64);

  try {
    f.find("i32")->to_f32();
    FAIL("to_f32 of I32 did not throw");
  } catch (const ModelFileError& e) {
    CHECK(std::string(e.what()).find("tensor i32 has dtype I32") != std::string::npos);
  }

  // The views stay valid after the file object moves.
  SafetensorsFile moved = SafetensorsFile::open(path);
  const TensorView* before = moved.find("bf16");
  SafetensorsFile other(std::move(moved));
  CHECK(other.find("bf16") == before);
  CHECK(other.find("bf16")->to_f32() == std::vector<float>{1.0f, -3.0f});
}

TEST_CASE("safetensors: malformed files name the file and the problem", "[safetensors][errors]") {
  const std::string good_data = raw<float>({1, 2, 3, 4});
  SECTION("missing file") {
    expect_error(temp_path("does_not_exist.safetensors"), "cannot open");
  }
  SECTION("empty and truncated before the header length") {
    const std::string path = temp_path("empty.safetensors");
    std::ofstream(path, std::ios::binary).write("\x10\x00\x00", 3);
    expect_error(path, "too short for the 8-byte header length");
  }
  SECTION("header length past EOF") {
    const std::string path = temp_path("hdr_past_eof.safetensors");
    std::string bytes(8, '\0');
    bytes[0] = char(200);  // 200-byte header, but only 10 bytes follow
    bytes += "{\"a\": 1}  ";
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    expect_error(path, "header length 200 runs past the end of the file");
  }
  SECTION("absurd header length") {
    const std::string path = temp_path("hdr_huge.safetensors");
    std::string bytes(8, '\xFF');
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    expect_error(path, "exceeds");
  }
  SECTION("truncated data: offsets past EOF") {
    const std::string path = write_file(
        "truncated.safetensors",
        R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", good_data.substr(0, 10));
    expect_error(path, "tensor w: data_offsets end 16 is past the end of the data (10 bytes)");
  }
  SECTION("bad JSON") {
    expect_error(write_file("bad_json.safetensors", R"({"w": {"dtype": "F32",)", good_data),
                 "malformed JSON");
  }
  SECTION("a header nested deeper than {name: {shape: [...]}} fails before it grows a tree") {
    const std::string deep = R"({"w": {"shape": [[[[1]]]]}})";
    expect_error(write_file("deep.safetensors", deep, good_data), "JSON nested deeper than 3");
    // 100,000 levels (200 KB): the same error, neither a stack overflow nor a deep tree.
    const std::string very = std::string(100000, '[') + std::string(100000, ']');
    expect_error(write_file("very_deep.safetensors", very, good_data), "nested deeper");
  }
  SECTION("header length: past the file, and the 100 MB cap of HF's safetensors") {
    std::string bytes(8, '\0');
    const uint64_t n = 1000;
    for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xFF);
    bytes += "{}";
    const std::string path = temp_path("short_header.safetensors");
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    expect_error(path, "header length 1000 runs past the end of the file (10 bytes)");
    std::string big(8, '\0');
    const uint64_t m = (100ull << 20) + 1;
    for (int i = 0; i < 8; ++i) big[size_t(i)] = char((m >> (8 * i)) & 0xFF);
    const std::string bpath = temp_path("big_header.safetensors");
    std::ofstream(bpath, std::ios::binary).write(big.data(), std::streamsize(big.size()));
    expect_error(bpath, "exceeds the 104857600-byte limit");
  }
  SECTION("shape products and offsets that overflow") {
    expect_error(write_file("shape_overflow.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], )"
                            R"("data_offsets": [0, 16]}})",
                            good_data),
                 "does not match data_offsets span 16 bytes");
    expect_error(write_file("bytes_overflow.safetensors",
                            R"({"w": {"dtype": "F64", "shape": [2305843009213693952], )"
                            R"("data_offsets": [0, 16]}})",
                            good_data),
                 "does not match data_offsets span");
    expect_error(write_file("offset_huge.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [4], )"
                            R"("data_offsets": [18446744073709551600, 18446744073709551615]}})",
                            good_data),
                 "is past the end of the data");
  }
  SECTION("header not an object") {
    expect_error(write_file("not_object.safetensors", "[1, 2]", good_data), "not a JSON object");
  }
  SECTION("unknown dtype") {
    expect_error(write_file("bad_dtype.safetensors",
                            R"({"w": {"dtype": "F4", "shape": [4], "data_offsets": [0, 16]}})",
                            good_data),
                 "tensor w: unknown dtype 'F4'");
  }
  SECTION("missing dtype") {
    expect_error(write_file("no_dtype.safetensors",
                            R"({"w": {"shape": [4], "data_offsets": [0, 16]}})", good_data),
                 "tensor w: missing or non-string dtype");
  }
  SECTION("negative shape entry") {
    expect_error(write_file("neg_shape.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})",
                            good_data),
                 "tensor w: shape entries must be non-negative integers");
  }
  SECTION("bad data_offsets") {
    expect_error(write_file("bad_offsets.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})",
                            good_data),
                 "tensor w: data_offsets must be [begin, end]");
    expect_error(write_file("reversed_offsets.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})",
                            good_data),
                 "tensor w: data_offsets begin 8 > end 4");
  }
  SECTION("shape x dtype size does not match the offsets span") {
    expect_error(write_file("mismatch.safetensors",
                            R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})",
                            good_data),
                 "tensor w: shape [2, 3] x F32 (4 bytes) does not match data_offsets span 16 bytes");
    expect_error(write_file("mismatch_bf16.safetensors",
                            R"({"w": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}})",
                            good_data),
                 "tensor w: shape [4] x BF16");
  }
  SECTION("overlapping offsets") {
    expect_error(write_file("overlap.safetensors",
                            R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                                "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                            good_data),
                 "tensors a and b overlap");
  }
  SECTION("metadata values must be strings") {
    expect_error(write_file("bad_meta.safetensors", R"({"__metadata__": {"format": 1}})", ""),
                 "__metadata__.format is not a string");
  }
}
