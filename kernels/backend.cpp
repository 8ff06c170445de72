// make_backend: the one place that maps --device to a Backend; Backend::upload_fp8_weight and
// upload_bf16_weight.
#include "kernels/backend.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/fp8_layout.h"
#include "kernels/cpu/linear_bf16.h"
#if defined(OCTET_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

namespace octet {

namespace {

// "cuda" -> 0, "cuda:N" -> N (decimal digits only); -1 for anything else.
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) != 0 || device.size() == 5 || device.size() > 9) return -1;
  int index = 0;
  for (size_t i = 5; i < device.size(); ++i) {
    if (device[i] < '0' || device[i] > '9') return -1;
    index = index * 10 + (device[i] - '0');
  }
  return index;
}

}  // namespace

std::string resolve_device(const std::string& device) {
  if (device != "auto") return device;
#if defined(OCTET_HAVE_CUDA)
  // The first GPU of compute capability >= 8.0 (Ampere and newer), else the CPU.
  const int count = cuda_device_count();
  for (int i = 0; i < count; ++i)
    if (cuda_device_capability(i) >= 80) return "cuda:" + std::to_string(i);
#endif
  return "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& requested) {
  const std::string device = resolve_device(requested);
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    const int index = cuda_index(device);
    if (index < 0)
      throw std::invalid_argument("device '" + device + "': expected cuda or cuda:N");
#if defined(OCTET_HAVE_CUDA)
    try {
      return make_cuda_backend(index);  // std::invalid_argument when the GPU is missing or old
    } catch (const std::invalid_argument& e) {
      if (device == "cuda") throw std::invalid_argument("device 'cuda': " + std::string(e.what()));
      throw;
    }
#else
    throw std::invalid_argument("device '" + device + "': octet was built without CUDA");
#endif
  }
  throw std::invalid_argument("unknown device '" + device + "' (expected cpu, cuda, cuda:N or auto)");
}

Buffer Backend::upload_bf16_weight(const uint16_t* src, int64_t n, int64_t k,
                                   Bf16Layout* layout) {
  *layout = bf16_weight_layout();
  if (*layout == Bf16Layout::RowMajor) {
    Buffer b = allocate(n * k * 2);
    upload(b, 0, src, n * k * 2);
    return b;
  }
  // Packed and uploaded 1024 rows at a time (blocks of 8 rows are independent): the host holds
  // a few MB beside src, not a second copy of it (a 128256 x 4096 lm_head is 1 GiB).
  Buffer b = allocate(bf16_rows8x8_elements(n, k) * 2);
  constexpr int64_t kRows = 1024;
  std::vector<uint16_t> packed;
  for (int64_t j0 = 0; j0 < n; j0 += kRows) {
    const int64_t rows = std::min(kRows, n - j0);
    packed.resize(static_cast<size_t>(bf16_rows8x8_elements(rows, k)));
    pack_bf16_rows8x8(src + j0 * k, rows, k, packed.data());
    upload(b, j0 * k * 2, packed.data(), static_cast<int64_t>(packed.size()) * 2);
  }
  return b;
}

Buffer Backend::upload_fp8_weight(const uint8_t* src, int64_t n, int64_t k, int64_t k_groups,
                                  Fp8Layout* layout) {
  *layout = fp8_weight_layout();
  const int64_t bytes = fp8_weight_bytes(*layout, n, k, k_groups);
  Buffer b = allocate(bytes);
  if (*layout == Fp8Layout::RowMajor) {
    upload(b, 0, src, bytes);
  } else {
    std::vector<uint8_t> packed(static_cast<size_t>(bytes));
    pack_fp8_weight(*layout, src, n, k, k_groups, packed.data());
    upload(b, 0, packed.data(), bytes);
  }
  return b;
}

}  // namespace octet
