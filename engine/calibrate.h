#pragma once
// `octet calibrate`: FP8 KV cache scales measured on calibration text. The model runs
// unquantized over each sample as one sequence into an FP32 cache; per layer and KV head the
// amax of K (as stored: after RoPE) and V over every position of every sample (and, for the
// record, per layer and query head the amax of Q after RoPE) gives
//   scale = amax * headroom / fp8_max   (fp8_max = 448 for E4M3, 57344 for E5M2),
// per tensor (strategy "tensor": the max over heads) or per KV head ("attn_head"), the two
// kv_cache_scheme strategies of compressed-tensors / llm-compressor. The default headroom is
// 2 (as --calculate-kv-scales, kCalculatedKVScaleHeadroom: K/V up to twice the calibration amax
// still fit; headroom 1 maps the overall amax exactly to fp8_max, which llm-compressor's minmax
// observer, a moving average of each batch's amax, does only for one batch).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace octet {

struct LoadedModel;

/// One calibration sample: plain text, or (when `messages` is not empty) a conversation of
/// (role, content) turns, rendered through the chat template with --chat.
struct CalibrationSample {
  std::string text;
  std::vector<std::pair<std::string, std::string>> messages;
  /// The built-in special-token probe instead: kv_calibration_ids (engine/kv_cache_setup.h),
  /// every special token of the vocabulary, each followed by a short line of text.
  bool every_special_token = false;
};

/// Reads a calibration dataset. By its content:
///   - JSON Lines (every non-empty line a JSON object; also *.jsonl): one sample per line, from
///     "text" (a string), "messages" ([{"role", "content"}], OpenAI) or "conversations"
///     ([{"from", "value"}], ShareGPT; from human/user -> user, gpt/assistant -> assistant,
///     system -> system);
///   - a JSON array of such objects (ShareGPT's usual file);
///   - anything else: plain text, one sample (cut into --max-seq-len windows later).
/// Throws std::invalid_argument("<path>: <problem>") for an unreadable file, a file with no
/// text (empty, whitespace only, or records whose text is all empty: "empty dataset"), a
/// malformed JSON line (its number) or a record with none of the keys above.
std::vector<CalibrationSample> read_calibration_dataset(const std::string& path);

/// The built-in calibration set: the --calculate-kv-scales text (prose, a dialogue, code,
/// JSON, a table of numbers), the same text's special-token lines (every special token of the
/// vocabulary, see kv_calibration_ids) and chat conversations (system, user and assistant turns
/// with code and numbers) to be rendered through the chat template.
std::vector<CalibrationSample> default_calibration_samples();

/// Renders a conversation through the model's chat template (no generation prompt).
using ChatRenderer =
    std::function<std::string(const std::vector<std::pair<std::string, std::string>>&)>;

/// The default headroom: kCalculatedKVScaleHeadroom (models/kv_scales.h), as --calculate-kv-scales.
inline constexpr float kDefaultCalibrationHeadroom = 2.0f;

struct CalibrateOptions {
  int64_t num_samples = 64;         // at most this many samples (windows of plain text) are run
  int64_t max_seq_len = 2048;       // tokens per sample (longer ones are cut; <= model context)
  std::string strategy = "tensor";  // tensor | attn_head
  std::string kv_cache_dtype = "fp8_e4m3";  // fp8_e4m3 (= fp8) | fp8_e5m2
  float headroom = kDefaultCalibrationHeadroom;  // >= 1
  /// --kv-cache-rotation: "hadamard" records K (and Q) after the Hadamard rotation that
  /// serving with --kv-cache-rotation hadamard applies (the scales then describe the cache).
  std::string kv_cache_rotation = "none";
  /// Plain-text samples: true = one window must be full (a text shorter than max_seq_len
  /// tokens is an error: the dataset is "shorter than one sample"); false = take what there is.
  bool require_full_window = true;
};

/// Throws std::invalid_argument naming the flag for a strategy other than tensor|attn_head, a
/// dtype that is not FP8, num_samples or max_seq_len < 1, headroom < 1 / not finite, or
/// kv_cache_rotation other than none | hadamard.
void validate_calibrate_options(const CalibrateOptions& o);

struct KVCalibration {
  int64_t num_samples = 0;  // samples run
  int64_t num_tokens = 0;   // tokens run, all samples
  /// [num_layers][num_kv_heads]: max |K| (after RoPE) and max |V| over every token.
  std::vector<std::vector<float>> k_amax, v_amax;
  /// [num_layers][num_attention_heads]: max |Q| (after RoPE, as attention reads it) over every
  /// token; informational (the scales are K's and V's). Recorded when the model runs on
  /// run_calibrate's recording backend (world size 1); empty otherwise.
  std::vector<std::vector<float>> q_amax;
  /// [num_layers][1 or num_kv_heads]: the scales, 1 value per tensor (strategy tensor) or one
  /// per KV head (attn_head).
  std::vector<std::vector<float>> k_scale, v_scale;
  std::string kv_cache_dtype;  // fp8_e4m3 or fp8_e5m2
  std::string strategy;
  float headroom = 1.0f;
};

/// Token ids of each sample: text tokenized with BOS when the model asks for it and special
/// tokens recognised; a conversation rendered by `render` (or, when `render` is empty, joined
/// as "role: content" lines); plain text longer than max_seq_len cut into consecutive windows
/// of max_seq_len tokens, other samples cut at max_seq_len. At most num_samples samples.
/// Throws std::invalid_argument for no sample with >= 1 token (empty dataset) or, with
/// require_full_window, a plain-text sample (the dataset) shorter than one window.
std::vector<std::vector<int32_t>> calibration_token_ids(
    const LoadedModel& model, const std::vector<CalibrationSample>& samples,
    const CalibrateOptions& options, const ChatRenderer& render);

/// Runs each sample through `model` (world size 1 or tensor parallel) and returns the amax and
/// scales (see the top of this file; an amax of 0 gives scale 1), and Q amax when `model` was
/// loaded by run_calibrate (KVCalibration::q_amax). progress(done, total) is
/// called after each sample when set. Throws std::invalid_argument for bad options or no
/// samples, std::runtime_error naming layer/head for a NaN or infinite K/V.
KVCalibration calibrate_kv_cache(const LoadedModel& model,
                                 const std::vector<std::vector<int32_t>>& samples,
                                 const CalibrateOptions& options,
                                 const std::function<void(int64_t, int64_t)>& progress = {});

/// Writes the scales as octet's scales JSON (load_kv_scales_file's format: kv_cache_dtype,
/// model_type "llama", layers {"N": {"k_scale", "v_scale"}}, a number per tensor or an array
/// per KV head); the values are FP32 written in a form that reads back bit for bit. Throws
/// std::runtime_error("<path>: cannot write ...") on an I/O failure.
void write_kv_scales_json(const std::string& path, const KVCalibration& cal);

/// Writes a compressed-tensors checkpoint into directory `out_dir` (created; must not hold a
/// config.json): the model's FP8 weights (an FP8_DYNAMIC checkpoint is copied; an unquantized
/// one is quantized as `octet quantize` does) plus model.layers.N.self_attn.k_scale / v_scale
/// (F32, shape [1] for tensor, [num_kv_heads, 1, 1] for attn_head, as llm-compressor writes
/// them) and quantization_config.kv_cache_scheme. KV scale tensors the source already holds are
/// replaced. Throws std::invalid_argument for a GGUF model (write a scales JSON instead) or an
/// output that exists as a file or checkpoint; std::runtime_error for I/O failures.
void write_kv_calibrated_checkpoint(const std::string& model_dir, const std::string& out_dir,
                                    const KVCalibration& cal);

class ModelTokenizer;

/// Everything `octet calibrate` does, for front ends (no models/ types).
struct CalibrateRun {
  std::string model;                  // GGUF file or HF directory
  std::string quantization = "none";  // the calibration pass's linear layers (auto|fp8|none)
  std::string device = "auto";
  int64_t tensor_parallel_size = 1;
  std::string dataset;  // "" = default_calibration_samples()
  bool chat = false;    // render dataset conversations through the chat template
  CalibrateOptions options;
  std::string output;  // *.json: write_kv_scales_json; else write_kv_calibrated_checkpoint
};

/// Checks that `output` can be written before any model runs: a *.json file whose directory
/// exists and which can be opened for writing (an existing file is replaced), or a checkpoint
/// directory that is new or empty (its parent must exist and be writable) and, for a checkpoint,
/// an HF --model. Throws std::invalid_argument("<output>: <problem>").
void check_calibrate_output(const std::string& model, const std::string& output);

/// Loads the model (world size 1: on a pass-through backend that records Q amax per layer and
/// query head), reads the dataset, runs the calibration and writes the output (the scales;
/// Q amax is in the returned record only: the scales file's format has no place for it).
/// make_renderer(tokenizer) returns the chat renderer (called for the default set's chat
/// samples and with run.chat; an empty renderer when the model has no chat template: turns are
/// joined as "role: content" lines). Throws as the functions above and load_model.
KVCalibration run_calibrate(const CalibrateRun& run,
                            const std::function<ChatRenderer(const ModelTokenizer&)>& make_renderer,
                            const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace octet
