#include "engine/kv_cache_setup.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <algorithm>
#include <cctype>

#include "engine/kv_budget.h"
#include "engine/kv_saturation.h"
#include "engine/model_loader.h"
#include "engine/sequence_forward.h"
#include "models/kv_scales.h"

namespace octet {

namespace {

// FNV-1a over bytes (64-bit): the salt only has to differ when any layer's format differs.
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<float> per_head(const std::vector<float>& s, int64_t nkv) {
  if (static_cast<int64_t>(s.size()) == nkv) return s;
  return std::vector<float>(static_cast<size_t>(nkv), s.at(0));
}

std::string format_scales(const std::vector<float>& s) {
  if (s.empty()) return "-";
  float lo = s[0], hi = s[0];
  for (float v : s) lo = std::min(lo, v), hi = std::max(hi, v);
  std::ostringstream os;
  os << std::setprecision(4);
  if (lo == hi) {
    os << lo;
  } else {
    os << lo << ".." << hi;
  }
  return os.str();
}

void check_scales(const std::vector<float>& s, const char* which, int64_t layer,
                  const std::string& source) {
  for (size_t h = 0; h < s.size(); ++h)
    if (!std::isfinite(s[h]) || s[h] <= 0.0f)
      throw std::invalid_argument("layer " + std::to_string(layer) + " " + which + "[" +
                                  std::to_string(h) + "] = " + std::to_string(s[h]) + " from " +
                                  source + ": KV scales must be finite and positive");
}

// "9.45 GiB", "408.2 MiB", "64.0 KiB", "512 B".
std::string format_bytes(int64_t bytes) {
  if (bytes < 0) return "-" + format_bytes(bytes == std::numeric_limits<int64_t>::min()
                                               ? std::numeric_limits<int64_t>::max()
                                               : -bytes);
  std::ostringstream os;
  os << std::fixed;
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) {
    os << std::setprecision(2) << b / (1 << 30) << " GiB";
  } else if (bytes >= (int64_t{1} << 20)) {
    os << std::setprecision(1) << b / (1 << 20) << " MiB";
  } else if (bytes >= 1024) {
    os << std::setprecision(1) << b / 1024 << " KiB";
  } else {
    os << bytes << " B";
  }
  return os.str();
}

int64_t linear_bytes(const LinearWeight& w) {
  return w.weight.bytes() + w.scale.bytes() + w.bias.bytes() + w.input_scale_buffer.bytes();
}

// A device: a backend that reports its memory (Backend::memory_info; CUDA). The CPU does not.
bool on_device(const LoadedModel& loaded) {
  return loaded.model->backend().memory_info().total_bytes > 0;
}

// The memory --gpu-memory-utilization takes a fraction of on the CPU: the host memory available
// when loading began (the weights are in it).
int64_t host_memory_bytes(const LoadedModel& loaded, int64_t weights) {
  if (loaded.host_memory_available_bytes > 0) return loaded.host_memory_available_bytes;
  return available_host_memory_bytes() + weights;  // loaded without a record of it
}

// --gpu-memory-utilization, or vLLM's default 0.9 on a device; 0 on the CPU by default (the
// fixed CacheConfig::kDefaultMemoryBytes budget).
double kv_memory_fraction(const CacheConfig& cache, const LoadedModel& loaded) {
  if (cache.gpu_memory_utilization > 0) return cache.gpu_memory_utilization;
  return on_device(loaded) ? 0.9 : 0.0;
}

// One rank of a device: its memory and parts (engine/kv_budget.h), its KV bytes per block.
struct RankMemory {
  DeviceMemoryParts parts;
  DeviceMemoryBudget budget;
  int64_t block_bytes = 0;  // this rank's share of a block (its KV heads)
};

// "total 79.19 GiB, cap 75.23 GiB (0.95); weights ..., free left 3.96 GiB" for one rank.
std::string device_parts_text(const MemoryFigures& m, double fraction, int64_t weights_rank,
                              int64_t activations_rank, int64_t graphs_rank,
                              int64_t num_graph_sizes, bool graphs_supported) {
  std::ostringstream os;
  os << "total " << format_bytes(m.device_total_bytes);
  if (fraction > 0) os << ", cap " << format_bytes(m.device_cap_bytes) << " (" << fraction << ")";
  os << "; weights " << format_bytes(weights_rank) << ", activations "
     << format_bytes(activations_rank) << ", GEMM scratch "
     << format_bytes(m.workspace.gemm_scratch) << ", attention partials "
     << format_bytes(m.workspace.attention_partials) << ", attention plan "
     << format_bytes(m.workspace.attention_plan) << ", ";
  if (m.workspace.attention_prefill > 0)
    os << "attention prefill " << format_bytes(m.workspace.attention_prefill) << ", ";
  if (graphs_rank > 0)
    os << "CUDA graphs " << format_bytes(graphs_rank) << " (" << num_graph_sizes
       << " decode sizes, estimate), ";
  else if (graphs_supported)
    os << "CUDA graphs off (--enforce-eager), ";
  os << "context/other " << format_bytes(m.context_other_bytes) << ", KV pool "
     << format_bytes(m.kv_pool_bytes) << ", free left " << format_bytes(m.free_left_bytes);
  return os.str();
}

}  // namespace

int64_t available_host_memory_bytes() {
  int64_t avail = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") {
      avail = kib * 1024;
      break;
    }
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), cur_file("/sys/fs/cgroup/memory.current");
  int64_t max = 0, cur = 0;
  if (max_file >> max && cur_file >> cur && max > cur) avail = std::min(avail, max - cur);
  return avail;
}

int64_t model_weight_bytes(const LlamaModel& model) {
  const LlamaWeights& w = model.weights();
  int64_t n = w.embed_tokens.bytes() + w.norm.bytes() + linear_bytes(w.lm_head);
  for (const LlamaLayerWeights& l : w.layers) {
    n += l.attn_norm.bytes() + l.ffn_norm.bytes();
    for (const LinearWeight* lw : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj,
                                   &l.up_proj, &l.down_proj})
      n += linear_bytes(*lw);
  }
  return n;
}

namespace {

// A special token no prompt holds: <unusedN>, <|reserved_special_token_N|>.
bool placeholder_token(const std::string& text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower.find("unused") != std::string::npos || lower.find("reserved") != std::string::npos;
}

}  // namespace

std::vector<int32_t> kv_check_ids(const Tokenizer& tok, int64_t vocab) {
  std::vector<int32_t> ids = tok.encode(kv_calibration_text(), /*add_special=*/true, false);
  if (static_cast<int64_t>(ids.size()) > kKVCheckTextTokens)
    ids.resize(static_cast<size_t>(kKVCheckTextTokens));
  const std::vector<int32_t> filler = tok.encode("\nThe answer is below.\n", false, false);
  const int32_t n = std::min<int32_t>(tok.vocab_size(), static_cast<int32_t>(vocab));
  int64_t specials = 0;
  for (int32_t id = 0; id < n && specials < kKVCheckSpecialTokens; ++id) {
    if (!tok.is_special(id) || placeholder_token(tok.token_text(id))) continue;
    ids.push_back(id);
    ids.insert(ids.end(), filler.begin(), filler.end());
    ++specials;
  }
  return ids;
}

std::vector<int32_t> kv_calibration_ids(const Tokenizer& tok, int64_t vocab) {
  std::vector<int32_t> ids = tok.encode(kv_calibration_text(), /*add_special=*/true, false);
  const std::vector<int32_t> filler = tok.encode("\nThe answer is below.\n", false, false);
  const int32_t n = std::min<int32_t>(tok.vocab_size(), static_cast<int32_t>(vocab));
  int64_t specials = 0;
  for (int32_t id = 0; id < n && specials < kMaxCalibrationSpecialTokens; ++id) {
    if (!tok.is_special(id) || placeholder_token(tok.token_text(id))) continue;
    ++specials;
    ids.push_back(id);
    ids.insert(ids.end(), filler.begin(), filler.end());
  }
  return ids;
}

bool parse_kv_cache_rotation(const std::string& rotation, int64_t head_dim) {
  if (rotation == "none") return false;
  if (rotation != "hadamard")
    throw std::invalid_argument("--kv-cache-rotation must be none or hadamard, got '" +
                                rotation + "'");
  if (head_dim <= 0 || (head_dim & (head_dim - 1)) != 0)
    throw std::invalid_argument("--kv-cache-rotation hadamard needs a power-of-two head_dim; "
                                "this model's head_dim is " + std::to_string(head_dim) +
                                " (use --kv-cache-rotation none)");
  return true;
}

std::string kv_rotation_scales_warning(const std::string& source) {
  return "WARNING: --kv-cache-rotation hadamard with static k_scale from " + source +
         ": the cache stores rotated K, so scales calibrated without rotation no longer "
         "describe it (the scales carry no rotation marker). Use scales from `octet calibrate "
         "--kv-cache-rotation hadamard`, --calculate-kv-scales, or --kv-cache-dtype "
         "fp8_per_token_head";
}

DType parse_kv_cache_dtype(const std::string& name) {
  if (name == "auto" || name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "fp16" || name == "float16" || name == "half") return DType::F16;
  if (name == "fp8" || name == "fp8_e4m3") return DType::FP8_E4M3;
  if (name == "fp8_e5m2") return DType::FP8_E5M2;
  if (name == kPerTokenHeadDtype) return DType::FP8_E4M3;  // + per-(token, head) scales
  throw std::invalid_argument("--kv-cache-dtype: unknown dtype '" + name +
                              "' (expected auto, bf16, fp16, fp8, fp8_e4m3, fp8_e5m2 or " +
                              kPerTokenHeadDtype + ")");
}

KVCacheSetup setup_kv_cache(const CacheConfig& cache, int64_t max_model_len,
                            const LoadedModel& loaded) {
  SchedulerConfig scheduler;
  scheduler.max_model_len = max_model_len;
  return setup_kv_cache(cache, scheduler, loaded);
}

KVCacheSetup setup_kv_cache(const CacheConfig& cache, const SchedulerConfig& scheduler,
                            const LoadedModel& loaded, bool cuda_graphs) {
  const int64_t max_model_len = scheduler.max_model_len;
  const LlamaModel& model = *loaded.model;
  const ModelConfig& c = model.config();
  const int64_t L = c.num_hidden_layers, nkv = c.num_key_value_heads, hd = c.head_dim;
  KVCacheSetup out;
  out.block_size = cache.block_size;
  out.max_model_len = max_model_len > 0 ? max_model_len : c.max_position_embeddings;
  if (out.max_model_len > c.max_position_embeddings)
    throw std::invalid_argument("--max-model-len " + std::to_string(max_model_len) +
                                " exceeds the model's context length of " +
                                std::to_string(c.max_position_embeddings) + " tokens");

  // Dtypes: kv_cache_dtype everywhere except the skip layers, which stay bf16.
  const DType dtype = parse_kv_cache_dtype(cache.kv_cache_dtype);
  // --kv-cache-rotation hadamard: every layer (skip layers too: one mode per cache).
  const bool rotate = parse_kv_cache_rotation(cache.kv_cache_rotation, hd);
  out.layers.resize(static_cast<size_t>(L));
  for (int64_t l = 0; l < L; ++l) {
    out.layers[l].dtype = dtype;
    out.layers[l].sliding_window = c.layer_sliding_window.at(l);
    out.layers[l].hadamard_rotation = rotate;
  }
  if (rotate && !dtype_is_fp8(dtype))
    out.warnings.push_back("note: --kv-cache-rotation hadamard with --kv-cache-dtype " +
                           cache.kv_cache_dtype + " changes nothing but rounding (it only "
                           "helps FP8 KV)");
  const KVSkipLayers skip = KVSkipLayers::parse(cache.kv_cache_dtype_skip_layers);
  std::vector<int64_t> windows;
  for (const KVLayerSpec& s : out.layers) windows.push_back(s.sliding_window);
  for (int64_t l : skip.resolve(windows)) out.layers[l].dtype = DType::BF16;
  if (skip.sliding_window &&
      std::none_of(windows.begin(), windows.end(), [](int64_t w) { return w > 0; }))
    out.warnings.push_back("--kv-cache-dtype-skip-layers sliding_window: this model has no "
                           "sliding-window layers; nothing skipped");

  // fp8_per_token_head: scales computed per token and KV head on write; no other source.
  const bool per_token_head = cache.kv_cache_dtype == kPerTokenHeadDtype;
  if (per_token_head && !cache.kv_scales_path.empty())
    throw std::invalid_argument(
        "--kv-scales-path cannot be used with --kv-cache-dtype fp8_per_token_head: its scales "
        "are computed per token and KV head when K/V are written (drop one of the two)");
  // Only the CPU kernels read per-token-head scales (kernels/cpu/paged_attention.cpp).
  if (per_token_head && model.backend().name().rfind("cpu", 0) != 0)
    throw std::invalid_argument("--kv-cache-dtype fp8_per_token_head runs on the CPU backend "
                                "only for now (this model is on " + model.backend().name() +
                                "); use --device cpu, or fp8_e4m3 with calibrated scales");
  if (per_token_head && cache.calculate_kv_scales)
    out.warnings.push_back("--calculate-kv-scales has no effect with --kv-cache-dtype "
                           "fp8_per_token_head (scales are computed per token and KV head)");

  // Scales for FP8 layers, first source that has them.
  std::vector<LayerKVScales> from_file;
  if (!cache.kv_scales_path.empty())
    from_file = load_kv_scales_file(cache.kv_scales_path, L, nkv,
                                    dtype_is_fp8(dtype) ? std::optional<DType>(dtype)
                                                        : std::nullopt)
                    .layers;
  std::vector<std::optional<LayerKVScales>> from_ckpt(static_cast<size_t>(L));
  if (loaded.hf) from_ckpt = load_checkpoint_kv_scales(*loaded.hf, model.quant_config(), L, nkv);
  std::vector<LayerKVScales> calculated;
  DenseKVCache calibration_kv;  // the calculation's K/V (the clipping check reuses them)
  int64_t calibration_tokens = 0;
  std::vector<int64_t> unit_layers;
  for (int64_t l = 0; l < L; ++l) {
    KVLayerSpec& s = out.layers[l];
    if (!dtype_is_fp8(s.dtype)) continue;
    if (per_token_head) {
      s.per_token_head = true;
      s.k_scale = s.v_scale = std::vector<float>(static_cast<size_t>(nkv), 1.0f);  // unused
      s.scale_source = from_ckpt[l] ? "per-token-head (checkpoint scales not used)"
                                    : "per-token-head";
      continue;
    }
    if (!from_file.empty()) {
      s.k_scale = from_file[l].k_scale, s.v_scale = from_file[l].v_scale;
      s.scale_source = "file";
    } else if (from_ckpt[l]) {
      s.k_scale = from_ckpt[l]->k_scale, s.v_scale = from_ckpt[l]->v_scale;
      s.scale_source = "checkpoint";
    } else if (cache.calculate_kv_scales) {
      if (calculated.empty()) {
        // The calibration text through the model's own (FP8-weight) forward as one sequence
        // over an FP32 cache (the K/V exactly as computed); amax of the
        // K (after RoPE) and V it produces, per layer and KV head. Cut at the model's context,
        // not at max_model_len: the scales must not depend on the serving limit.
        std::vector<int32_t> ids = kv_calibration_ids(*loaded.tokenizer, c.vocab_size);
        if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings)
          ids.resize(static_cast<size_t>(c.max_position_embeddings));
        // Every tensor-parallel rank runs its heads; the K/V are reassembled whole.
        const int64_t n_ids = static_cast<int64_t>(ids.size());
        std::vector<SequenceKVCache> seq = new_sequence_caches(loaded, n_ids, rotate);
        (void)forward_sequence(loaded, seq, ids.data(), n_ids, 0, false);
        calibration_kv = download_sequence_kv(loaded, seq);
        calibration_tokens = n_ids;
        calculated = calculate_kv_scales(calibration_kv, n_ids, L, nkv, hd, dtype,
                                         /*per_head=*/true);
      }
      s.k_scale = calculated[l].k_scale, s.v_scale = calculated[l].v_scale;
      s.scale_source = "calculated";
    } else {
      s.k_scale = {1.0f}, s.v_scale = {1.0f};
      s.scale_source = "unit";
      unit_layers.push_back(l);
    }
    s.k_scale = per_head(s.k_scale, nkv);
    s.v_scale = per_head(s.v_scale, nkv);
    check_scales(s.k_scale, "k_scale", l, s.scale_source);
    check_scales(s.v_scale, "v_scale", l, s.scale_source);
  }
  // Static K scales read from a file or the checkpoint carry no rotation marker: they describe
  // unrotated K unless `octet calibrate --kv-cache-rotation hadamard` made them.
  if (rotate) {
    std::string loaded_from;
    for (const KVLayerSpec& s : out.layers)
      if (dtype_is_fp8(s.dtype) && !s.per_token_head &&
          (s.scale_source == "file" || s.scale_source == "checkpoint")) {
        loaded_from = s.scale_source == "file" ? "--kv-scales-path " + cache.kv_scales_path
                                               : "the checkpoint";
        break;
      }
    if (!loaded_from.empty())
      out.warnings.push_back(kv_rotation_scales_warning(loaded_from));
  }
  if (!unit_layers.empty()) {
    std::string names;
    for (int64_t l : unit_layers) names += (names.empty() ? "" : ",") + std::to_string(l);
    out.warnings.push_back(
        "WARNING: no KV cache scales for FP8 layers " + names +
        " (no --kv-scales-path, none in the checkpoint, no --calculate-kv-scales): using "
        "k_scale = v_scale = 1.0. K/V beyond +-" +
        std::string(dtype == DType::FP8_E5M2 ? "57344" : "448") +
        " saturate and small values lose precision; pass --calculate-kv-scales");
  }

  // The start-up clipping check (engine/kv_saturation.h): every static FP8 scale against the
  // K/V of a start-up pass, the calculation's when it ran, else a short one (kv_check_ids).
  // Not for dummy (random) weights: their K/V say nothing about a real model's.
  if (loaded.load_format != "dummy" &&
      std::any_of(out.layers.begin(), out.layers.end(), [](const KVLayerSpec& s) {
        return dtype_is_fp8(s.dtype) && !s.per_token_head;
      })) {
    std::string what = "the --calculate-kv-scales pass (" +
                       std::to_string(calibration_tokens) + " tokens)";
    if (calibration_tokens == 0) {
      std::vector<int32_t> ids = kv_check_ids(*loaded.tokenizer, c.vocab_size);
      if (static_cast<int64_t>(ids.size()) > c.max_position_embeddings)
        ids.resize(static_cast<size_t>(c.max_position_embeddings));
      calibration_tokens = static_cast<int64_t>(ids.size());
      std::vector<SequenceKVCache> seq = new_sequence_caches(loaded, calibration_tokens, rotate);
      (void)forward_sequence(loaded, seq, ids.data(), calibration_tokens, 0, false);
      calibration_kv = download_sequence_kv(loaded, seq);
      what = "the start-up clipping check (" + std::to_string(calibration_tokens) +
             " tokens of built-in text and special tokens)";
    }
    const std::vector<KVScaleClip> clips =
        find_clipping_kv_scales(calibration_kv, calibration_tokens, out.layers, nkv, hd);
    for (std::string& w : kv_clip_warnings(clips, out.layers, what))
      out.warnings.push_back(std::move(w));
  }

  // Budget -> blocks. The null block is allocated on top of the budget.
  out.layout = hybrid_kv_cache_layout(out.layers, out.block_size, nkv, hd,
                                      !cache.disable_hybrid_kv_cache_manager);
  out.bytes_per_block = PagedKVCache::bytes_per_block(out.layout, nkv, hd, out.layers);
  MemoryFigures& mem = out.memory;
  const int world = loaded.world_size();
  for (int r = 0; r < world; ++r) mem.weights_bytes += model_weight_bytes(loaded.rank_model(r));
  const int64_t activations_rank =
      activation_bytes(model, scheduler.max_num_batched_tokens, scheduler.max_num_seqs);
  mem.activation_bytes = activations_rank * world;  // every rank's shard is the same size
  for (const KVCacheGroup& g : out.layout.groups)
    mem.kv_bytes_per_token += out.bytes_per_block / g.block_size;
  // Blocks one max_model_len sequence holds at most (chunks of max_num_batched_tokens).
  const int64_t chunk = scheduler.enable_chunked_prefill ? scheduler.max_num_batched_tokens
                                                         : out.max_model_len;
  const int64_t blocks_per_seq = blocks_held(out.layout, out.max_model_len, chunk);
  // CUDA graph pools: an estimate per captured decode size (engine/kv_budget.h), on a backend
  // that captures graphs, unless --enforce-eager. Every rank holds the same set.
  mem.graphs_supported = model.backend().supports_graphs();
  const std::vector<int64_t> sizes =
      captured_graph_sizes(!cuda_graphs, mem.graphs_supported, scheduler.max_num_seqs);
  int64_t graphs_rank = 0;
  if (!sizes.empty()) {
    mem.num_graph_sizes = static_cast<int64_t>(sizes.size());
    graphs_rank =
        estimate_graph_memory(graph_memory_shape(model, sizes, out.max_model_len, out.block_size))
            .total();
    mem.graph_reserve_bytes = graphs_rank * world;
  }
  // Every rank's workspace, reserved now, before the KV pool: no op allocates scratch later.
  mem.on_device = on_device(loaded);
  const WorkspaceShape ws_shape =
      workspace_shape(model, scheduler.max_num_batched_tokens, scheduler.max_num_seqs,
                      out.max_model_len, out.block_size, sizes.empty() ? 0 : sizes.back());
  std::vector<RankMemory> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    Backend& be = loaded.rank_model(r).backend();
    RankMemory& rm = ranks[r];
    try {
      rm.parts.workspace = be.reserve_workspace(ws_shape);
    } catch (const std::bad_alloc&) {
      // reserve_workspace freed what had grown before: the free figure is what it could use.
      const WorkspaceBytes want = be.workspace_bytes(ws_shape);
      const DeviceMemoryInfo info = be.memory_info();
      throw std::invalid_argument(
          "rank " + std::to_string(r) + " (" + be.name() + "): the workspace of " +
          format_bytes(want.total()) + " (GEMM scratch " + format_bytes(want.gemm_scratch) +
          ", attention partials " + format_bytes(want.attention_partials) + ", attention plan " +
          format_bytes(want.attention_plan) +
          (want.attention_prefill > 0
               ? ", attention prefill " + format_bytes(want.attention_prefill)
               : std::string()) +
          ") does not fit the " +
          format_bytes(info.free_bytes) + " free of " + format_bytes(info.total_bytes) +
          " after the weights (" + format_bytes(model_weight_bytes(loaded.rank_model(r))) +
          "); lower --max-num-batched-tokens, --max-num-seqs or --max-model-len");
    }
    if (!mem.on_device) continue;
    const DeviceMemoryInfo info = be.memory_info();
    rm.parts.total_bytes = info.total_bytes;
    rm.parts.free_bytes = info.free_bytes;
    rm.parts.weights_bytes = model_weight_bytes(loaded.rank_model(r));
    rm.parts.activation_bytes = activations_rank;
    rm.parts.graph_pool_bytes = graphs_rank;
    const TensorParallelShard& sh = loaded.rank_model(r).shard();
    rm.block_bytes = PagedKVCache::bytes_per_block(out.layout, sh.num_kv_heads, hd, out.layers);
  }
  // The rank with the least KV room sets the blocks (every rank holds the same blocks).
  const auto tightest = [&](auto room) {
    size_t best = 0;
    for (size_t r = 1; r < ranks.size(); ++r)
      if (room(ranks[r]) < room(ranks[best])) best = r;
    return best;
  };
  double fraction = 0;
  int64_t budget = cache.kv_cache_memory_bytes;
  if (budget > 0) {
    mem.budget_source = "--kv-cache-memory-bytes";
  } else if (cache.num_kv_blocks > 0) {
    mem.budget_source = "--num-kv-blocks";
  } else if (fraction = kv_memory_fraction(cache, loaded); fraction > 0 && mem.on_device) {
    for (RankMemory& rm : ranks) {
      rm.parts.gpu_memory_utilization = fraction;
      rm.budget = device_kv_budget(rm.parts);
    }
    const RankMemory& t = ranks[tightest([](const RankMemory& rm) {
      return rm.budget.kv_budget_bytes / rm.block_bytes;
    })];
    mem.device_memory_bytes = t.parts.total_bytes * world;
    std::ostringstream src;
    src << "--gpu-memory-utilization " << fraction << " x " << format_bytes(t.parts.total_bytes)
        << (world > 1 ? " per GPU" : "") << " - every other part";
    mem.budget_source = src.str();
    const int64_t blocks = std::max<int64_t>(t.budget.kv_budget_bytes, 0) / t.block_bytes;
    budget = blocks * out.bytes_per_block;
    if (blocks < blocks_per_seq) {
      MemoryFigures shown = mem;
      shown.device_total_bytes = t.parts.total_bytes;
      shown.device_cap_bytes = t.budget.cap_bytes;
      shown.workspace = t.parts.workspace;
      shown.context_other_bytes = t.budget.context_other_bytes;
      shown.kv_pool_bytes = 0;
      shown.free_left_bytes = t.parts.free_bytes - activations_rank - graphs_rank;
      const bool graphs = graphs_rank > 0;
      throw std::invalid_argument(
          "--gpu-memory-utilization " + std::to_string(fraction) + " leaves " +
          format_bytes(t.budget.kv_budget_bytes) + " for the KV cache" +
          (world > 1 ? " per GPU" : "") + ", less than one sequence of max_model_len " +
          std::to_string(out.max_model_len) + " tokens (" +
          format_bytes(blocks_per_seq * t.block_bytes) + "); memory per GPU: " +
          device_parts_text(shown, fraction, t.parts.weights_bytes, activations_rank,
                            graphs_rank, mem.num_graph_sizes, mem.graphs_supported) +
          ". Raise --gpu-memory-utilization, lower --max-num-batched-tokens, --max-num-seqs" +
          (graphs ? ", pass --enforce-eager" : "") +
          " or --max-model-len, or give --kv-cache-memory-bytes");
    }
  } else if (fraction > 0) {  // the CPU: a fraction of the host's memory
    mem.device_memory_bytes = host_memory_bytes(loaded, mem.weights_bytes);
    KVBudgetInputs in;
    in.device_memory_bytes = mem.device_memory_bytes;
    in.gpu_memory_utilization = fraction;
    in.weights_bytes = mem.weights_bytes;
    in.activation_bytes = mem.activation_bytes;
    in.graph_reserve_bytes = mem.graph_reserve_bytes;
    const int64_t left = kv_budget_bytes(in);
    const auto usable = static_cast<int64_t>(fraction * static_cast<double>(mem.device_memory_bytes));
    std::ostringstream src;
    src << "--gpu-memory-utilization " << fraction << " x "
        << format_bytes(mem.device_memory_bytes) << " - weights - activations"
        << (mem.graph_reserve_bytes > 0 ? " - CUDA graphs" : "");
    mem.budget_source = src.str();
    if (left < out.bytes_per_block) {
      const bool graphs = mem.graph_reserve_bytes > 0;
      throw std::invalid_argument(
          "--gpu-memory-utilization " + std::to_string(fraction) + " of " +
          format_bytes(mem.device_memory_bytes) + " (" + format_bytes(usable) +
          ") leaves no room for the KV cache after the weights (" +
          format_bytes(mem.weights_bytes) + (graphs ? "), activations (" : ") and activations (") +
          format_bytes(mem.activation_bytes) +
          (graphs ? ") and CUDA graphs (" + format_bytes(mem.graph_reserve_bytes) : "") +
          "); raise it, lower --max-num-batched-tokens" +
          (graphs ? ", lower --max-num-seqs or pass --enforce-eager" : "") +
          ", or give --kv-cache-memory-bytes");
    }
    budget = left;
  } else {
    budget = CacheConfig::kDefaultMemoryBytes;
    mem.budget_source = "default 1 GiB";
  }
  if (cache.kv_cache_memory_bytes == 0 && cache.num_kv_blocks > 0) {
    if (cache.num_kv_blocks > std::numeric_limits<int64_t>::max() / out.bytes_per_block - 1)
      throw std::invalid_argument("--num-kv-blocks " + std::to_string(cache.num_kv_blocks) +
                                  " blocks of " + std::to_string(out.bytes_per_block) +
                                  " bytes overflow 64-bit byte counts");
    out.num_usable_blocks = cache.num_kv_blocks;
    budget = cache.num_kv_blocks * out.bytes_per_block;
  } else {
    out.num_usable_blocks = budget / out.bytes_per_block;
  }
  out.budget_bytes = out.num_usable_blocks * out.bytes_per_block;
  // Tokens the pool holds when every group holds them all (no window has passed them).
  const int64_t capacity_tokens = out.budget_bytes / std::max<int64_t>(mem.kv_bytes_per_token, 1);
  if (out.num_usable_blocks < blocks_per_seq)
    throw std::invalid_argument(
        "the KV cache budget of " + std::to_string(budget) + " bytes holds " +
        std::to_string(out.num_usable_blocks) + " blocks (" + std::to_string(capacity_tokens) +
        " tokens), fewer than one sequence of max_model_len " +
        std::to_string(out.max_model_len) + " tokens (" + std::to_string(blocks_per_seq) +
        " blocks; budget from " + mem.budget_source +
        "); raise --kv-cache-memory-bytes / --num-kv-blocks / --gpu-memory-utilization or "
        "lower --max-model-len" +
        (out.layout.hybrid()
             ? std::string(" or --max-num-batched-tokens (a sliding-window layer holds its "
                           "window plus one prefill chunk)")
             : std::string()));

  // The pool adds the null block; everything is allocated and zeroed at start-up. On the CPU
  // it comes from the host's memory; on a device from each rank's free memory, less the
  // activations and graphs still to come (the host's memory does not bound a device's pool).
  if (mem.on_device) {
    const size_t r = tightest([&](const RankMemory& rm) {
      return rm.parts.free_bytes - activations_rank - graphs_rank -
             (out.num_usable_blocks + 1) * rm.block_bytes;
    });
    const RankMemory& t = ranks[r];
    const int64_t room = t.parts.free_bytes - activations_rank - graphs_rank;
    mem.device_total_bytes = t.parts.total_bytes;
    mem.device_cap_bytes = t.budget.cap_bytes;
    mem.workspace = t.parts.workspace;
    mem.context_other_bytes = std::max<int64_t>(
        0, t.parts.total_bytes - t.parts.free_bytes - t.parts.weights_bytes -
               t.parts.workspace.total());
    mem.kv_pool_bytes = (out.num_usable_blocks + 1) * t.block_bytes;
    mem.free_left_bytes = room - mem.kv_pool_bytes;
    if (out.num_usable_blocks + 1 > std::max<int64_t>(room, 0) / t.block_bytes)
      throw std::invalid_argument(
          "the KV cache of " + std::to_string(out.num_usable_blocks) + " + 1 blocks (" +
          format_bytes(mem.kv_pool_bytes) + (world > 1 ? " per GPU" : "") +
          ") needs more than the " + format_bytes(std::max<int64_t>(room, 0)) +
          " of device memory left after the weights, workspace, activations and CUDA graphs "
          "(rank " + std::to_string(r) + ": " +
          device_parts_text(mem, 0, t.parts.weights_bytes, activations_rank, graphs_rank,
                            mem.num_graph_sizes, mem.graphs_supported) +
          "); lower --kv-cache-memory-bytes / --num-kv-blocks");
  } else {
    const int64_t available = available_host_memory_bytes();
    if (out.num_usable_blocks + 1 > available / out.bytes_per_block)  // no overflow
      throw std::invalid_argument(
          "the KV cache of " + std::to_string(out.num_usable_blocks) + " + 1 blocks of " +
          std::to_string(out.bytes_per_block) + " bytes needs more than the " +
          std::to_string(available) + " bytes of memory available now (budget from " +
          mem.budget_source + "); lower --gpu-memory-utilization, --kv-cache-memory-bytes or "
          "--num-kv-blocks");
  }

  uint64_t salt = 1469598103934665603ull;
  salt = fnv1a(salt, &out.block_size, sizeof(out.block_size));
  for (const KVLayerSpec& s : out.layers) {
    salt = fnv1a(salt, &s.dtype, sizeof(s.dtype));
    salt = fnv1a(salt, &s.per_token_head, sizeof(s.per_token_head));
    if (s.hadamard_rotation) salt = fnv1a(salt, "hadamard", 8);
    salt = fnv1a(salt, s.k_scale.data(), s.k_scale.size() * sizeof(float));
    salt = fnv1a(salt, s.v_scale.data(), s.v_scale.size() * sizeof(float));
  }
  out.cache_salt = salt;

  // Sequences of max_model_len tokens decoding at once (window groups hold their window).
  mem.max_num_seqs_fit = out.num_usable_blocks / blocks_held(out.layout, out.max_model_len, 1);
  mem.max_num_seqs_fit_full =
      out.layout.hybrid() ? capacity_tokens / out.max_model_len : mem.max_num_seqs_fit;
  {
    std::ostringstream line;
    if (mem.on_device) {
      line << "memory " << (world > 1 ? "per GPU (" + std::to_string(world) + " ranks)" : "per GPU")
           << ": "
           << device_parts_text(mem, fraction, mem.weights_bytes / world, activations_rank,
                                graphs_rank, mem.num_graph_sizes, mem.graphs_supported)
           << "; ";
    } else {
      line << "memory: weights " << format_bytes(mem.weights_bytes);
      if (world > 1) line << " over " << world << " ranks";
      line << ", activations " << format_bytes(mem.activation_bytes) << ", ";
    }
    line << "KV " << format_bytes(mem.kv_bytes_per_token) << " per token ("
         << cache.kv_cache_dtype << (cache.kv_cache_dtype == "auto" ? " = bf16" : "")
         << "), KV budget " << format_bytes(out.budget_bytes) << " (" << mem.budget_source
         << "), ";
    if (!mem.on_device && mem.graph_reserve_bytes > 0)
      line << "CUDA graphs " << format_bytes(mem.graph_reserve_bytes) << " reserved ("
           << mem.num_graph_sizes << " decode sizes, estimate), ";
    else if (!mem.on_device && mem.graphs_supported)
      line << "CUDA graphs off (--enforce-eager), ";
    line << mem.max_num_seqs_fit << " sequences of " << out.max_model_len
         << " tokens fit in the KV budget";
    if (out.layout.hybrid())
      line << " (" << mem.max_num_seqs_fit_full
           << " if sliding-window layers kept the whole context)";
    mem.line = line.str();
  }

  std::ostringstream os;
  os << mem.line << "\n";
  const int64_t bytes_per_token = mem.kv_bytes_per_token;
  os << "KV cache: kv_cache_dtype " << cache.kv_cache_dtype << ", block_size " << out.block_size
     << ", " << bytes_per_token << " bytes per token\n";
  if (out.layout.hybrid()) {
    os << "KV cache groups:";
    for (size_t g = 0; g < out.layout.groups.size(); ++g) {
      const KVCacheGroup& grp = out.layout.groups[g];
      os << (g ? ";" : "") << " " << g << ": window " << grp.sliding_window << ", block_size "
         << grp.block_size << ", layers";
      for (size_t j = 0; j < grp.layers.size(); ++j) os << (j ? "," : " ") << grp.layers[j];
    }
    os << (out.layout.note.empty() ? "" : " (" + out.layout.note + ")") << "\n";
  } else if (!out.layout.note.empty()) {
    os << "KV cache: " << out.layout.note << "\n";
  }
  os
     << "KV cache: budget " << out.budget_bytes << " bytes = " << out.num_usable_blocks
     << " blocks = " << capacity_tokens << " tokens = " << capacity_tokens / out.max_model_len
     << " sequences of max_model_len " << out.max_model_len;
  if (out.layout.hybrid())
    os << " if every layer kept the whole context; " << mem.max_num_seqs_fit
       << " with the window groups' passed blocks freed";
  os << "\n";
  os << "layer  dtype     window  k_scale (min..max)   v_scale (min..max)   source\n";
  for (int64_t l = 0; l < L; ++l) {
    const KVLayerSpec& s = out.layers[l];
    const bool dyn = s.per_token_head;  // per (token, head): no fixed scale to show
    os << std::left << std::setw(7) << l << std::setw(10) << kv_cache_dtype_name(s.dtype)
       << std::setw(8) << s.sliding_window << std::setw(20)
       << (dyn ? "dynamic" : format_scales(s.k_scale)) << " " << std::setw(20)
       << (dyn ? "dynamic" : format_scales(s.v_scale)) << " " << s.scale_source << "\n";
  }
  out.report = os.str();
  return out;
}

}  // namespace octet
