#pragma once
// Perplexity of a model on a text, and how far a quantized model's next-token distributions
// are from the unquantized one's (`octet perplexity`). Exposes std types only.
#include <cstdint>
#include <string>
#include <vector>

namespace octet {

struct PerplexityOptions {
  std::string model;                  // GGUF file or HF directory
  std::string load_format = "auto";   // auto | dummy (engine/model_loader.h ModelSource)
  std::string tokenizer;              // "" = the model's
  std::string quantization = "auto";  // auto | fp8 | none
  std::string weight_strategy = "channel";  // channel | tensor (online quantization)
  std::string device = "auto";              // --device: cpu | cuda | cuda:N | auto
  int64_t tensor_parallel_size = 1;         // --tensor-parallel-size
  int64_t threads = 0;                      // --threads (0: automatic)
  std::string lm_head_dtype = "bf16";       // --lm-head-dtype
  int64_t max_tokens = 2048;          // tokens of the text scored (from its start)
  bool compare = false;               // also run quantization "none" on the same tokens
};

struct PerplexityResult {
  double perplexity = 0.0;            // exp(mean NLL) over tokens - 1 predictions
  int64_t tokens = 0;                 // tokens evaluated
  int64_t window = 0;                 // tokens per independent window (<= max_model_len)
  std::string linear_format;          // e.g. "fp8-w8a8-dynamic-channel"
  // With compare:
  double reference_perplexity = 0.0;  // the unquantized model's
  double kl_divergence = 0.0;         // mean KL(P_ref || P_model) per position, nats
  double top1_agreement = 0.0;        // fraction of positions with the same argmax
};

/// Tokenizes `text` (no special-token parsing; BOS when the model asks for it), keeps the
/// first max_tokens ids and scores them in windows of at most the model's context length:
/// within a window every token after the first is predicted from those before it.
/// Throws std::invalid_argument for fewer than 2 tokens or bad options; ModelFileError for
/// model files.
PerplexityResult compute_perplexity(const PerplexityOptions& options, const std::string& text);

/// The same over given token ids (used by tests against reference values).
PerplexityResult compute_perplexity_ids(const PerplexityOptions& options,
                                        const std::vector<int32_t>& ids);

}  // namespace octet
