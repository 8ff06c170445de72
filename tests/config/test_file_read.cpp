// read_file_bounded: whole files below the bound, a clear error (path named) above it, and
// endless devices stopped at the bound instead of read for ever.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "config/file_read.h"

using namespace octet;

namespace {
std::string temp_file(const std::string& content) {
  char name[] = "/tmp/octet-file-read-XXXXXX";
  const int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(name, std::ios::binary) << content;
  return name;
}
}  // namespace

TEST_CASE("read_file_bounded reads a file up to its bound", "[file_read]") {
  const std::string path = temp_file("hello\0world");
  CHECK(read_file_bounded(path, 5) == "hello");
  CHECK(read_file_bounded(path, 100) == "hello");
  std::remove(path.c_str());
  const std::string big = temp_file(std::string(70000, 'x'));
  CHECK(read_file_bounded(big, 70000).size() == 70000);
  try {
    (void)read_file_bounded(big, 69999);
    FAIL("no error above the bound");
  } catch (const FileReadError& e) {
    CHECK(e.path() == big);
    CHECK(std::string(e.what()).find("69999-byte limit") != std::string::npos);
  }
  std::remove(big.c_str());
}

TEST_CASE("read_file_bounded stops an endless device at the bound", "[file_read]") {
  CHECK_THROWS_WITH(read_file_bounded("/dev/zero", 1 << 20),
                    Catch::Contains("/dev/zero") && Catch::Contains("1048576-byte limit"));
}

TEST_CASE("read_file_bounded names missing files and directories", "[file_read]") {
  CHECK_THROWS_WITH(read_file_bounded("/nonexistent/x.json", 10),
                    Catch::Contains("/nonexistent/x.json: cannot open"));
  CHECK_THROWS_WITH(read_file_bounded("/tmp", 10), Catch::Contains("is a directory"));
}

TEST_CASE("read_file_bounded reads pipes and devices up to the stream bound", "[file_read]") {
  // /dev/zero under a 1 GiB cap stops at kMaxStreamInputBytes, not at 1 GiB.
  CHECK_THROWS_WITH(read_file_bounded("/dev/zero", std::size_t{1} << 30),
                    Catch::Contains(std::to_string(kMaxStreamInputBytes) + "-byte limit"));
  // A FIFO with no writer: empty at once, no wait for a writer.
  char dir[] = "/tmp/octet-fifo-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string fifo = std::string(dir) + "/f";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(read_file_bounded(fifo, 100).empty());
  std::remove(fifo.c_str());
  rmdir(dir);
}
