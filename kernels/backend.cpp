// make_backend: the one place that maps --device to a Backend.
#include "kernels/backend.h"

#include <stdexcept>

#include "kernels/cpu/cpu_backend.h"

namespace octet {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu" || device == "auto") return make_cpu_backend();  // auto: no CUDA backend yet
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#if defined(OCTET_HAVE_CUDA)
    throw std::invalid_argument("device '" + device + "': no CUDA backend yet");
#else
    throw std::invalid_argument("device '" + device + "': octet was built without CUDA");
#endif
  }
  throw std::invalid_argument("unknown device '" + device + "' (expected cpu, cuda or auto)");
}

}  // namespace octet
