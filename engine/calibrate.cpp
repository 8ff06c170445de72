// `octet calibrate` (see calibrate.h): datasets, the calibration pass and its two outputs.
#include "engine/calibrate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "config/file_read.h"
#include "engine/kv_cache_setup.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"
#include "kernels/backend.h"
#include "kernels/forwarding_backend.h"
#include "models/kv_scales.h"

namespace octet {

namespace {

// Delegates every op to `inner`; paged_attention also records, per query head, the amax of the
// Q it is given (after RoPE) into amax[layer][head], layers counted by call order (run_decoder
// calls it once per layer, in order). Device-neutral: the amax of each (token, head) row is
// computed by the inner backend's row_amax into a scratch buffer and downloaded.
class QueryAmaxBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  // [num_layers][num_heads], max |q| so far; empty: not recording.
  std::vector<std::vector<float>> amax;
  void start(int64_t num_layers, int64_t num_heads) {
    amax.assign(static_cast<size_t>(num_layers),
                std::vector<float>(static_cast<size_t>(num_heads), 0.0f));
    calls_ = 0;
  }

  void paged_attention(const KVCacheView& c, const float* q, const PagedAttentionBatch& b,
                       int64_t nh, int64_t window, float sm, float* out) override {
    if (!amax.empty() && b.host_query_start_loc) {
      const int64_t layer = calls_++ % static_cast<int64_t>(amax.size());
      const int64_t m = b.host_query_start_loc[b.num_seqs];  // query tokens
      const int64_t rows = m * nh;
      if (scratch_.bytes() < rows * 4) scratch_ = inner().allocate(rows * 4);
      inner().row_amax(q, rows, c.head_dim, scratch_.as<float>());
      host_.resize(static_cast<size_t>(rows));
      inner().download(scratch_, 0, host_.data(), rows * 4);
      std::vector<float>& a = amax[static_cast<size_t>(layer)];
      for (int64_t r = 0; r < rows; ++r) {
        float& h = a[static_cast<size_t>(r % nh)];
        h = std::max(h, host_[static_cast<size_t>(r)]);
      }
    }
    inner().paged_attention(c, q, b, nh, window, sm, out);
  }

 private:
  int64_t calls_ = 0;
  Buffer scratch_;
  std::vector<float> host_;
};

using nlohmann::json;

[[noreturn]] void bad_file(const std::string& path, const std::string& problem) {
  throw std::invalid_argument(path + ": " + problem);
}

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

std::string sharegpt_role(const std::string& from) {
  if (from == "human" || from == "user") return "user";
  if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "bard")
    return "assistant";
  return from;  // system, tool, ...
}

/// One record of a JSONL / JSON-array dataset.
CalibrationSample record_sample(const json& r, const std::string& where, const std::string& path) {
  if (!r.is_object()) bad_file(path, where + ": expected a JSON object, got " + r.dump());
  CalibrationSample s;
  auto turns = [&](const char* key, const char* role_key, const char* content_key) {
    const json& list = r.at(key);
    if (!list.is_array()) bad_file(path, where + ": \"" + key + "\" must be an array");
    for (const json& t : list) {
      if (!t.is_object() || !t.contains(role_key) || !t.contains(content_key) ||
          !t[role_key].is_string() || !t[content_key].is_string())
        bad_file(path, where + ": each \"" + key + "\" entry needs string \"" + role_key +
                           "\" and \"" + content_key + "\"");
      std::string role = t[role_key].get<std::string>();
      if (std::string(key) == "conversations") role = sharegpt_role(role);
      s.messages.emplace_back(role, t[content_key].get<std::string>());
    }
  };
  if (r.contains("messages")) {
    turns("messages", "role", "content");
  } else if (r.contains("conversations")) {
    turns("conversations", "from", "value");
  } else if (r.contains("text")) {
    if (!r["text"].is_string()) bad_file(path, where + ": \"text\" must be a string");
    s.text = r["text"].get<std::string>();
  } else {
    bad_file(path, where +
                       ": a record needs \"text\", \"messages\" (OpenAI) or "
                       "\"conversations\" (ShareGPT)");
  }
  return s;
}

bool sample_empty(const CalibrationSample& s) {
  if (s.every_special_token) return false;
  if (s.messages.empty()) return blank(s.text);
  for (const auto& m : s.messages)
    if (!blank(m.second)) return false;
  return true;
}

static_assert(kDefaultCalibrationHeadroom == kCalculatedKVScaleHeadroom);

float fp8_range(DType d) { return fp8_max_value(d == DType::FP8_E5M2 ? d : DType::FP8_E4M3); }

}  // namespace

std::vector<CalibrationSample> read_calibration_dataset(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) bad_file(path, "not a readable regular file");
  std::string text;
  try {
    text = read_file_bounded(path, kMaxDatasetFileBytes);
  } catch (const FileReadError& e) {
    bad_file(path, "cannot read the dataset: " + e.problem());
  }
  if (blank(text)) bad_file(path, "empty dataset (no text)");
  std::vector<CalibrationSample> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool jsonl_name = path.size() >= 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
  if (text[first] == '[') {
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      bad_file(path, std::string("malformed JSON array: ") + e.what());
    }
    if (!j.is_array()) bad_file(path, "expected a JSON array of records");
    for (size_t i = 0; i < j.size(); ++i)
      out.push_back(record_sample(j[i], "record " + std::to_string(i), path));
  } else if (text[first] == '{' || jsonl_name) {
    std::istringstream lines(text);
    std::string line;
    for (int64_t n = 1; std::getline(lines, line); ++n) {
      if (blank(line)) continue;
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {
        bad_file(path, "line " + std::to_string(n) + ": malformed JSON: " + e.what());
      }
      out.push_back(record_sample(j, "line " + std::to_string(n), path));
    }
  } else {
    CalibrationSample s;
    s.text = text;
    out.push_back(std::move(s));
  }
  out.erase(std::remove_if(out.begin(), out.end(), sample_empty), out.end());
  if (out.empty()) bad_file(path, "empty dataset (every record's text is empty)");
  return out;
}

std::vector<CalibrationSample> default_calibration_samples() {
  std::vector<CalibrationSample> out;
  out.push_back({kv_calibration_text(), {}, false});
  out.push_back({"", {}, true});
  out.push_back({"",
                 {{"system", "You are a helpful assistant. Answer briefly and accurately."},
                  {"user", "What is the capital of France, and how many people live there?"},
                  {"assistant",
                   "Paris. About 2.1 million people live in the city itself and "
                   "roughly 12 million in the metropolitan area (2023)."},
                  {"user", "Write a Python function that returns the n-th Fibonacci number."},
                  {"assistant",
                   "```python\ndef fib(n: int) -> int:\n    a, b = 0, 1\n    for _ "
                   "in range(n):\n        a, b = b, a + b\n    return a\n```\n"
                   "fib(10) == 55 and fib(20) == 6765."}},
                 false});
  out.push_back({"",
                 {{"user", "Convert 72 F to Celsius and show the steps."},
                  {"assistant", "C = (F - 32) * 5 / 9 = (72 - 32) * 5 / 9 = 40 * 5 / 9 = 22.2 C."},
                  {"user",
                   "Summarize the README of a C++ project in one sentence: it builds "
                   "with cmake -S . -B build -G Ninja and tests run with ctest."},
                  {"assistant", "Configure with CMake and Ninja, build, then run ctest."}},
                 false});
  return out;
}

void validate_calibrate_options(const CalibrateOptions& o) {
  if (o.strategy != "tensor" && o.strategy != "attn_head")
    throw std::invalid_argument("--strategy " + o.strategy +
                                ": a KV cache scale strategy must be tensor (one scale per "
                                "layer) or attn_head (one per KV head); compressed-tensors' "
                                "other strategies (channel, group, token, block) do not apply "
                                "to the KV cache");
  if (o.kv_cache_dtype != "fp8" && o.kv_cache_dtype != "fp8_e4m3" && o.kv_cache_dtype != "fp8_e5m2")
    throw std::invalid_argument("--kv-cache-dtype " + o.kv_cache_dtype +
                                ": calibration is for FP8 caches (fp8, fp8_e4m3, fp8_e5m2); "
                                "fp8_per_token_head needs no calibration");
  if (o.num_samples < 1) throw std::invalid_argument("--num-samples must be >= 1");
  if (o.max_seq_len < 1) throw std::invalid_argument("--max-seq-len must be >= 1");
  if (!std::isfinite(o.headroom) || o.headroom < 1.0f)
    throw std::invalid_argument("--headroom must be a finite number >= 1");
  if (o.kv_cache_rotation != "none" && o.kv_cache_rotation != "hadamard")
    throw std::invalid_argument("--kv-cache-rotation must be none or hadamard, got '" +
                                o.kv_cache_rotation + "'");
}

std::vector<std::vector<int32_t>> calibration_token_ids(
    const LoadedModel& model, const std::vector<CalibrationSample>& samples,
    const CalibrateOptions& o, const ChatRenderer& render) {
  validate_calibrate_options(o);
  const Tokenizer& tok = *model.tokenizer;
  const ModelConfig& c = model.model->config();
  const int64_t len = std::min(o.max_seq_len, c.max_position_embeddings);
  std::vector<std::vector<int32_t>> out;
  auto push = [&](std::vector<int32_t> ids) {
    if (static_cast<int64_t>(out.size()) >= o.num_samples || ids.empty()) return;
    if (static_cast<int64_t>(ids.size()) > len) ids.resize(static_cast<size_t>(len));
    out.push_back(std::move(ids));
  };
  for (const CalibrationSample& s : samples) {
    if (static_cast<int64_t>(out.size()) >= o.num_samples) break;
    if (s.every_special_token) {
      push(kv_calibration_ids(tok, c.vocab_size));
    } else if (!s.messages.empty()) {
      std::string text;
      if (render) {
        text = render(s.messages);
      } else {
        for (const auto& [role, content] : s.messages) text += role + ": " + content + "\n";
      }
      push(tok.encode(text, /*add_special=*/!render, /*parse_special=*/true));
    } else {
      const std::vector<int32_t> ids = tok.encode(s.text, true, true);
      if (o.require_full_window && static_cast<int64_t>(ids.size()) < len && samples.size() == 1)
        throw std::invalid_argument(
            "the dataset is shorter than one sample: " + std::to_string(ids.size()) +
            " tokens, a sample is --max-seq-len " + std::to_string(len) +
            " tokens; give more text or lower --max-seq-len");
      for (size_t b = 0; b < ids.size(); b += static_cast<size_t>(len))
        push(std::vector<int32_t>(
            ids.begin() + static_cast<std::ptrdiff_t>(b),
            ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), b + len))));
    }
  }
  if (out.empty()) throw std::invalid_argument("empty dataset: no sample has any token");
  return out;
}

KVCalibration calibrate_kv_cache(const LoadedModel& model,
                                 const std::vector<std::vector<int32_t>>& samples,
                                 const CalibrateOptions& o,
                                 const std::function<void(int64_t, int64_t)>& progress) {
  validate_calibrate_options(o);
  if (samples.empty()) throw std::invalid_argument("calibrate: no samples");
  const ModelConfig& c = model.model->config();
  const int64_t L = c.num_hidden_layers, nkv = c.num_key_value_heads, hd = c.head_dim;
  KVCalibration cal;
  const DType dtype = parse_kv_cache_dtype(o.kv_cache_dtype);
  cal.kv_cache_dtype = dtype == DType::FP8_E5M2 ? "fp8_e5m2" : "fp8_e4m3";
  cal.strategy = o.strategy;
  cal.headroom = o.headroom;
  cal.k_amax.assign(static_cast<size_t>(L), std::vector<float>(static_cast<size_t>(nkv), 0.0f));
  cal.v_amax = cal.k_amax;
  const bool rotate = parse_kv_cache_rotation(o.kv_cache_rotation, hd);  // head_dim checked
  // Q amax when the model was loaded on the recording backend (run_calibrate, world size 1).
  auto* query = model.world_size() == 1 ? dynamic_cast<QueryAmaxBackend*>(&model.model->backend())
                                        : nullptr;
  if (query) query->start(L, c.num_attention_heads);
  const int64_t total = static_cast<int64_t>(samples.size());
  for (int64_t i = 0; i < total; ++i) {
    const std::vector<int32_t>& ids = samples[static_cast<size_t>(i)];
    const auto n = static_cast<int64_t>(ids.size());
    if (n < 1 || n > c.max_position_embeddings)
      throw std::invalid_argument("calibrate: sample " + std::to_string(i) + " has " +
                                  std::to_string(n) + " tokens (1.." +
                                  std::to_string(c.max_position_embeddings) + " allowed)");
    std::vector<SequenceKVCache> seq = new_sequence_caches(model, n, rotate);
    (void)forward_sequence(model, seq, ids.data(), n, 0, false);
    const DenseKVCache kv = download_sequence_kv(model, seq);
    const int64_t row = nkv * hd, layer_stride = kv.max_tokens * row;
    for (int64_t l = 0; l < L; ++l)
      for (auto [x, amax] :
           {std::pair{kv.k.data(), &cal.k_amax}, std::pair{kv.v.data(), &cal.v_amax}})
        for (int64_t t = 0; t < n; ++t)
          for (int64_t h = 0; h < nkv; ++h) {
            const float* p = x + l * layer_stride + t * row + h * hd;
            float& m = (*amax)[static_cast<size_t>(l)][static_cast<size_t>(h)];
            for (int64_t d = 0; d < hd; ++d) {
              if (!std::isfinite(p[d]))
                throw std::runtime_error("calibrate: layer " + std::to_string(l) + ", KV head " +
                                         std::to_string(h) + ", sample " + std::to_string(i) +
                                         ", position " + std::to_string(t) +
                                         ": K or V is not finite (the model is broken)");
              m = std::max(m, std::fabs(p[d]));
            }
          }
    cal.num_tokens += n;
    ++cal.num_samples;
    if (progress) progress(i + 1, total);
  }
  if (query) {
    cal.q_amax = std::move(query->amax);
    query->amax.clear();
    for (size_t l = 0; l < cal.q_amax.size(); ++l)
      for (size_t h = 0; h < cal.q_amax[l].size(); ++h)
        if (!std::isfinite(cal.q_amax[l][h]))
          throw std::runtime_error("calibrate: layer " + std::to_string(l) + ", query head " +
                                   std::to_string(h) + ": Q is not finite (the model is broken)");
  }
  const float range = fp8_range(dtype) / o.headroom;
  auto to_scale = [range](float amax) {
    const float s = amax / range;
    return std::isnormal(s) ? s : 1.0f;  // all zero: any scale works
  };
  cal.k_scale.resize(static_cast<size_t>(L));
  cal.v_scale.resize(static_cast<size_t>(L));
  for (size_t l = 0; l < cal.k_scale.size(); ++l)
    for (auto [amax, out] :
         {std::pair{&cal.k_amax[l], &cal.k_scale[l]}, std::pair{&cal.v_amax[l], &cal.v_scale[l]}}) {
      if (o.strategy == "attn_head") {
        for (float a : *amax) out->push_back(to_scale(a));
      } else {
        out->push_back(to_scale(*std::max_element(amax->begin(), amax->end())));
      }
    }
  return cal;
}

void write_kv_scales_json(const std::string& path, const KVCalibration& cal) {
  json layers = json::object();
  for (size_t l = 0; l < cal.k_scale.size(); ++l) {
    json e;
    for (auto [key, s] :
         {std::pair{"k_scale", &cal.k_scale[l]}, std::pair{"v_scale", &cal.v_scale[l]}}) {
      // A float widened to double prints as the shortest decimal that reads back as that
      // double, which rounds back to the same float.
      if (s->size() == 1) {
        e[key] = static_cast<double>(s->at(0));
      } else {
        json a = json::array();
        for (float v : *s) a.push_back(static_cast<double>(v));
        e[key] = a;
      }
    }
    layers[std::to_string(l)] = e;
  }
  json j;
  j["kv_cache_dtype"] = cal.kv_cache_dtype;
  j["model_type"] = "llama";
  j["layers"] = layers;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot write the KV scales file");
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw std::runtime_error(path + ": cannot write the KV scales file");
}

}  // namespace octet

namespace octet {

namespace {

bool ends_with_json(const std::string& p) {
  return p.size() >= 5 && p.compare(p.size() - 5, 5, ".json") == 0;
}

}  // namespace

void check_calibrate_output(const std::string& model, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out(output);
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  if (!fs::is_directory(parent, ec))
    bad_file(output, "cannot write the output: directory " + parent.string() + " does not exist");
  if (ends_with_json(output)) {
    if (fs::is_directory(out, ec)) bad_file(output, "is a directory, expected a .json file");
    const bool existed = fs::exists(out, ec);
    {
      std::ofstream f(output, std::ios::binary | std::ios::app);
      if (!f) bad_file(output, "cannot write the output file (permission denied or read-only)");
    }
    if (!existed) fs::remove(out, ec);
    return;
  }
  if (!is_hf_checkpoint_dir(model))
    bad_file(output, "a checkpoint output needs a Hugging Face checkpoint directory as --model (" +
                         model + " is not one); write a scales file instead: --output FILE.json");
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) bad_file(output, "exists and is not a directory");
    if (fs::exists(out / "config.json", ec))
      bad_file(output, "already holds a checkpoint (config.json); choose a new directory");
  }
  // Probe: create (or reuse) the directory and a file in it.
  const bool existed = fs::exists(out, ec);
  fs::create_directories(out, ec);
  const fs::path probe = out / ".octet-write-test";
  {
    std::ofstream f(probe);
    if (!f) {
      if (!existed) fs::remove(out, ec);
      bad_file(output, "cannot write into the output directory (permission denied or read-only)");
    }
  }
  fs::remove(probe, ec);
  if (!existed) fs::remove(out, ec);
}

KVCalibration run_calibrate(const CalibrateRun& run,
                            const std::function<ChatRenderer(const ModelTokenizer&)>& make_renderer,
                            const std::function<void(int64_t, int64_t)>& progress) {
  validate_calibrate_options(run.options);
  check_calibrate_output(run.model, run.output);
  const std::vector<CalibrationSample> samples =
      run.dataset.empty() ? default_calibration_samples() : read_calibration_dataset(run.dataset);
  LoadOptions lo = make_load_options(run.quantization, "channel");
  lo.device = run.device;
  lo.world_size = static_cast<int>(run.tensor_parallel_size);
  // One rank: its backend records Q amax (KVCalibration::q_amax). Tensor parallel ranks run on
  // the rank group's backends, so Q amax is not recorded there.
  if (lo.world_size == 1)
    lo.backend = std::make_shared<QueryAmaxBackend>(std::shared_ptr<Backend>(make_backend(run.device)));
  const std::unique_ptr<LoadedModel> model = load_model(run.model, lo);
  ChatRenderer render;
  if ((run.dataset.empty() || run.chat) && make_renderer)
    render = make_renderer(*model->model_tokenizer);
  if (run.chat && !render)
    throw std::invalid_argument("--chat: " + run.model + " has no chat template");
  CalibrateOptions o = run.options;
  o.require_full_window = !run.dataset.empty();
  const std::vector<std::vector<int32_t>> ids = calibration_token_ids(*model, samples, o, render);
  KVCalibration cal = calibrate_kv_cache(*model, ids, o, progress);
  if (ends_with_json(run.output)) {
    write_kv_scales_json(run.output, cal);
  } else {
    write_kv_calibrated_checkpoint(run.model, run.output, cal);
  }
  return cal;
}

}  // namespace octet
