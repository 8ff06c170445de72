#pragma once
// `octet kv-report`: what each FP8 KV format and scale source costs this model, measured on real
// text through the model (not random data). One unquantized-KV pass over the text records, per
// layer and KV head, K/V amax and for every variant (format x scale source) the scale, the
// fraction of values that clip (|x| / scale beyond what rounds to fp8_max), flush to zero or
// land in subnormals, the largest attention-score error and the attention-output relative error
// against the exact cache (every query_stride-th query position, every query head). Then the model
// runs once per variant with its K/V quantized and dequantized on write (bit-exact FP8 values, FP32
// attention) for the end-to-end full-vocabulary KL divergence and greedy (argmax) agreement
// against the exact-KV logits. With target_kl > 0 it recommends the layers to keep in bf16 for
// one variant: layers are added in order of their own KL (that layer alone quantized) until the
// measured KL is <= target_kl.
// Scale sources: unit (1.0), tensor / attn_head (octet calibrate's scales on the built-in
// calibration set, headroom 2), per_token_head (amax / fp8_max of each token's head row, as
// --kv-cache-dtype fp8_per_token_head computes it; reported for E4M3 and E5M2 alike), and, as a
// measurement of --kv-cache-rotation hadamard (issue 13 item 4; not a cache mode yet),
// unit+hadamard / per_token_head+hadamard: each K and V head row multiplied by the normalized
// Hadamard matrix H / sqrt(head_dim) before quantization and back after (q.k and the attention
// output are unchanged by the rotation itself; head_dim must be a power of two).
#include <cstdint>
#include <string>
#include <vector>

namespace octet {

struct KVReportOptions {
  std::string model;
  std::string quantization = "auto";  // the model's linear layers, as served
  std::string text;                   // the text measured on (tokenized with BOS)
  int64_t max_tokens = 512;
  std::vector<std::string> formats = {"fp8_e4m3", "fp8_e5m2"};
  std::vector<std::string> sources = {"unit", "tensor", "attn_head", "per_token_head"};
  int64_t query_stride = 4;  // attention errors on every query_stride-th position
  double target_kl = 0.0;    // > 0: recommend skip layers for `recommend_for`
  std::string recommend_for = "fp8_e4m3/tensor";  // format/source
  /// Long-context probe (empty = off): for each length, a copy task (len / 2 random tokens
  /// repeated once) run with exact KV and with every variant; accuracy = fraction of the second
  /// half's next tokens greedy decoding predicts (the model must attend len / 2 tokens back).
  std::vector<int64_t> long_context_lengths;
  /// Layers kept in bf16, as --kv-cache-dtype-skip-layers spells them ("sliding_window",
  /// "0,5", "0,sliding_window"). Non-empty: every variant is measured a second time with these
  /// layers unquantized (a companion row with `skip_layers` set; KL, greedy agreement,
  /// perplexity and the long-context probe, not the per-layer table, which would repeat its
  /// parent's for the quantized layers).
  std::string skip_layers;
};

struct KVHeadReport {
  float k_amax = 0, v_amax = 0;     // over the text's tokens, FP32
  float k_scale = 0, v_scale = 0;   // per_token_head: the largest token scale
  double k_clip = 0, v_clip = 0;    // fraction with |x| / scale >= fp8_max + ulp/2 (saturated)
  double k_flush = 0, v_flush = 0;  // fraction of non-zero values that quantize to 0
  double k_subnormal = 0, v_subnormal = 0;  // fraction landing in (0, min normal)
  double max_score_error = 0;   // max |q.k - q.k_hat| * softmax_scale (logits of the softmax)
  double output_rel_error = 0;  // sqrt(sum |o - o_hat|^2 / sum |o|^2) over sampled queries
};

struct KVVariantReport {
  std::string format, source;                    // "fp8_e4m3", "tensor"
  std::vector<std::vector<KVHeadReport>> heads;  // [num_layers][num_kv_heads]
  double kl = 0;                         // mean over positions of KL(exact || quantized), nats
  double greedy_agreement = 0;           // fraction of positions with the same argmax
  std::vector<int64_t> clipping_layers;  // layers with any clipped K or V value
  double perplexity = 0;                 // of the text's tokens with this KV
  /// A skip companion (KVReportOptions::skip_layers): the layers kept in bf16, the spec as
  /// given, and `heads` empty. Empty for a variant quantized in every layer.
  std::vector<int64_t> skip_layers;
  std::string skip_spec;
};

struct KVReport {
  int64_t tokens = 0, num_layers = 0, num_kv_heads = 0;
  /// Per layer: attention window in tokens (0 = global / full attention), the model's
  /// layer_sliding_window.
  std::vector<int64_t> layer_window;
  double perplexity = 0;  // of the text's tokens with exact (FP32) KV
  std::vector<KVVariantReport> variants;
  // With target_kl > 0:
  std::string recommend_for;
  std::vector<double> layer_kl;      // [num_layers]: KL with only that layer quantized
  std::vector<int64_t> skip_layers;  // ascending
  double kl_with_skip = 0;           // measured with skip_layers in bf16
  bool target_met = false;
  std::string skip_layers_flag;  // "--kv-cache-dtype-skip-layers 3,7" ("" if none needed)
  struct LongContextRow {
    int64_t length = 0;
    double exact_accuracy = 0;     // with the exact (unquantized) KV
    std::vector<double> accuracy;  // per variant, in `variants` order
  };
  std::vector<LongContextRow> long_context;
};

/// Runs the report (see the top of this file). Throws std::invalid_argument for an unknown
/// format or source, a text of fewer than 2 tokens, a recommend_for not among the variants, a
/// skip_layers spec that does not parse or selects no layer (or one beyond the model's), or
/// a non-CPU device; ModelFileError for the model.
KVReport run_kv_report(const KVReportOptions& options);

/// The built-in calibration text (`--builtin-text`; what --calculate-kv-scales and the tensor /
/// attn_head sources' scales are computed on).
std::string kv_report_builtin_text();

/// The report as JSON text (every field above).
std::string kv_report_json(const KVReport& r);

/// The report as a table: one line per variant (KL, greedy agreement, clipping layers, worst
/// layers by output error), then per layer and KV head of each variant amax, scale, clip and
/// flush fractions and attention errors, then the recommendation.
std::string kv_report_table(const KVReport& r);

/// Writes a gnuplot script and data drawing a PNG heatmap (layer x KV head, attention-output
/// relative error, one panel per variant) to png_path when gnuplot is installed. Returns "" on
/// success, else the reason (e.g. "gnuplot not found; install it (apt-get install gnuplot) to
/// draw the heatmap").
std::string write_kv_report_heatmap(const KVReport& r, const std::string& png_path);

}  // namespace octet
