#include "config/file_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace octet {

namespace {

/// Closes the descriptor on every path out of read_file_bounded.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file_bounded(const std::string& path, std::size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one.
  const Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) throw FileReadError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw FileReadError(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw FileReadError(path, "is a directory, expected a file");
  const bool regular = S_ISREG(st.st_mode);
  // A pipe or device has no size to check up front: it is read up to a smaller bound, so that
  // /dev/zero costs at most that much memory before the error.
  const std::size_t limit = regular ? max_bytes : std::min(max_bytes, kMaxStreamInputBytes);
  const std::string too_large = "larger than the " + std::to_string(limit) + "-byte limit" +
                                (regular ? "" : " for a pipe or device");
  if (regular && static_cast<std::size_t>(st.st_size) > limit) throw FileReadError(path, too_large);
  (void)::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);  // reads block again
  std::string out;
  if (regular) out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileReadError(path, std::string("read error: ") + std::strerror(errno));
    }
    if (n == 0) break;
    if (static_cast<std::size_t>(n) > limit - out.size()) throw FileReadError(path, too_large);
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

int json_nesting_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest && (deepest = depth) > limit) return limit + 1;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace octet
