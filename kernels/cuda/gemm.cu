// GEMMs of the CUDA backend (gemm.h): the tiled CUDA-core fallback and the cuBLASLt wrapper.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

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

size_t elem_bytes(GemmInput t) { return t == GemmInput::F32 ? 4 : t == GemmInput::BF16 ? 2 : 1; }

cudaDataType_t cuda_type(GemmInput t) {
  return t == GemmInput::F32 ? CUDA_R_32F : t == GemmInput::BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The descriptors of one GEMM, column-major as cuBLASLt sees it: D^T [n, m] = W [n, k] .
// act^T [k, m], i.e. A = W stored k x n (ld) transposed, B = act stored k x m (ld).
struct LtProblem {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  LtProblem(GemmInput type, int64_t m, int64_t n, int64_t k, int64_t ld) {
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (type == GemmInput::E4M3) {
      const int8_t fast_accum = 0;  // FP32 accumulation, promoted (no fast FP8 accumulation)
      OCTET_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                                        &fast_accum, sizeof(fast_accum)));
    }
    OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, cuda_type(type), static_cast<uint64_t>(k),
                                                  static_cast<uint64_t>(n), ld));
    OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, cuda_type(type), static_cast<uint64_t>(k),
                                                  static_cast<uint64_t>(m), ld));
    OCTET_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, static_cast<uint64_t>(n),
                                                  static_cast<uint64_t>(m), n));
  }
  ~LtProblem() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
};

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

int64_t gemm_m_bucket(int64_t m) {
  if (m <= 16) return 16;
  if (m <= 4096) {
    int64_t b = 32;
    while (b < m) b *= 2;
    return b;
  }
  return (m + 4095) / 4096 * 4096;
}

LtGemm::LtGemm(cudaStream_t stream, int sm_major, int sm_minor)
    : stream_(stream), has_fp8_(sm_major * 10 + sm_minor >= 89) {
  OCTET_CUBLAS_CHECK(cublasLtCreate(&handle_));
  workspace_bytes_ = size_t{32} << 20;
  OCTET_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

LtGemm::~LtGemm() {
  cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

const LtGemm::Algo& LtGemm::algo_for(GemmInput type, int64_t m_bucket, int64_t n, int64_t k,
                                     int64_t ld) {
  const Key key{static_cast<int>(type), m_bucket, n, k, ld};
  auto it = algos_.find(key);
  if (it != algos_.end()) return it->second;
  Algo algo;
  LtProblem p(type, m_bucket, n, k, ld);
  cublasLtMatmulPreference_t pref = nullptr;
  OCTET_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE;  // no split-K reductions
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d,
                                                           pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    algo.ok = true;
    algo.algo = result.algo;
  } else {
    // Once per shape (the answer is cached): this shape runs on the CUDA-core fallback.
    static const char* const kNames[] = {"F32", "BF16", "FP8 E4M3"};
    std::fprintf(stderr,
                 "octet: warning: cuBLASLt has no %s algorithm for m<=%lld n=%lld k=%lld "
                 "(status %d): simt_gemm fallback\n",
                 kNames[static_cast<int>(type)], static_cast<long long>(m_bucket),
                 static_cast<long long>(n), static_cast<long long>(k), static_cast<int>(st));
  }
  return algos_.emplace(key, algo).first->second;
}

bool LtGemm::matmul(GemmInput type, const void* act, const void* w, int64_t m, int64_t n,
                    int64_t k, int64_t ld, float* d) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  if (type == GemmInput::E4M3 && !has_fp8_) return false;
  const int64_t multiple = static_cast<int64_t>(16 / elem_bytes(type));
  if (k % multiple != 0 || ld % multiple != 0 || n % 4 != 0) return false;
  if (!aligned16(act) || !aligned16(w) || !aligned16(d)) return false;
  const Algo& algo = algo_for(type, gemm_m_bucket(m), n, k, ld);
  if (!algo.ok) return false;
  LtProblem p(type, m, n, k, ld);
  const auto exact_key = std::make_tuple(static_cast<int>(type), m, n, k, ld);
  auto it = exact_ok_.find(exact_key);
  if (it == exact_ok_.end()) {
    cublasLtMatmulHeuristicResult_t check{};
    const bool ok = cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.d, p.d, &algo.algo,
                                            &check) == CUBLAS_STATUS_SUCCESS &&
                    check.workspaceSize <= workspace_bytes_;
    it = exact_ok_.emplace(exact_key, ok).first;
  }
  if (!it->second) return false;
  const float alpha = 1.0f, beta = 0.0f;
  OCTET_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, act, p.b, &beta, d, p.d, d,
                                    p.d, &algo.algo, workspace_, workspace_bytes_, stream_));
  return true;
}

std::string LtGemm::describe() const {
  int usable = 0;
  for (const auto& [key, algo] : algos_) usable += algo.ok ? 1 : 0;
  return std::string(has_fp8_ ? "FP8 cuBLASLt (E4M3 x E4M3, FP32 out + fused scaling epilogue)"
                              : "W8A16 (E4M3 dequantized to BF16, cuBLASLt BF16)") +
         ", F32 cuBLASLt, BF16 weights simt_gemm; " + std::to_string(usable) + "/" +
         std::to_string(algos_.size()) + " cached cuBLASLt algorithms";
}

}  // namespace octet::cuda_kernels
