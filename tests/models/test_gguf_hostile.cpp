// Hostile GGUF metadata (issue 23): arrays cost about their size in the file, not ~50x (one
// big variant per element before); token ids outside the vocabulary and integers that do not
// fit their C++ type are ModelFileErrors naming the file and the key.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdio>
#include <functional>
#include <fstream>
#include <new>
#include <string>

#include "gguf_writer.h"
#include "models/gguf.h"
#include "models/model_config.h"

using namespace octet;
using namespace octet::testing;
using Catch::Contains;
using Catch::StartsWith;

namespace {

// A file whose only metadata is `key`: an array of `count` elements of `elem_type`, each
// encoded as `elem` (so count x elem.size() bytes of elements).
std::string write_array_file(const TempDir& dir, const std::string& name, uint32_t elem_type,
                             uint64_t count, const Bytes& elem) {
  Bytes elems;
  elems.b.reserve(size_t(count) * elem.size());
  for (uint64_t i = 0; i < count; ++i) elems.raw(elem);
  GGUFWriter w;
  w.kv("huge", kArr, array_value(elem_type, count, elems));
  const std::string path = dir.file(name);
  w.write(path);
  return path;
}

// Virtual memory of this process now, bytes (/proc/self/statm's first field).
size_t address_space_bytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  return pages * size_t(sysconf(_SC_PAGESIZE));
}

// Opens `path` in a forked child whose address space may grow by at most `budget` bytes
// (RLIMIT_AS); true when the child opened it and exited normally.
bool opens_within(const std::string& path, size_t budget) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const rlim_t limit = address_space_bytes() + budget;
    const rlimit r{limit, limit};
    if (setrlimit(RLIMIT_AS, &r) != 0) _exit(4);
    try {
      const GGUFFile f = GGUFFile::open(path);
      _exit(f.find("huge") != nullptr ? 0 : 5);
    } catch (const std::bad_alloc&) {
      _exit(3);
    } catch (...) {
      _exit(6);
    }
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string model_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ModelFileError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected ModelFileError, got " << e.what());
  }
  FAIL("no error");
  return "";
}

}  // namespace

TEST_CASE("gguf hostile: 4 MB of uint8 array elements load within a small factor of 4 MB",
          "[gguf][hostile]") {
  TempDir dir;
  const uint64_t n = 4 << 20;
  const std::string path = write_array_file(dir, "u8.gguf", kU8, n, Bytes().u8(7));
  // The mapping (4 MB) plus the copy (4 MB) plus slack; the old tree took 48 bytes an element
  // (192 MB).
  CHECK(opens_within(path, 48u << 20));

  const GGUFFile f = GGUFFile::open(path);
  const GGUFArray& a = f.find("huge")->array();
  REQUIRE(a.size() == n);
  CHECK(a.type() == GGUFValueType::UINT8);
  CHECK(a.int_at(n - 1) == 7);
  CHECK(a.heap_bytes() <= n + 64);
  CHECK(f.metadata_heap_bytes() <= n + 4096);
}

TEST_CASE("gguf hostile: an array of empty strings costs one offset per string",
          "[gguf][hostile]") {
  TempDir dir;
  const uint64_t n = 256 << 10;  // 2 MB of u64 lengths
  const std::string path = write_array_file(dir, "strs.gguf", kStr, n, Bytes().str(""));
  const GGUFFile f = GGUFFile::open(path);
  const GGUFArray& a = f.find("huge")->array();
  REQUIRE(a.size() == n);
  CHECK(a.string_at(0).empty());
  CHECK(a.string_at(n - 1).empty());
  CHECK(a.heap_bytes() <= n * 8 + 64);  // the 8-byte length each takes in the file
  CHECK(f.get_string_array("huge").size() == n);
}

TEST_CASE("gguf hostile: arrays of empty arrays and of bools stay proportional",
          "[gguf][hostile]") {
  TempDir dir;
  const uint64_t n = 64 << 10;
  const std::string path =
      write_array_file(dir, "nested.gguf", kArr, n, array_value(kU8, 0, Bytes()));
  const GGUFFile f = GGUFFile::open(path);
  const GGUFArray& a = f.find("huge")->array();
  REQUIRE(a.size() == n);
  CHECK(a.array_at(n - 1).empty());
  CHECK(a.heap_bytes() <= n * 12 * 10);  // 12 bytes each in the file

  const std::string bools = write_array_file(dir, "bools.gguf", kBool, n, Bytes().u8(1));
  const GGUFFile b = GGUFFile::open(bools);
  CHECK(b.find("huge")->array().bool_at(n - 1));
  CHECK(b.find("huge")->array().heap_bytes() <= n + 64);
}

TEST_CASE("gguf hostile: array counts beyond the bytes left are rejected before allocating",
          "[gguf][hostile]") {
  TempDir dir;
  GGUFWriter w;  // claims 100000 uint8 but holds 999
  Bytes elems;
  for (int i = 0; i < 999; ++i) elems.u8(1);
  w.kv("short", kArr, array_value(kU8, 100000, elems));
  const std::string path = dir.file("short.gguf");
  w.write(path);
  CHECK_THAT(model_error([&] { GGUFFile::open(path); }),
             StartsWith(path + ": ") && Contains("100000 array elements") &&
                 Contains("metadata 'short'"));
  // A bool element other than 0 or 1 inside an array names the element.
  GGUFWriter b;
  b.kv("flags", kArr, array_value(kBool, 3, Bytes().u8(0).u8(1).u8(9)));
  const std::string bpath = dir.file("bools.gguf");
  b.write(bpath);
  CHECK_THAT(model_error([&] { GGUFFile::open(bpath); }),
             Contains("bool value 9") && Contains("element 2") && Contains("'flags'"));
}

TEST_CASE("gguf hostile: typed array reads and the GGUFValue view agree", "[gguf][hostile]") {
  TempDir dir;
  GGUFWriter w;
  w.kv("i16", kArr, array_value(kI16, 3, Bytes().i16(-3).i16(0).i16(32767)));
  w.kv("u64", kArr, array_value(kU64, 2, Bytes().u64(5).u64(~uint64_t(0))));
  w.kv("f64", kArr, array_value(kF64, 1, Bytes().f64(-0.5)));
  w.kv("strs", kArr, array_value(kStr, 3, Bytes().str("ab").str("").str("xyz")));
  const std::string path = dir.file("typed.gguf");
  w.write(path);
  const GGUFFile f = GGUFFile::open(path);
  const GGUFArray& i16 = f.find("i16")->array();
  CHECK(i16.int_at(0) == -3);
  CHECK(i16.int_at(2) == 32767);
  CHECK(i16[0].type == GGUFValueType::INT16);
  CHECK(i16[0].as_int() == -3);
  CHECK(f.get_int_array("i16") == std::vector<int64_t>{-3, 0, 32767});
  const GGUFArray& u64 = f.find("u64")->array();
  CHECK(u64.int_at(0) == 5);
  CHECK_THROWS_WITH(u64.int_at(1), Contains("does not fit in int64"));
  CHECK(std::get<uint64_t>(u64[1].value) == ~uint64_t(0));
  CHECK_THROWS_AS(f.get_int_array("u64"), ModelFileError);
  CHECK(f.find("f64")->array().float_at(0) == -0.5);
  const GGUFArray& s = f.find("strs")->array();
  CHECK(s.string_at(0) == "ab");
  CHECK(s.string_at(1).empty());
  CHECK(s.string_at(2) == "xyz");
  std::vector<std::string> via_iter;
  for (const GGUFValue& v : s) via_iter.push_back(v.as_string());
  CHECK(via_iter == std::vector<std::string>{"ab", "", "xyz"});
  CHECK_THROWS_WITH(s.int_at(0), Contains("integer") && Contains("string"));
  CHECK_THROWS_AS(s.string_at(3), std::out_of_range);
}

TEST_CASE("gguf hostile: token ids outside the vocabulary name the file and the key",
          "[gguf][hostile]") {
  TempDir dir;
  GGUFWriter w;
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 70000);
  w.kv_u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // llama.cpp's "none"
  w.kv("tokenizer.ggml.unknown_token_id", kI32, Bytes().i32(-5));
  w.kv("tokenizer.ggml.sep_token_id", kU64, Bytes().u64(~uint64_t(0)));
  w.kv_str("tokenizer.ggml.cls_token_id", "3");
  const std::string path = dir.file("ids.gguf");
  w.write(path);
  const GGUFFile f = GGUFFile::open(path);
  CHECK(f.get_token_id("tokenizer.ggml.bos_token_id", 9, 100) == 1);
  CHECK(f.get_token_id("tokenizer.ggml.absent_token_id", 9, 100) == 9);
  CHECK(f.get_token_id("tokenizer.ggml.padding_token_id", 9, 100) == -1);
  CHECK_THAT(model_error([&] { f.get_token_id("tokenizer.ggml.eos_token_id", 2, 100); }),
             StartsWith(path + ": ") && Contains("'tokenizer.ggml.eos_token_id' is 70000") &&
                 Contains("100 tokens"));
  CHECK_THAT(model_error([&] { f.get_token_id("tokenizer.ggml.unknown_token_id", 0, 100); }),
             Contains("'tokenizer.ggml.unknown_token_id' is -5"));
  CHECK_THAT(model_error([&] { f.get_token_id("tokenizer.ggml.sep_token_id", 0, 100); }),
             Contains("'tokenizer.ggml.sep_token_id' is 18446744073709551615"));
  CHECK_THAT(model_error([&] { f.get_token_id("tokenizer.ggml.cls_token_id", 0, 100); }),
             Contains("'tokenizer.ggml.cls_token_id'") && Contains("string"));
}

TEST_CASE("gguf hostile: a uint64 block_count or context_length beyond int64 is an error, "
          "not a truncation",
          "[gguf][hostile]") {
  TempDir dir;
  for (const char* key : {"llama.block_count", "llama.context_length"}) {
    GGUFWriter w;
    w.kv_str("general.architecture", "llama");
    w.kv_u32("llama.embedding_length", 64);
    w.kv_u32("llama.attention.head_count", 4);
    w.kv_u32("llama.feed_forward_length", 128);
    if (std::string(key) != "llama.block_count") w.kv_u32("llama.block_count", 2);
    w.kv(key, kU64, Bytes().u64((uint64_t(1) << 63) + 2));
    const std::string path = dir.file(std::string(key) + ".gguf");
    w.write(path);
    const GGUFFile f = GGUFFile::open(path);
    CHECK_THAT(model_error([&] { ModelConfig::from_gguf(f); }),
               StartsWith(path + ": ") && Contains(std::string("'") + key + "'") &&
                   Contains("does not fit"));
  }
}
