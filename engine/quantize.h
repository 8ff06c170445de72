#pragma once
// `octet quantize`: turns an unquantized Hugging Face checkpoint into an FP8_DYNAMIC
// compressed-tensors checkpoint laid out as llm-compressor writes one (E4M3 weights with one
// scale per output channel, computed in the checkpoint's dtype as compressed-tensors does;
// activations quantized per token at run time; lm_head, embeddings and norms unchanged).
// Loadable by octet (--model DIR) and by vLLM.
#include <cstdint>
#include <string>

namespace octet {

struct QuantizeOptions {
  std::string model;   // HF checkpoint directory (BF16, FP16 or F32 weights)
  std::string output;  // directory to create / fill
};

struct QuantizeReport {
  int64_t quantized_linears = 0;  // X.weight tensors written as F8_E4M3
  int64_t copied_tensors = 0;     // other tensors written unchanged
  int64_t input_bytes = 0;        // tensor bytes read
  int64_t output_bytes = 0;       // tensor bytes written
};

/// Throws std::invalid_argument for a GGUF input (convert it to an HF directory first with
/// scripts/make_hf_checkpoint.py), an already-quantized input, or an output directory that
/// already holds a checkpoint; ModelFileError for a bad input checkpoint; std::runtime_error
/// for I/O failures.
QuantizeReport quantize_checkpoint(const QuantizeOptions& options);

}  // namespace octet
