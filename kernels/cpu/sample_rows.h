// The CPU reference of Backend::sample_rows (kernels/common/sampling.h's order, scalar and
// sequential): the CPU backend's implementation and the oracle of the CUDA kernel's tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/common/sampling.h"

namespace octet {

/// The token for row x: [width] with p and its edits edits[p.edit_begin, + p.edit_count) (null
/// when p.edit_count is 0): a token id; kSampleNonFinite when a value of x is NaN or +-inf, or
/// the edits make a logit NaN or +inf or every logit -inf (the host sampler reports those from
/// x); kSampleSkipped for mode kSkip. Equal to engine/sampler.h sample() of the same row and
/// params when sample() draws p.u. x is not modified. Thread-safe.
int32_t sample_row_reference(const float* x, int64_t width, const SampleRowParams& p,
                             const LogitEdit* edits = nullptr);

/// The weights the draw of a kSample row walks: w: [width] = exp((x - max) * inv_temperature)
/// for the tokens min_p, top_k and top_p keep, else 0 (engine/sampler.h sampling_probs() is
/// w / sum(w)). x: the processed row, no NaN or +inf, not every value -inf.
void sample_row_weights(const float* x, int64_t width, const SampleRowParams& p,
                        std::vector<float>& w);

}  // namespace octet
