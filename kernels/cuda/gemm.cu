// GEMMs of the CUDA backend (gemm.h): the tiled CUDA-core fallback and the cuBLASLt wrapper.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.h"

namespace octet::cuda_kernels {

namespace cm = octet::cuda_math;

namespace {

// ---- simt_gemm -------------------------------------------------------------------------------
// Block tile kBM rows x kBN outputs, k staged kBK at a time through shared memory. Thread t owns
// output column t % kBN and rows t / kBN + 4 r (r < 8). Tails are zero-filled (a zero product
// leaves an FMA chain unchanged) and never stored.
constexpr int kBM = 32, kBN = 64, kBK = 32, kSimtThreads = 256;
constexpr int kRowsPerThread = kBM / (kSimtThreads / kBN);  // 8
static_assert(kSimtThreads % kBN == 0 && kBM % (kSimtThreads / kBN) == 0);

template <bool kE4M3>
__device__ __forceinline__ float load_act(const void* p, int64_t i) {
  if constexpr (kE4M3) return cm::e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <GemmInput W>
__device__ __forceinline__ float load_w(const void* p, int64_t i) {
  if constexpr (W == GemmInput::E4M3) return cm::e4m3_to_float(static_cast<const uint8_t*>(p)[i]);
  if constexpr (W == GemmInput::BF16) return cm::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <bool kActE4M3, GemmInput W, SimtOut kOut>
__global__ void __launch_bounds__(kSimtThreads, 1) simt_gemm_kernel(SimtGemmArgs a) {
  __shared__ float a_s[kBM][kBK];
  __shared__ float w_s[kBN][kBK + 1];  // + 1: threads of a warp read different columns
  const int tid = threadIdx.x;
  const int tx = tid % kBN, ty = tid / kBN;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int64_t j = n0 + tx;
  const int64_t kg = a.k / a.k_groups;
  float total[kRowsPerThread];
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) total[r] = 0.0f;
#pragma unroll 1
  for (int64_t g = 0; g < a.k_groups; ++g) {
    const int64_t kb = g * kg, ke = kb + kg;
    float part[kRowsPerThread];
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) part[r] = 0.0f;
#pragma unroll 1
    for (int64_t k0 = kb; k0 < ke; k0 += kBK) {
      __syncthreads();  // the previous tile is consumed
      for (int e = tid; e < kBM * kBK; e += kSimtThreads) {
        const int r = e / kBK, c = e % kBK;
        const int64_t i = m0 + r, t = k0 + c;
        a_s[r][c] = (i < a.m && t < ke) ? load_act<kActE4M3>(a.act, i * a.k + t) : 0.0f;
      }
      for (int e = tid; e < kBN * kBK; e += kSimtThreads) {
        const int r = e / kBK, c = e % kBK;
        const int64_t jj = n0 + r, t = k0 + c;
        w_s[r][c] = (jj < a.n && t < ke) ? load_w<W>(a.w, jj * a.k + t) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int c = 0; c < kBK; ++c) {
        const float wv = w_s[tx][c];
#pragma unroll
        for (int r = 0; r < kRowsPerThread; ++r)
          part[r] = __fmaf_rn(a_s[ty + (kSimtThreads / kBN) * r][c], wv, part[r]);
      }
    }
    float* yg = a.y + g * a.m * a.n;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int64_t i = m0 + ty + (kSimtThreads / kBN) * r;
      if constexpr (kOut == SimtOut::Partials) {
        if (i < a.m && j < a.n) yg[i * a.n + j] = part[r];
      } else {
        total[r] = g == 0 ? part[r] : cm::add_rn(total[r], part[r]);
      }
    }
  }
  if constexpr (kOut != SimtOut::Partials) {
    if (j >= a.n) return;
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const int64_t i = m0 + ty + (kSimtThreads / kBN) * r;
      if (i >= a.m) continue;
      float y;
      if constexpr (kOut == SimtOut::W8A8) {
        y = cm::w8a8_epilogue(total[r], a.a_scale[a.a_per_row ? i : 0],
                              a.w_scale[a.w_per_row ? j : 0], a.bias != nullptr,
                              a.bias != nullptr ? a.bias[j] : 0.0f);
      } else {
        y = a.bias != nullptr ? cm::add_rn(total[r], a.bias[j]) : total[r];
      }
      a.y[i * a.n + j] = y;
    }
  }
}

template <bool kActE4M3, GemmInput W>
void launch_simt(const SimtGemmArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.out_kind) {
    case SimtOut::Plain:
      simt_gemm_kernel<kActE4M3, W, SimtOut::Plain><<<grid, kSimtThreads, 0, stream>>>(a);
      break;
    case SimtOut::W8A8:
      simt_gemm_kernel<kActE4M3, W, SimtOut::W8A8><<<grid, kSimtThreads, 0, stream>>>(a);
      break;
    case SimtOut::Partials:
      simt_gemm_kernel<kActE4M3, W, SimtOut::Partials><<<grid, kSimtThreads, 0, stream>>>(a);
      break;
  }
  OCTET_CUDA_CHECK_LAUNCH();
}

cudaDataType_t cuda_type(GemmInput t) {
  return t == GemmInput::F32 ? CUDA_R_32F : t == GemmInput::BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
}

// Sets the m-dependent dimension (columns) of a layout, m >= 1.
cublasStatus_t set_cols(cublasLtMatrixLayout_t layout, int64_t m) {
  const uint64_t cols = static_cast<uint64_t>(m);
  return cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_COLS, &cols,
                                          sizeof(cols));
}

}  // namespace

void simt_gemm(const SimtGemmArgs& a, cudaStream_t stream) {
  OCTET_CHECK(a.m >= 0 && a.n >= 0 && a.k >= 0 && a.k_groups >= 1 && a.k % a.k_groups == 0,
              "cuda gemm: m ", a.m, " n ", a.n, " k ", a.k, " k_groups ", a.k_groups);
  OCTET_CHECK(a.out_kind != SimtOut::W8A8 || (a.a_scale != nullptr && a.w_scale != nullptr),
              "cuda gemm: W8A8 needs both scales");
  if (a.m == 0 || a.n == 0) return;
  const int64_t gx = (a.n + kBN - 1) / kBN, gy = (a.m + kBM - 1) / kBM;
  OCTET_CHECK(gx < (int64_t{1} << 31) && gy < 65536, "cuda gemm: grid too large: m ", a.m);
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  if (a.act_e4m3) {
    OCTET_CHECK(a.w_type == GemmInput::E4M3, "cuda gemm: E4M3 activations need E4M3 weights");
    launch_simt<true, GemmInput::E4M3>(a, grid, stream);
  } else if (a.w_type == GemmInput::F32) {
    launch_simt<false, GemmInput::F32>(a, grid, stream);
  } else if (a.w_type == GemmInput::BF16) {
    launch_simt<false, GemmInput::BF16>(a, grid, stream);
  } else {
    OCTET_CHECK(false, "cuda gemm: E4M3 weights need E4M3 activations");
  }
}

// The algorithm and descriptors of one key, column-major as cuBLASLt sees the GEMM: D^T [n, m] =
// W [n, k] . act^T [k, m], i.e. A = W stored k x n (ld) transposed, B = act stored k x m (ld),
// D stored n x m (n). a and desc never change; b and d have their columns (m) set per call.
struct LtGemm::Plan {
  cublasLtMatmulAlgo_t algo{};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  int64_t rows = 0;  // the m that b and d describe now
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
  // b and d describe m rows.
  void set_rows(int64_t m) {
    if (m == rows) return;
    OCTET_CUBLAS_CHECK(set_cols(b, m));
    OCTET_CUBLAS_CHECK(set_cols(d, m));
    rows = m;
  }
};

LtGemm::LtGemm(cudaStream_t stream, int sm_major, int sm_minor, int64_t max_rows)
    : stream_(stream), has_fp8_(sm_major * 10 + sm_minor >= 89), max_rows_(max_rows) {
  OCTET_CHECK(max_rows > 0, "LtGemm: max_rows ", max_rows);
  OCTET_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

LtGemm::~LtGemm() {
  plans_ = LtPlanCache<Plan>();  // the descriptors go before the handle
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void LtGemm::warn_once(const LtGemmKey& key, int reason, const std::string& why) {
  uint32_t& seen = warned_[key];
  const uint32_t bit = uint32_t{1} << reason;
  if ((seen & bit) != 0) return;
  seen |= bit;
  std::fprintf(stderr, "%s\n", lt_fallback_warning(key, why).c_str());
}

// The descriptors of `key`, b and d describing min(kLtHeuristicRows, max_rows) rows.
std::unique_ptr<LtGemm::Plan> LtGemm::make_layouts(const LtGemmKey& key) const {
  auto p = std::make_unique<Plan>();
  const cudaDataType_t in = cuda_type(key.type);
  OCTET_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  OCTET_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  OCTET_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (key.type == GemmInput::E4M3) {
    const int8_t fast_accum = 0;  // FP32 accumulation, promoted (no fast FP8 accumulation)
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                      &fast_accum, sizeof(fast_accum)));
  }
  const auto k = static_cast<uint64_t>(key.k), n = static_cast<uint64_t>(key.n);
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, in, k, n, key.ld));
  p->rows = std::min(kLtHeuristicRows, max_rows_);
  const auto m0 = static_cast<uint64_t>(p->rows);
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, in, k, m0, key.ld));
  OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, CUDA_R_32F, n, m0, key.n));
  return p;
}

// cublasLtMatmulAlgoCheck of algo on p's layouts at every probe row count: into f's
// accepted_at_probes and workspace_bytes.
void LtGemm::probe(Plan& p, const cublasLtMatmulAlgo_t& algo, LtCandidate& f) const {
  for (int64_t m : lt_probe_rows(max_rows_)) {
    if (!f.accepted_at_probes) return;
    p.set_rows(m);
    cublasLtMatmulHeuristicResult_t check{};
    f.accepted_at_probes = cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &algo,
                                                   &check) == CUBLAS_STATUS_SUCCESS &&
                           check.state == CUBLAS_STATUS_SUCCESS;
    f.workspace_bytes = std::max(f.workspace_bytes, check.workspaceSize);
  }
}

// The algorithm of (type, n, k), chosen on packed rows (ld = k) so that every ld of these
// dimensions (a weight's k groups, a tensor-parallel shard) runs the same kernel.
const LtGemm::Choice& LtGemm::algo_for(GemmInput type, int64_t n, int64_t k) {
  const auto dims = std::make_tuple(static_cast<int>(type), n, k);
  auto it = algos_.find(dims);
  if (it != algos_.end()) return it->second;
  const LtGemmKey packed{type, n, k, k};
  std::unique_ptr<Plan> p = make_layouts(packed);
  cublasLtMatmulPreference_t pref = nullptr;
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kLtWorkspaceBytes;
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;  // one k sequence per output
  const uint32_t align = 16;
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  }
  cublasLtMatmulHeuristicResult_t results[kLtCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle_, p->desc, p->a, p->b, p->d, p->d, pref, kLtCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) found = 0;  // e.g. NOT_SUPPORTED: no algorithm at all

  // The facts of each candidate; gemm_policy.h decides.
  std::vector<LtCandidate> facts(static_cast<size_t>(std::max(found, 0)));
  for (size_t i = 0; i < facts.size(); ++i) {
    LtCandidate& f = facts[i];
    const cublasLtMatmulAlgo_t& algo = results[i].algo;
    f.heuristic_ok = results[i].state == CUBLAS_STATUS_SUCCESS;
    f.workspace_bytes = results[i].workspaceSize;
    size_t written = 0;
    int32_t splits = 0;
    uint32_t scheme = 0;
    f.config_read = cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                         &splits, sizeof(splits),
                                                         &written) == CUBLAS_STATUS_SUCCESS &&
                    written == sizeof(splits);
    f.config_read = f.config_read &&
                    cublasLtMatmulAlgoConfigGetAttribute(
                        &algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                        &written) == CUBLAS_STATUS_SUCCESS &&
                    written == sizeof(scheme);
    f.split_k_num = splits;
    f.reduction_scheme = scheme;
    f.accepted_at_probes = f.heuristic_ok;
    probe(*p, algo, f);
  }
  Choice choice;
  const int chosen = lt_choose(facts);
  if (chosen >= 0) {
    choice.ok = true;
    choice.algo = results[chosen].algo;
  } else {
    std::string why = "no batch-invariant cuBLASLt algorithm (heuristic status " +
                      std::to_string(static_cast<int>(st)) + ", " + std::to_string(found) +
                      " candidates";
    static const char* const kRejects[] = {"ok",        "invalid",   "config unreadable",
                                           "split-K",   "reduction", "needs workspace",
                                           "refused at a probe m"};
    for (const LtCandidate& f : facts) {
      const LtReject r = lt_reject(f);
      why += std::string(", ") + kRejects[static_cast<int>(r)];
      if (r == LtReject::SplitK) why += " " + std::to_string(f.split_k_num);
      if (r == LtReject::Reduction) why += " " + std::to_string(f.reduction_scheme);
      if (r == LtReject::Workspace) why += " " + std::to_string(f.workspace_bytes) + " B";
    }
    choice.why = why + ")";
  }
  return algos_.emplace(dims, choice).first->second;
}

std::unique_ptr<LtGemm::Plan> LtGemm::make_plan(const LtGemmKey& key) {
  // Once per key (the answer is cached): without a plan every m of this key runs on simt_gemm.
  const Choice& choice = algo_for(key.type, key.n, key.k);
  if (!choice.ok) {
    warn_once(key, 31, choice.why);
    return nullptr;
  }
  std::unique_ptr<Plan> p = make_layouts(key);
  LtCandidate f;
  f.accepted_at_probes = true;
  probe(*p, choice.algo, f);
  if (!f.accepted_at_probes || f.workspace_bytes > kLtWorkspaceBytes) {
    warn_once(key, 30, "the batch-invariant algorithm of this n and k is refused at this ld");
    return nullptr;
  }
  p->algo = choice.algo;
  return p;
}

bool LtGemm::matmul(GemmInput type, const void* act, const void* w, int64_t m, int64_t n,
                    int64_t k, int64_t ld, float* d) {
  if (m <= 0) return false;
  const GemmCall call{type, m, n, k, ld, reinterpret_cast<uintptr_t>(act),
                      reinterpret_cast<uintptr_t>(w), reinterpret_cast<uintptr_t>(d)};
  Plan* plan = lt_route(plans_, call, has_fp8_,
                        [this](const LtGemmKey& key) { return make_plan(key); });
  if (plan == nullptr) {
    const LtRefusal why = lt_refusal(call, has_fp8_);
    if (why != LtRefusal::None && why != LtRefusal::Empty)
      warn_once(lt_gemm_key(call), static_cast<int>(why), lt_refusal_text(why));
    return false;
  }
  const float alpha = 1.0f, beta = 0.0f;
  const auto* a_rows = static_cast<const uint8_t*>(act);
  const int64_t row_bytes = ld * gemm_elem_bytes(type);
  for (int64_t r0 = 0; r0 < m; r0 += max_rows_) {
    const int64_t rows = std::min(m - r0, max_rows_);
    plan->set_rows(rows);
    float* d_rows = d + r0 * n;
    OCTET_CUBLAS_CHECK(cublasLtMatmul(handle_, plan->desc, &alpha, w, plan->a,
                                      a_rows + r0 * row_bytes, plan->b, &beta, d_rows, plan->d,
                                      d_rows, plan->d, &plan->algo, nullptr, 0, stream_));
  }
  return true;
}

std::string LtGemm::describe() const {
  return std::string(has_fp8_ ? "FP8 cuBLASLt (E4M3 x E4M3, FP32 out + fused scaling epilogue)"
                              : "W8A16 (E4M3 dequantized to BF16, cuBLASLt BF16)") +
         ", F32 cuBLASLt, BF16 weights simt_gemm; " + std::to_string(plans_.usable()) + "/" +
         std::to_string(plans_.size()) +
         " cached batch-invariant cuBLASLt plans (dtype, n, k, ld; one algorithm per dtype, n, k;"
         " no split-K, no workspace)";
}

}  // namespace octet::cuda_kernels
