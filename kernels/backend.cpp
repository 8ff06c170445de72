// make_backend: the one place that maps --device to a Backend.
#include "kernels/backend.h"

#include <stdexcept>

namespace octet {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  throw std::invalid_argument("unknown device '" + device + "'");
}

}  // namespace octet
