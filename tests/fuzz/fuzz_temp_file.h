#pragma once
// A scratch file that fuzz harnesses rewrite with each input, for readers that open a path
// (GGUFFile::open, SafetensorsFile::open mmap the file). Lives in $TMPDIR (default /tmp),
// removed at exit.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace octet::fuzz {

class TempFile {
 public:
  explicit TempFile(const std::string& suffix) {
    const char* dir = std::getenv("TMPDIR");
    std::string templ = std::string(dir && *dir ? dir : "/tmp") + "/octet-fuzz-XXXXXX." + suffix;
    fd_ = mkstemps(templ.data(), int(suffix.size()) + 1);
    if (fd_ < 0) {
      std::perror("octet fuzz: mkstemps");
      std::abort();
    }
    path_ = templ;
  }
  ~TempFile() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  /// Replaces the file's contents with `size` bytes.
  void write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, data, size, 0) != ssize_t(size)) {
      std::perror("octet fuzz: write");
      std::abort();
    }
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace octet::fuzz
