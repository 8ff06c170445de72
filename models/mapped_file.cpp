#include "models/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "models/model_file_error.h"

namespace octet {

MappedFile MappedFile::open(const std::string& path, const std::string& kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) throw ModelFileError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  std::string problem;
  if (fstat(fd, &st) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    problem = "not a regular file";
  } else if (st.st_size == 0) {
    problem = "empty file, not a " + kind;
  }
  if (!problem.empty()) {
    ::close(fd);
    throw ModelFileError(path, problem);
  }
  void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw ModelFileError(path, std::string("cannot mmap: ") + std::strerror(err));
  MappedFile f;
  f.map_ = p;
  f.bytes_ = size_t(st.st_size);
  return f;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (map_) munmap(map_, bytes_);
    map_ = std::exchange(other.map_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (map_) munmap(map_, bytes_);
}

}  // namespace octet
