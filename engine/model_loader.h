#pragma once
// Loading a model by path: a GGUF file or a Hugging Face checkpoint directory, with its
// tokenizer and end-of-sequence ids. Engine-internal (the server sees only engine facades).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_args.h"
#include "engine/model_tokenizer.h"
#include "models/checkpoint.h"
#include "models/gguf.h"
#include "models/llama.h"
#include "models/tokenizer.h"

namespace octet {

/// Where a model comes from: --model, --load-format, --tokenizer and --seed.
struct ModelSource {
  /// auto: a GGUF file or HF checkpoint directory. dummy: a preset name
  /// (models/model_presets.h), a directory holding config.json, or a config.json file.
  std::string model;
  std::string load_format = "auto";  // auto | dummy (random weights, models/dummy_weights.h)
  /// A GGUF file or HF directory whose tokenizer (and chat template) replaces the model's;
  /// "" = the model's own (dummy: config.json's directory when it holds tokenizer.json).
  std::string tokenizer;
  int64_t seed = -1;  // dummy weights' seed; -1 = kDefaultDummySeed
};

/// The ModelSource of an engine's arguments.
ModelSource model_source(const EngineArgs& args);

struct LoadedModel {
  std::string path;
  std::string load_format = "auto";      // as loaded: auto | dummy
  /// Host memory available when loading began (MemAvailable, lowered to a cgroup v2
  /// memory.max's room; engine/kv_cache_setup.h): what --gpu-memory-utilization takes a
  /// fraction of on the CPU.
  int64_t host_memory_available_bytes = 0;
  std::optional<GGUFFile> gguf;          // set for a .gguf file
  std::optional<HFCheckpoint> hf;        // set for an HF directory
  std::unique_ptr<LlamaModel> model;     // rank 0's (world size 1: the whole model)
  // Tensor parallelism (LoadOptions::world_size > 1): ranks 1..N-1's shards, each on its own
  // backend, and the rank group that loaded them and runs every forward (shared with the
  // runner). World size 1: no peers, and `ranks` is a group of one (no thread).
  std::vector<std::unique_ptr<LlamaModel>> peers;
  std::shared_ptr<RankGroup> ranks;
  std::unique_ptr<Tokenizer> tokenizer;
  // generation_config.json's eos_token_id (config.json's when there is no
  // generation_config.json, as vLLM) plus the tokenizer's EOS; each below vocab_size.
  std::vector<int32_t> eos_token_ids;
  // The front ends' tokenizer facade over `tokenizer` and the model's chat template.
  std::unique_ptr<ModelTokenizer> model_tokenizer;

  int world_size() const { return 1 + static_cast<int>(peers.size()); }
  /// Rank r's model (0 <= r < world_size()).
  const LlamaModel& rank_model(int r) const { return r == 0 ? *model : *peers.at(r - 1); }
};

/// LoadOptions from the command-line spellings: quantization auto|fp8|none (checked at load),
/// weight_strategy channel|tensor. Throws std::invalid_argument for another weight_strategy.
LoadOptions make_load_options(const std::string& quantization,
                              const std::string& weight_strategy);

/// Loads `path` (GGUF file or HF directory holding config.json) with its tokenizer facade (the
/// tensor-parallel shards when options.world_size > 1: validate_tensor_parallel first, then each
/// rank loads and uploads its shard on its own rank thread and backend; options.rank ignored;
/// chat template: GGUF tokenizer.chat_template, or tokenizer_config.json's chat_template, a
/// string or the "default" entry of a list of {name, template}). An HF checkpoint's small files
/// (config.json, generation_config.json, tokenizer.json, tokenizer_config.json, read bounded:
/// models/config_json.h) are checked before any weight is read. Throws ModelFileError naming
/// the file (and the field) on any problem, std::invalid_argument for bad options or head
/// counts that tensor_parallel_size does not divide (the message names them).
std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options);

/// load_model(path) for source.load_format auto (with source.tokenizer, when given, in place of
/// the model's tokenizer, chat template and EOS); for dummy, a model of the architecture
/// source.model names with seeded random weights, each rank generating and uploading its shard
/// tensor by tensor (models/dummy_weights.h), and the tokenizer of source.tokenizer. A
/// tokenizer smaller than the model's vocabulary is padded to it (pad_tokenizer_vocab) under
/// dummy. Throws std::invalid_argument for an unknown load_format, a dummy --model that names
/// no preset or config.json, a dummy model without a tokenizer, or as load_model(path) does.
std::unique_ptr<LoadedModel> load_model(const ModelSource& source, const LoadOptions& options);

/// Only the tokenizer of `path` (GGUF file or HF directory); cheap.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);
/// The tokenizer load_model(source) would use, unpadded; cheap.
std::unique_ptr<Tokenizer> load_tokenizer(const ModelSource& source);

/// `tokenizer` seen with vocab_size() == vocab (> its own): ids at or beyond its own vocabulary
/// have no text (token_bytes and token_text ""; decode drops them, as Hugging Face tokenizers
/// drop ids they do not know) and are not special; everything else is `tokenizer`'s. For
/// models whose vocabulary outgrows their tokenizer (dummy weights with any small tokenizer).
std::unique_ptr<Tokenizer> pad_tokenizer_vocab(std::unique_ptr<Tokenizer> tokenizer,
                                               int32_t vocab);

}  // namespace octet
