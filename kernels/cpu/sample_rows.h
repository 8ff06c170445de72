// The CPU reference of Backend::sample_rows (kernels/common/sampling.h's order, scalar and
// sequential): the CPU backend's implementation and the oracle of the CUDA kernel's tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/sampling.h"

namespace octet {

/// The token for row x: [width] with p: a token id, kSampleNonFinite when a value of x is NaN
/// or +-inf, kSampleSkipped for mode kSkip. Equal to engine/sampler.h sample() of the same row
/// and params (temperature = 1 / inv_temperature) when sample() draws p.u. Thread-safe.
int32_t sample_row_reference(const float* x, int64_t width, const SampleRowParams& p);

/// The weights the draw of a kSample row walks: w: [width] = exp((x - max) * inv_temperature)
/// for the tokens min_p, top_k and top_p keep, else 0 (engine/sampler.h sampling_probs() is
/// w / sum(w)). x finite.
void sample_row_weights(const float* x, int64_t width, const SampleRowParams& p,
                        std::vector<float>& w);

}  // namespace octet
