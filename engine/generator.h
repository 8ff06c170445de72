#pragma once
// Generator: load a model and generate from one prompt, the path behind `octet generate` until
// the continuous-batching Engine exists. Exposes only std types so that server/ never sees
// models/ (DESIGN.md layering).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/sampling_params.h"

namespace octet {

struct GenerateResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> token_ids;  // generated, EOS included when it ended the sequence
  std::string text;                // detokenized generated text (special tokens skipped)
  std::string finish_reason;       // "stop" (EOS) or "length" (max_tokens)
  std::string linear_format;       // "fp32", "fp8-w8a8-dynamic-channel", ...
  double prefill_seconds = 0.0;    // wall time of the prompt's forward pass
  double decode_seconds = 0.0;     // wall time from the first to the last generated token
  double tokens_per_second = 0.0;  // generated tokens / (prefill + decode) seconds
};

/// Prefill and decode throughput of one sequence (batch 1), from `bench`.
struct ThroughputResult {
  int64_t input_len = 0, output_len = 0;
  std::string linear_format;
  int64_t decode_weight_bytes = 0;  // read per decode step
  double prefill_tokens_per_second = 0.0;
  double decode_tokens_per_second = 0.0;
};

/// How to load the model: quantization auto | fp8 | none; weight_strategy channel | tensor (for
/// online FP8 quantization).
struct GeneratorOptions {
  std::string quantization = "auto";
  std::string weight_strategy = "channel";
  std::string device = "auto";  // --device
};

class Generator {
 public:
  /// Loads a model (GGUF file or Hugging Face directory: weights, config, tokenizer). Throws
  /// octet::ModelFileError (a std::runtime_error) naming the file on any problem with it,
  /// std::invalid_argument for bad options.
  static std::unique_ptr<Generator> load(const std::string& model_path,
                                         const GeneratorOptions& options = {});
  ~Generator();

  /// Prompt text -> ids (BOS when the model asks for it; special tokens such as <|im_start|>
  /// recognised).
  std::vector<int32_t> tokenize(const std::string& text) const;

  /// Generates up to params.max_tokens tokens after prompt_ids (stopping at EOS unless
  /// ignore_eos). on_text, when set, receives each complete piece of UTF-8 text as it is made.
  /// Throws std::invalid_argument for an empty prompt, an id outside the vocabulary, bad
  /// params, or a prompt plus max_tokens longer than the model's context.
  GenerateResult generate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                          const std::function<void(const std::string&)>& on_text = {}) const;

  /// Times a prefill of input_len tokens and output_len greedy decode steps (ignoring EOS).
  ThroughputResult bench(int64_t input_len, int64_t output_len) const;

  int64_t max_model_len() const;
  const std::string& model_path() const;
  /// "fp32", "fp8-w8a8-dynamic-channel", ...
  std::string linear_format() const;
  /// Weight bytes read per decode step (all linears and lm_head).
  int64_t decode_weight_bytes() const;

 private:
  struct Impl;
  explicit Generator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace octet
