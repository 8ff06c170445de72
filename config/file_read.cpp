#include "config/file_read.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace octet {

std::string read_file_bounded(const std::string& path, std::size_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw FileReadError(path, std::string("cannot open: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileReadError(path, "is a directory, expected a file");
  const std::string limit = "larger than the " + std::to_string(max_bytes) + "-byte limit";
  if (S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) > max_bytes)
    throw FileReadError(path, limit);
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw FileReadError(path, std::string("cannot open: ") + std::strerror(errno));
  std::string out;
  if (S_ISREG(st.st_mode)) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const std::size_t n = std::fread(buf, 1, sizeof buf, f.get());
    if (n > 0) {
      if (n > max_bytes - out.size()) throw FileReadError(path, limit);
      out.append(buf, n);
    }
    if (n < sizeof buf) {
      if (std::ferror(f.get())) throw FileReadError(path, "read error");
      break;
    }
  }
  return out;
}

}  // namespace octet
