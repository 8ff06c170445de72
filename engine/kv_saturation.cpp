// FP8 KV clipping counts (see kv_saturation.h): code classification, the float check, the
// serving-time sampler and the start-up warnings.
#include "engine/kv_saturation.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>

#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "kernels/common/check.h"
#include "kernels/common/fp8.h"
#include "kernels/rank_group.h"
#include "models/llama.h"
#include "models/paged_kv_cache.h"

namespace octet {

namespace {

// Magnitude code of fp8_max, and the exponent field's shift (its mantissa bits).
constexpr uint8_t kE4M3MaxCode = 0x7E, kE5M2MaxCode = 0x7B;

bool static_fp8(const KVLayerSpec& s) { return dtype_is_fp8(s.dtype) && !s.per_token_head; }

}  // namespace

FP8CodeCounts count_fp8_codes(const uint8_t* codes, int64_t n, DType format) {
  OCTET_CHECK(dtype_is_fp8(format), "count_fp8_codes: not an FP8 format");
  const bool e4m3 = format == DType::FP8_E4M3;
  const uint8_t max_code = e4m3 ? kE4M3MaxCode : kE5M2MaxCode;
  const int mantissa_bits = e4m3 ? 3 : 2;
  FP8CodeCounts c;
  c.values = n;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t m = codes[i] & 0x7F;
    c.saturated += m == max_code;
    c.underflow += (m >> mantissa_bits) == 0;  // zero or subnormal: exponent field 0
  }
  return c;
}

KVClipCounts count_kv_clipping(const float* x, int64_t n, float scale, DType format) {
  OCTET_CHECK(dtype_is_fp8(format), "count_kv_clipping: not an FP8 format");
  const bool e4m3 = format == DType::FP8_E4M3;
  // fp8_max + ulp(fp8_max) / 2: 448 + 16, 57344 + 4096.
  const float clip_at = e4m3 ? 464.0f : 61440.0f;
  const int mantissa_bits = e4m3 ? 3 : 2;
  KVClipCounts c;
  c.values = n;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) continue;
    c.amax = std::max(c.amax, std::fabs(x[i]));
    const float y = x[i] / scale;  // true division, as write_kv_cache
    if (std::fabs(y) >= clip_at) {
      ++c.clipped;
    } else if (x[i] != 0.0f && ((fp8_from_float(format, y) & 0x7F) >> mantissa_bits) == 0) {
      ++c.underflow;
    }
  }
  return c;
}

KVSaturationSampler::KVSaturationSampler(const std::vector<KVLayerSpec>& layers,
                                         int64_t every_steps, int64_t tokens_per_sample)
    : every_steps_(every_steps), tokens_per_sample_(tokens_per_sample) {
  OCTET_CHECK(every_steps >= 1 && tokens_per_sample >= 1,
              "KVSaturationSampler: every_steps and tokens_per_sample must be >= 1");
  for (size_t l = 0; l < layers.size(); ++l) {
    if (!static_fp8(layers[l])) continue;
    KVLayerSaturation s;
    s.layer = static_cast<int64_t>(l);
    counts_.push_back(s);
    formats_.push_back(layers[l].dtype);
  }
}

void KVSaturationSampler::download_codes(const PagedKVCache& cache,
                                         const std::vector<std::vector<int64_t>>& slots,
                                         Scratch& scratch, uint8_t* codes) const {
  Backend& be = cache.backend();
  const int64_t row = cache.num_kv_heads() * cache.head_dim();  // bytes
  const auto n = static_cast<int64_t>(slots[0].size());
  const auto group_of = [&](size_t c) {
    return static_cast<size_t>(cache.layer_group(counts_[c].layer));
  };
  if (row % 4 != 0) {  // rows are not whole floats for gather_rows: one download per row
    for (size_t c = 0; c < counts_.size(); ++c)
      for (int which = 0; which < 2; ++which) {
        const Buffer& buf = which == 0 ? cache.k_buffer(counts_[c].layer)
                                       : cache.v_buffer(counts_[c].layer);
        const std::vector<int64_t>& s = slots[group_of(c)];
        for (int64_t j = 0; j < n; ++j)
          be.download(buf, s[static_cast<size_t>(j)] * row,
                      codes + ((2 * static_cast<int64_t>(c) + which) * n + j) * row, row);
      }
    return;
  }
  // The buffers live as long as the sampler, sized for tokens_per_sample_ slots per group.
  const int64_t tensors = 2 * static_cast<int64_t>(counts_.size());
  const int64_t capacity = tensors * tokens_per_sample_ * row;
  const auto groups = static_cast<int64_t>(slots.size());
  const int64_t slot_bytes = groups * tokens_per_sample_ * static_cast<int64_t>(sizeof(int64_t));
  if (scratch.codes.bytes() < capacity || scratch.slots.bytes() < slot_bytes) {
    scratch.slots = be.allocate(slot_bytes);
    scratch.codes = be.allocate(capacity);
  }
  for (int64_t g = 0; g < groups; ++g)
    be.upload(scratch.slots, g * n * static_cast<int64_t>(sizeof(int64_t)),
              slots[static_cast<size_t>(g)].data(), n * static_cast<int64_t>(sizeof(int64_t)));
  // gather_rows copies FP32 words: a row of `row` bytes is row / 4 words (bits unchanged).
  for (size_t c = 0; c < counts_.size(); ++c)
    for (int which = 0; which < 2; ++which) {
      const Buffer& buf =
          which == 0 ? cache.k_buffer(counts_[c].layer) : cache.v_buffer(counts_[c].layer);
      be.gather_rows(buf.as<const float>(), row / 4,
                     scratch.slots.as<const int64_t>() + static_cast<int64_t>(group_of(c)) * n, n,
                     reinterpret_cast<float*>(scratch.codes.as<uint8_t>() +
                                              (2 * static_cast<int64_t>(c) + which) * n * row));
    }
  be.download(scratch.codes, 0, codes, tensors * n * row);
}

bool KVSaturationSampler::take_changed() {
  const bool c = changed_;
  changed_ = false;
  return c;
}

void KVSaturationSampler::after_step(const SchedulerOutput& out, const KVCacheManager& kv,
                                     const ModelRunner& runner, RankGroup* group) {
  const int64_t step = step_++;
  if (counts_.empty() || step % every_steps_ != 0 || out.scheduled.empty()) return;
  // The slots of up to tokens_per_sample tokens spread over the step: token j of m is the
  // (j + 1/2) * total / m -th of the step's tokens in scheduling order.
  const int64_t total = out.total_num_scheduled_tokens;
  if (total <= 0) return;
  const int64_t m = std::min(total, tokens_per_sample_);
  // Slots per KV cache group (each group has its own block table and block size).
  const KVCacheLayout& layout = runner.cache(0).layout();
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(layout.num_groups()));
  int64_t first = 0;  // flat index of request i's first token this step
  size_t i = 0;
  for (int64_t j = 0; j < m; ++j) {
    const int64_t t = (2 * j + 1) * total / (2 * m);
    while (i < out.scheduled.size() && t >= first + out.num_scheduled_tokens[i])
      first += out.num_scheduled_tokens[i++];
    OCTET_CHECK(i < out.scheduled.size(), "KVSaturationSampler: token beyond the step");
    const Request& r = *out.scheduled[i];
    const int64_t p = r.num_computed_tokens + (t - first);
    for (size_t g = 0; g < slots.size(); ++g) {
      const int64_t bs = layout.groups[g].block_size;
      const std::vector<int32_t>& blocks = kv.get_block_ids(r.request_id, static_cast<int64_t>(g));
      slots[g].push_back(static_cast<int64_t>(blocks.at(static_cast<size_t>(p / bs))) * bs +
                         p % bs);
    }
  }
  // Per rank: its KV heads' codes of the sampled slots, K and V of each counted layer,
  // gathered on the device into one buffer [2 * layers, slots, row] (row = one token's codes:
  // bytes, FP8 is 1 byte) and downloaded at once, then counted into the rank's own entries.
  const int world = runner.world_size();
  if (scratch_.size() < static_cast<size_t>(world)) scratch_.resize(static_cast<size_t>(world));
  std::vector<std::vector<FP8CodeCounts>> per_rank(
      static_cast<size_t>(world), std::vector<FP8CodeCounts>(2 * counts_.size()));
  const auto read_rank = [&](int r) {
    const PagedKVCache& cache = runner.cache(r);
    const int64_t row = cache.num_kv_heads() * cache.head_dim();
    const auto n = static_cast<int64_t>(slots[0].size());
    const auto tensors = static_cast<int64_t>(2 * counts_.size());
    std::vector<uint8_t> codes(static_cast<size_t>(tensors * n * row));
    download_codes(cache, slots, scratch_[static_cast<size_t>(r)], codes.data());
    for (int64_t t = 0; t < tensors; ++t) {
      FP8CodeCounts& acc = per_rank[static_cast<size_t>(r)][static_cast<size_t>(t)];
      const DType format = formats_[static_cast<size_t>(t / 2)];
      const FP8CodeCounts k = count_fp8_codes(codes.data() + t * n * row, n * row, format);
      acc.values += k.values, acc.saturated += k.saturated, acc.underflow += k.underflow;
    }
  };
  if (group && world > 1) {
    group->run([&](int r, Communicator&) { read_rank(r); });
  } else {
    for (int r = 0; r < world; ++r) read_rank(r);
  }
  for (const auto& rank : per_rank)
    for (size_t c = 0; c < counts_.size(); ++c) {
      KVLayerSaturation& s = counts_[c];
      s.k_sampled += rank[2 * c].values, s.k_saturated += rank[2 * c].saturated;
      s.k_underflow += rank[2 * c].underflow;
      s.v_sampled += rank[2 * c + 1].values, s.v_saturated += rank[2 * c + 1].saturated;
      s.v_underflow += rank[2 * c + 1].underflow;
    }
  changed_ = true;
}

std::vector<KVScaleClip> find_clipping_kv_scales(const DenseKVCache& kv, int64_t num_tokens,
                                                 const std::vector<KVLayerSpec>& layers,
                                                 int64_t nkv, int64_t hd) {
  const auto L = static_cast<int64_t>(layers.size());
  const size_t expect = static_cast<size_t>(L * kv.max_tokens * nkv * hd);
  if (num_tokens < 0 || num_tokens > kv.max_tokens || kv.k.size() != expect ||
      kv.v.size() != expect)
    throw std::invalid_argument("find_clipping_kv_scales: the K/V do not match the layers");
  std::vector<KVScaleClip> out;
  const int64_t row = nkv * hd, layer_stride = kv.max_tokens * row;
  for (int64_t l = 0; l < L; ++l) {
    const KVLayerSpec& s = layers[static_cast<size_t>(l)];
    if (!static_fp8(s)) continue;
    for (int which = 0; which < 2; ++which) {
      const std::vector<float>& scale = which == 0 ? s.k_scale : s.v_scale;
      if (static_cast<int64_t>(scale.size()) != nkv)
        throw std::invalid_argument("find_clipping_kv_scales: layer " + std::to_string(l) +
                                    " has " + std::to_string(scale.size()) + " scales, not " +
                                    std::to_string(nkv));
      const float* x = (which == 0 ? kv.k : kv.v).data() + l * layer_stride;
      KVScaleClip c;
      c.layer = l;
      c.is_v = which == 1;
      float worst = -1.0f;
      for (int64_t h = 0; h < nkv; ++h) {
        KVClipCounts head;
        for (int64_t t = 0; t < num_tokens; ++t) {
          const KVClipCounts k = count_kv_clipping(x + t * row + h * hd, hd, scale[h], s.dtype);
          head.values += k.values, head.clipped += k.clipped;
          head.amax = std::max(head.amax, k.amax);
        }
        c.values += head.values, c.clipped += head.clipped;
        const float ratio = head.amax / scale[static_cast<size_t>(h)];
        if (ratio > worst) {
          worst = ratio;
          c.kv_head = h, c.amax = head.amax, c.scale = scale[static_cast<size_t>(h)];
        }
      }
      if (c.clipped > 0) out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> kv_clip_warnings(const std::vector<KVScaleClip>& clips,
                                          const std::vector<KVLayerSpec>& layers,
                                          const std::string& what) {
  std::vector<std::string> out;
  for (size_t b = 0; b < clips.size();) {
    const int64_t l = clips[b].layer;
    const KVLayerSpec& s = layers.at(static_cast<size_t>(l));
    const float max = fp8_max_value(s.dtype);
    std::ostringstream os;
    os << std::setprecision(4) << "layer " << l << ": its FP8 KV scales (" << s.scale_source
       << ") clip K/V values seen in " << what << ":";
    size_t e = b;
    for (; e < clips.size() && clips[e].layer == l; ++e) {
      const KVScaleClip& c = clips[e];
      const char* t = c.is_v ? "V" : "K";
      os << (e == b ? " " : "; ") << t << " amax " << c.amax << " (KV head " << c.kv_head
         << ") > " << max << " x " << (c.is_v ? "v_scale " : "k_scale ") << c.scale << " = "
         << max * c.scale << ", " << c.clipped << " of " << c.values << " " << t
         << " values clipped ("
         << 100.0 * static_cast<double>(c.clipped) / static_cast<double>(c.values) << "%)";
    }
    os << ". Clipped K/V saturate to +-" << max
       << " x scale and can change answers: recalibrate (octet calibrate --model M --output "
          "scales.json, then --kv-scales-path scales.json), or use --kv-cache-dtype "
       << "fp8_per_token_head, or keep this layer in bf16 with --kv-cache-dtype-skip-layers "
       << l;
    out.push_back(os.str());
    b = e;
  }
  return out;
}

}  // namespace octet
