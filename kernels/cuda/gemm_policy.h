// The host-side policy of the cuBLASLt GEMMs (gemm.h, gemm.cu): which calls cuBLASLt may take,
// the key its algorithm is cached under, which of cuBLASLt's candidate configurations is
// acceptable, and the text of the simt_gemm fallback warning. Plain C++17 without CUDA types, so
// tests/kernels/test_gemm_policy.cpp checks it in every CI build, GPU or not.
//
// Batch invariance (octet's default promise: a row's output bits do not depend on how many rows
// share the call): nothing here takes m into account. The key is (type, n, k, ld); whether a
// call may run on cuBLASLt depends on the key and the operands' alignment; the one algorithm of a
// key (LtGemm picks it per (type, n, k) and checks it per ld) is chosen once, from facts gathered
// at fixed probe row counts (lt_probe_rows), not at the m of the first call. A key with no
// acceptable algorithm runs on simt_gemm for every m.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace octet::cuda_kernels {

/// Element types of the two operands.
enum class GemmInput : uint8_t { F32, BF16, E4M3 };

/// Bytes of one element of `t`.
inline int64_t gemm_elem_bytes(GemmInput t) {
  return t == GemmInput::F32 ? 4 : t == GemmInput::BF16 ? 2 : 1;
}

/// "F32", "BF16" or "FP8 E4M3", for log lines.
inline const char* gemm_input_name(GemmInput t) {
  return t == GemmInput::F32 ? "F32" : t == GemmInput::BF16 ? "BF16" : "FP8 E4M3";
}

/// One GEMM as LtGemm::matmul receives it: d[m, n] (row stride n, FP32) = act[m, k] (row stride
/// ld) . w[n, k]^T (row stride ld); act, w, d are the operands' device addresses.
struct GemmCall {
  GemmInput type = GemmInput::F32;
  int64_t m = 0, n = 0, k = 0, ld = 0;
  uintptr_t act = 0, w = 0, d = 0;
};

/// The key of the algorithm cache: everything the choice of algorithm depends on. Never m.
struct LtGemmKey {
  GemmInput type = GemmInput::F32;
  int64_t n = 0, k = 0, ld = 0;
  bool operator<(const LtGemmKey& o) const {
    return std::make_tuple(type, n, k, ld) < std::make_tuple(o.type, o.n, o.k, o.ld);
  }
  bool operator==(const LtGemmKey& o) const {
    return type == o.type && n == o.n && k == o.k && ld == o.ld;
  }
};

/// The key of a call.
inline LtGemmKey lt_gemm_key(const GemmCall& c) { return LtGemmKey{c.type, c.n, c.k, c.ld}; }

/// Why a call cannot run on cuBLASLt (None: it can).
enum class LtRefusal : uint8_t {
  None,
  Empty,          // n or k not positive
  NoFp8,          // FP8 E4M3 inputs on a device before sm_89
  KNotMultiple,   // k not a multiple of 16 bytes of elements (16 FP8, 8 BF16, 4 F32)
  LdNotMultiple,  // ld not such a multiple
  NNotMultiple4,  // n % 4 != 0 (D's rows of n floats are then not 16-byte multiples)
  Misaligned,     // act, w or d not 16-byte aligned
};

/// Elements in 16 bytes of `t`: k and ld must be multiples of it (cuBLASLt's FP8 rule, kept for
/// every type so that every row of act and w starts 16-byte aligned).
inline int64_t lt_k_multiple(GemmInput t) { return 16 / gemm_elem_bytes(t); }

/// Whether cuBLASLt may take `c`, from (type, n, k, ld) and the operands' 16-byte alignment: the
/// same answer for every m (an empty call, m <= 0, queues nothing on either path).
inline LtRefusal lt_refusal(const GemmCall& c, bool has_fp8) {
  if (c.n <= 0 || c.k <= 0) return LtRefusal::Empty;
  if (c.type == GemmInput::E4M3 && !has_fp8) return LtRefusal::NoFp8;
  const int64_t multiple = lt_k_multiple(c.type);
  if (c.k % multiple != 0) return LtRefusal::KNotMultiple;
  if (c.ld < c.k || c.ld % multiple != 0) return LtRefusal::LdNotMultiple;
  if (c.n % 4 != 0) return LtRefusal::NNotMultiple4;
  if (c.act % 16 != 0 || c.w % 16 != 0 || c.d % 16 != 0) return LtRefusal::Misaligned;
  return LtRefusal::None;
}

/// Words for a refusal, for the fallback warning.
inline const char* lt_refusal_text(LtRefusal r) {
  switch (r) {
    case LtRefusal::None: return "none";
    case LtRefusal::Empty: return "empty shape";
    case LtRefusal::NoFp8: return "no FP8 tensor cores before sm_89";
    case LtRefusal::KNotMultiple: return "k is not a multiple of 16 bytes of elements";
    case LtRefusal::LdNotMultiple: return "ld is not a multiple of 16 bytes of elements";
    case LtRefusal::NNotMultiple4: return "n is not a multiple of 4";
    case LtRefusal::Misaligned: return "an operand is not 16-byte aligned";
  }
  return "?";
}

/// Rows per cuBLASLt call the algorithm is checked for (LtGemm's max_rows default). A call of
/// more rows runs as consecutive chunks of at most this many rows, each with the same algorithm:
/// rows are independent, so the bits do not change.
inline constexpr int64_t kLtDefaultMaxRows = 16384;

/// The m the heuristic is asked for: decode batches and prefill chunks both run the one algorithm
/// chosen for it, so it only sets the tile (speed), never which rows share a sum.
inline constexpr int64_t kLtHeuristicRows = 128;

/// Candidates asked of the heuristic per key.
inline constexpr int kLtCandidates = 8;

/// Workspace an accepted configuration may use: none. Split-K (CUBLASLT_ALGO_CONFIG_SPLITK_NUM
/// > 1) and stream-K style decompositions, whose k split may follow the problem size and the SM
/// count, keep partial sums or tile counters in the workspace (cuBLASLt docs,
/// cublasLtReductionScheme_t: "INPLACE ... counters (in workspace)", "COMPUTE_TYPE / OUTPUT_TYPE
/// ... stored in the workspace"); with no workspace every output tile's k loop runs whole in one
/// CTA, in k order, whatever m.
inline constexpr size_t kLtWorkspaceBytes = 0;

/// The row counts a candidate must pass cublasLtMatmulAlgoCheck at: 1, a few odd and tile-edge
/// sizes, and max_rows (those <= max_rows, ascending, no repeats).
inline std::vector<int64_t> lt_probe_rows(int64_t max_rows) {
  std::vector<int64_t> rows;
  for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{16}, int64_t{17},
                    int64_t{64}, kLtHeuristicRows, int64_t{300}, max_rows})
    if (m >= 1 && m <= max_rows && (rows.empty() || m > rows.back())) rows.push_back(m);
  return rows;
}

/// What LtGemm learns of one heuristic candidate.
struct LtCandidate {
  bool heuristic_ok = false;      // cublasLtMatmulHeuristicResult_t::state == SUCCESS
  int32_t split_k_num = 1;        // CUBLASLT_ALGO_CONFIG_SPLITK_NUM
  uint32_t reduction_scheme = 0;  // CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME (0: NONE)
  bool config_read = false;       // both config attributes were read back
  bool accepted_at_probes = false;  // cublasLtMatmulAlgoCheck SUCCESS at every lt_probe_rows
  size_t workspace_bytes = 0;     // the most the heuristic or any probe asked for
};

/// Why a candidate is not acceptable (None: it is).
enum class LtReject : uint8_t { None, Heuristic, Config, SplitK, Reduction, Workspace, Probe };

/// The acceptance rule: a valid heuristic result whose configuration reads back as one k split
/// with no reduction scheme, needs no more workspace than kLtWorkspaceBytes, and passes
/// cublasLtMatmulAlgoCheck at every probe row count.
inline LtReject lt_reject(const LtCandidate& c) {
  if (!c.heuristic_ok) return LtReject::Heuristic;
  if (!c.config_read) return LtReject::Config;
  if (c.split_k_num != 1) return LtReject::SplitK;
  if (c.reduction_scheme != 0) return LtReject::Reduction;
  if (c.workspace_bytes > kLtWorkspaceBytes) return LtReject::Workspace;
  if (!c.accepted_at_probes) return LtReject::Probe;
  return LtReject::None;
}

/// The index of the first acceptable candidate (the heuristic's order), or -1: none.
inline int lt_choose(const std::vector<LtCandidate>& candidates) {
  for (size_t i = 0; i < candidates.size(); ++i)
    if (lt_reject(candidates[i]) == LtReject::None) return static_cast<int>(i);
  return -1;
}

/// The prefix of every simt_gemm fallback warning (scripts/gpu_check greps it).
inline constexpr const char* kSimtFallbackWarning = "octet: warning: simt_gemm fallback";

/// The one-line warning for a key that runs on simt_gemm: the prefix, the cost, the shape, why.
inline std::string lt_fallback_warning(const LtGemmKey& key, const std::string& why) {
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s (CUDA cores, 10-100x slower than cuBLASLt): %s GEMM n=%lld k=%lld ld=%lld: %s",
                kSimtFallbackWarning, gemm_input_name(key.type), static_cast<long long>(key.n),
                static_cast<long long>(key.k), static_cast<long long>(key.ld), why.c_str());
  return line;
}

/// The algorithm cache: one Plan (or none: simt_gemm) per key, made once by `make(key)` on the
/// key's first call. Plan is LtGemm's algorithm and descriptors (gemm.cu); tests use a stand-in.
template <class Plan>
class LtPlanCache {
 public:
  /// The plan of `key`, made by make(key) -> std::unique_ptr<Plan> on its first call; nullptr:
  /// the key runs on simt_gemm.
  template <class Make>
  Plan* get(const LtGemmKey& key, Make&& make) {
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make(key)).first;
    return it->second.get();
  }
  size_t size() const { return plans_.size(); }
  /// Keys with a plan.
  size_t usable() const {
    size_t n = 0;
    for (const auto& kv : plans_) n += kv.second != nullptr ? 1 : 0;
    return n;
  }

 private:
  std::map<LtGemmKey, std::unique_ptr<Plan>> plans_;
};

/// The path of one call: its key's plan, or nullptr for simt_gemm (refused, or no acceptable
/// algorithm). m is never consulted: every m of a key and alignment takes the same path.
template <class Plan, class Make>
Plan* lt_route(LtPlanCache<Plan>& cache, const GemmCall& c, bool has_fp8, Make&& make) {
  if (lt_refusal(c, has_fp8) != LtRefusal::None) return nullptr;
  return cache.get(lt_gemm_key(c), make);
}

}  // namespace octet::cuda_kernels
