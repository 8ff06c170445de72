// The FP8 formats octet stores: a tag and the largest finite value of each. Plain C++11, no
// other includes of the project, so CUDA sources (any -std) and host code can share it.
#pragma once

#include <cstdint>

namespace octet {

/// E4M3: OCP "e4m3fn" (bias 7, no inf, max 448). E5M2: bias 15, IEEE-like inf/NaN, max 57344.
enum class Fp8Format : uint8_t { E4M3, E5M2 };

/// Largest finite value of the format: 448 (E4M3) or 57344 (E5M2). A scale s = amax / this maps
/// amax onto the top code.
constexpr float fp8_max_value(Fp8Format format) {
  return format == Fp8Format::E4M3 ? 448.0f : 57344.0f;
}

}  // namespace octet
