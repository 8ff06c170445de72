#pragma once
// FP8 KV clipping made visible (issue 13 item 6): a sampled serving-time count of the K/V values
// that FP8 saturated or flushed, per layer (/metrics), and the start-up check that warns when a
// layer's static scale would clip K/V seen in a start-up pass (engine/kv_cache_setup.cpp).
// Scales multiply on dequantization: q = fp8(x / s) (DESIGN.md "Numerics conventions").
//
// Serving-time counts read back what the cache stores, so they never touch the kernels or any
// output bit: every kKVSaturationSampleEverySteps-th engine step, up to
// kKVSaturationTokensPerSample of the step's tokens (spread evenly over it) have their K and V
// codes of every FP8 static-scale layer downloaded (every rank's KV heads) and classified:
//   saturated: the code is +-fp8_max (448 E4M3, 57344 E5M2): x / s clipped, or within half a
//              step below the clip point (x / s >= 432 for E4M3, >= 53248 for E5M2), which the
//              stored code cannot tell apart;
//   underflow: the code is zero or subnormal (|x / s| below E4M3's 2^-6, E5M2's 2^-14, rounded):
//              flushed to zero or kept with fewer than the format's mantissa bits. An x that is
//              exactly 0 also stores code 0 and is counted (rare after RoPE and the projections).
// Layers in bf16/fp16 are not counted, nor fp8_per_token_head layers: each (token, head) row
// has scale amax / 448, so nothing clips by construction and the row's largest value is at
// +-448 by design.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"  // KVLayerSaturation
#include "kernels/backend.h"
#include "kernels/common/dtype.h"

namespace octet {

class KVCacheManager;
class ModelRunner;
class PagedKVCache;
class RankGroup;
struct DenseKVCache;
struct KVLayerSpec;
struct SchedulerOutput;

/// Engine steps between two samples (the 1st, (N+1)-th, (2N+1)-th ... step is sampled).
inline constexpr int64_t kKVSaturationSampleEverySteps = 16;
/// Tokens of a sampled step whose K/V are read back (fewer when the step has fewer).
inline constexpr int64_t kKVSaturationTokensPerSample = 4;

/// Classified FP8 codes (see the top of this file). values: codes looked at (NaN codes are
/// counted there only).
struct FP8CodeCounts {
  int64_t values = 0, saturated = 0, underflow = 0;
};

/// Counts n stored codes of `format` (FP8_E4M3 or FP8_E5M2; CHECKed).
FP8CodeCounts count_fp8_codes(const uint8_t* codes, int64_t n, DType format);

/// What FP8 does to float values with scale s, computed as write_kv_cache stores them
/// (y = x / s, true division, then fp8 round-to-nearest-even with saturation):
///   clipped:   |y| >= fp8_max + ulp(fp8_max) / 2 (464 E4M3, 61440 E5M2), the values only
///              saturation brings back (kv_report's "clip");
///   underflow: x != 0 whose code is zero or subnormal.
/// amax: max |x|. NaN / inf x are counted in values only. format as count_fp8_codes; s > 0.
struct KVClipCounts {
  int64_t values = 0, clipped = 0, underflow = 0;
  float amax = 0.0f;
};
KVClipCounts count_kv_clipping(const float* x, int64_t n, float scale, DType format);

/// The serving-time sampler: one per engine, engine thread only.
class KVSaturationSampler {
 public:
  /// layers: the cache's specs (every KV head, KVCacheSetup::layers); FP8 layers without
  /// per_token_head are counted, and counts() has one entry per such layer, ascending, zero
  /// until sampled. every_steps, tokens_per_sample >= 1 (CHECKed).
  explicit KVSaturationSampler(const std::vector<KVLayerSpec>& layers,
                               int64_t every_steps = kKVSaturationSampleEverySteps,
                               int64_t tokens_per_sample = kKVSaturationTokensPerSample);

  /// Call once per engine step after ModelRunner::execute(out, kv) and before
  /// Scheduler::update(out) (the slots are those the step wrote). On a sampled step, reads the
  /// chosen tokens' K/V codes back from every rank's cache; `group` runs the per-rank downloads
  /// on the rank threads (tensor parallelism; null: on the calling thread). Per rank, the
  /// sampled rows of every counted layer's K and V are gathered on the device into one buffer
  /// (Backend::gather_rows) and downloaded in one copy.
  void after_step(const SchedulerOutput& out, const KVCacheManager& kv, const ModelRunner& runner,
                  RankGroup* group = nullptr);

  /// Counts so far, one entry per counted layer.
  const std::vector<KVLayerSaturation>& counts() const { return counts_; }
  /// Whether counts() changed since the last call (cheap polling for the stats copy).
  bool take_changed();
  /// True when no layer is counted (nothing to sample).
  bool empty() const { return counts_.empty(); }

 private:
  // One rank's device buffers for a sample: slots [tokens_per_sample] int64 and the gathered
  // codes [2 * counted layers, tokens_per_sample, row] bytes; allocated on first use.
  struct Scratch {
    Buffer slots, codes;
  };
  // slots: [KV cache group][tokens]. Fills codes [2 * counts_.size(), tokens, row] (layer c's K at 2c, V at 2c + 1; row =
  // the cache's num_kv_heads * head_dim bytes) from `cache`'s rows at `slots`.
  void download_codes(const PagedKVCache& cache, const std::vector<std::vector<int64_t>>& slots,
                      Scratch& scratch, uint8_t* codes) const;

  std::vector<KVLayerSaturation> counts_;
  std::vector<Scratch> scratch_;  // per rank
  std::vector<DType> formats_;  // [counts_.size()]
  int64_t every_steps_, tokens_per_sample_, step_ = 0;
  bool changed_ = false;
};

/// One tensor (K or V) of one layer whose static scales clip values of a start-up pass.
struct KVScaleClip {
  int64_t layer = 0;
  bool is_v = false;
  int64_t kv_head = 0;  // the head with the largest amax / scale
  float amax = 0.0f;    // that head's amax over the pass
  float scale = 0.0f;   // that head's scale
  int64_t clipped = 0;  // values clipped, all heads (count_kv_clipping)
  int64_t values = 0;   // values seen, all heads
};

/// Checks every FP8 static-scale layer of `layers` against K/V of a pass over num_tokens
/// tokens (kv: [num_layers, kv.max_tokens, num_kv_heads, head_dim] FP32, every KV head; each
/// layer's k_scale / v_scale [num_kv_heads]). Returns the tensors with at least one clipped
/// value, by layer then K before V. Throws std::invalid_argument when kv's sizes do not match.
std::vector<KVScaleClip> find_clipping_kv_scales(const DenseKVCache& kv, int64_t num_tokens,
                                                 const std::vector<KVLayerSpec>& layers,
                                                 int64_t num_kv_heads, int64_t head_dim);

/// One warning per layer in `clips` (entries of one layer together, as
/// find_clipping_kv_scales returns them): "layer 3: its FP8 KV scales (source file) clip ...
/// V amax 7.25 (KV head 2) > 448 x v_scale 0.01 = 4.48: 12 of 46080 V values (0.026%) ...",
/// with what to do (octet calibrate, --kv-cache-dtype fp8_per_token_head,
/// --kv-cache-dtype-skip-layers N). what: where the values come from, e.g. "the start-up check
/// (212 tokens)".
std::vector<std::string> kv_clip_warnings(const std::vector<KVScaleClip>& clips,
                                          const std::vector<KVLayerSpec>& layers,
                                          const std::string& what);

}  // namespace octet
