// ggml tensor types: block geometry, names, and dequantization to float32.
// Block layouts follow ggml's published description (ggml-common.h, docs/gguf.md); every block
// type stores its fp16 scale(s) little-endian. "d" = scale, "m"/"dmin" = (min) offset.
#include <cstring>
#include <stdexcept>
#include <string>

#include "models/gguf.h"
#include "kernels/common/half.h"  // fp16_to_float, bf16_to_float

namespace octet {
namespace {

constexpr int64_t kQK = 32;    // elements per block of the legacy quants (Q4_0 ... Q8_1)
constexpr int64_t kQK_K = 256; // elements per super-block of the K-quants

struct TypeTraits {
  const char* name;
  int64_t block_elems;  // 0 = unknown type
  int64_t block_bytes;
};

// Indexed by the GGUF type id; ids 4 and 5 (Q4_2, Q4_3) were removed from ggml long ago.
constexpr TypeTraits kTraits[] = {
    {"F32", 1, 4},          {"F16", 1, 2},        {"Q4_0", 32, 18},      {"Q4_1", 32, 20},
    {nullptr, 0, 0},        {nullptr, 0, 0},      {"Q5_0", 32, 22},      {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},       {"Q8_1", 32, 36},     {"Q2_K", 256, 84},     {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},     {"Q5_K", 256, 176},   {"Q6_K", 256, 210},    {"Q8_K", 256, 292},
    {"IQ2_XXS", 256, 66},   {"IQ2_XS", 256, 74},  {"IQ3_XXS", 256, 98},  {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},     {"IQ3_S", 256, 110},  {"IQ2_S", 256, 82},    {"IQ4_XS", 256, 136},
    {"I8", 1, 1},           {"I16", 1, 2},        {"I32", 1, 4},         {"I64", 1, 8},
    {"F64", 1, 8},          {"IQ1_M", 256, 56},   {"BF16", 1, 2},
};
constexpr uint32_t kNumTraits = sizeof(kTraits) / sizeof(kTraits[0]);

const TypeTraits* traits(GGMLType type) {
  const auto id = static_cast<uint32_t>(type);
  if (id >= kNumTraits || kTraits[id].name == nullptr) return nullptr;
  return &kTraits[id];
}

inline uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t load_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}
inline float load_f16(const uint8_t* p) { return fp16_to_float(load_u16(p)); }

// --- plain types -------------------------------------------------------------------------------

void dq_f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, size_t(n) * 4); }

void dq_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
}

void dq_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_u16(src + 2 * i));
}

// --- legacy 32-element blocks ------------------------------------------------------------------
// Q4_*/Q5_*: qs[16] holds element j in the low nibble of qs[j] and element j+16 in the high one.

// Q8_0: {f16 d; i8 qs[32]}; x = d * qs.
void dq_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 34, dst += kQK) {
    const float d = load_f16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = d * float(qs[j]);
  }
}

// Q4_0: {f16 d; u8 qs[16]}; x = d * (q - 8).
void dq_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 18, dst += kQK) {
    const float d = load_f16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(int(qs[j] & 0xF) - 8);
      dst[j + 16] = d * float(int(qs[j] >> 4) - 8);
    }
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}; x = d * q + m.
void dq_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 20, dst += kQK) {
    const float d = load_f16(src), m = load_f16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * float(qs[j] & 0xF) + m;
      dst[j + 16] = d * float(qs[j] >> 4) + m;
    }
  }
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]}; bit j of qh is bit 4 of element j; x = d * (q - 16).
void dq_q5_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 22, dst += kQK) {
    const float d = load_f16(src);
    const uint32_t qh = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      const int lo = int((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
      const int hi = int((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      dst[j] = d * float(lo - 16);
      dst[j + 16] = d * float(hi - 16);
    }
  }
}

// Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]}; x = d * q + m.
void dq_q5_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 24, dst += kQK) {
    const float d = load_f16(src), m = load_f16(src + 2);
    const uint32_t qh = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) {
      const uint32_t lo = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
      const uint32_t hi = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
      dst[j] = d * float(lo) + m;
      dst[j + 16] = d * float(hi) + m;
    }
  }
}

// Q8_1: {f16 d; f16 s (= d * sum(qs), unused here); i8 qs[32]}; x = d * qs.
void dq_q8_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b, src += 36, dst += kQK) {
    const float d = load_f16(src);
    const auto* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int j = 0; j < 32; ++j) dst[j] = d * float(qs[j]);
  }
}

// --- K-quants: 256-element super-blocks --------------------------------------------------------

// Q4_K/Q5_K pack 8 six-bit scales and 8 six-bit mins in 12 bytes: for sub-block j < 4,
// scale = s[j] & 63, min = s[j+4] & 63; for j >= 4 the low 4 bits come from s[j+4] (scale: low
// nibble, min: high nibble) and the top 2 bits from the top bits of s[j-4] (scale) / s[j] (min).
inline void k4_scale_min(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}. Eight sub-blocks of 32; each 64 elements
// share 32 bytes of qs (low nibbles = first 32, high nibbles = next 32).
// x = d * scale_j * q - dmin * min_j.
void dq_q4_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, src += 144, dst += kQK_K) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* sc = src + 4;
    const uint8_t* qs = src + 16;
    for (int g = 0; g < 4; ++g, qs += 32) {
      int s0, m0, s1, m1;
      k4_scale_min(sc, 2 * g, &s0, &m0);
      k4_scale_min(sc, 2 * g + 1, &s1, &m1);
      const float d0 = d * float(s0), o0 = dmin * float(m0);
      const float d1 = d * float(s1), o1 = dmin * float(m1);
      float* y = dst + 64 * g;
      for (int l = 0; l < 32; ++l) {
        y[l] = d0 * float(qs[l] & 0xF) - o0;
        y[l + 32] = d1 * float(qs[l] >> 4) - o1;
      }
    }
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: Q4_K plus a fifth bit; bit k
// of qh[l] is bit 4 of element 32 * k + l.
void dq_q5_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, src += 176, dst += kQK_K) {
    const float d = load_f16(src), dmin = load_f16(src + 2);
    const uint8_t* sc = src + 4;
    const uint8_t* qh = src + 16;
    const uint8_t* qs = src + 48;
    for (int g = 0; g < 4; ++g, qs += 32) {
      int s0, m0, s1, m1;
      k4_scale_min(sc, 2 * g, &s0, &m0);
      k4_scale_min(sc, 2 * g + 1, &s1, &m1);
      const float d0 = d * float(s0), o0 = dmin * float(m0);
      const float d1 = d * float(s1), o1 = dmin * float(m1);
      float* y = dst + 64 * g;
      for (int l = 0; l < 32; ++l) {
        const int q0 = (qs[l] & 0xF) | (((qh[l] >> (2 * g)) & 1) << 4);
        const int q1 = (qs[l] >> 4) | (((qh[l] >> (2 * g + 1)) & 1) << 4);
        y[l] = d0 * float(q0) - o0;
        y[l + 32] = d1 * float(q1) - o1;
      }
    }
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}. Per half (128 elements; ql 64 bytes,
// qh 32 bytes): element l + 32 * k (k = 0..3) takes its low 4 bits from ql[l] (k=0: low nibble,
// k=2: high) or ql[l+32] (k=1: low, k=3: high) and its high 2 bits from qh[l] >> (2 * k).
// x = d * scales[16-element group] * (q - 32).
void dq_q6_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, src += 210, dst += kQK_K) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_f16(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8) {
      float* y = dst + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q0 = int((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = int((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q0);
        y[l + 32] = d * float(sc[is + 2]) * float(q1);
        y[l + 64] = d * float(sc[is + 4]) * float(q2);
        y[l + 96] = d * float(sc[is + 6]) * float(q3);
      }
    }
  }
}

// Q2_K: {u8 scales[16]; u8 qs[64]; f16 d; f16 dmin}. Sixteen sub-blocks of 16; scales[i] low
// nibble = scale, high nibble = min. Per half (128 elements, 32 bytes of qs): element
// 32 * k + l takes bits (2k, 2k+1) of qs[l]. x = d * scale * q - dmin * min.
void dq_q2_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, src += 84, dst += kQK_K) {
    const uint8_t* sc = src;
    const uint8_t* qs = src + 16;
    const float d = load_f16(src + 80), dmin = load_f16(src + 82);
    for (int i = 0; i < 16; ++i) {  // sub-block i: elements 16 i .. 16 i + 15
      const int half = i / 8, k = (i % 8) / 2, part = i % 2;
      const float dl = d * float(sc[i] & 0xF), ml = dmin * float(sc[i] >> 4);
      const uint8_t* q = qs + 32 * half + 16 * part;
      float* y = dst + 16 * i;
      for (int l = 0; l < 16; ++l) y[l] = dl * float((q[l] >> (2 * k)) & 3) - ml;
    }
  }
}

// Q3_K: {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}. Sixteen six-bit scales (stored
// offset by 32): low 4 bits of scale j from scales[j] (j < 8, low nibble) or scales[j-8] (high
// nibble); top 2 bits from scales[8 + j % 4] >> (2 * (j / 4)). Element e = 128 h + 32 k + l has
// low bits (qs[32 h + l] >> 2k) & 3; bit (4h + k) of hmask[l] set means no -4 offset.
// x = d * (scale - 32) * (q - (hbit ? 0 : 4)).
void dq_q3_k(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, src += 110, dst += kQK_K) {
    const uint8_t* hm = src;
    const uint8_t* qs = src + 32;
    const uint8_t* s = src + 96;
    const float d = load_f16(src + 108);
    for (int i = 0; i < 16; ++i) {
      const int lo = i < 8 ? (s[i] & 0xF) : (s[i - 8] >> 4);
      const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
      const float dl = d * float((lo | (hi << 4)) - 32);
      const int half = i / 8, k = (i % 8) / 2, part = i % 2;
      const uint8_t* q = qs + 32 * half + 16 * part;
      const uint8_t* h = hm + 16 * part;
      const int hbit = 4 * half + k;
      float* y = dst + 16 * i;
      for (int l = 0; l < 16; ++l) {
        const int v = int((q[l] >> (2 * k)) & 3) - (((h[l] >> hbit) & 1) ? 0 : 4);
        y[l] = dl * float(v);
      }
    }
  }
}

using DequantFn = void (*)(const uint8_t*, float*, int64_t);

DequantFn dequant_fn(GGMLType type) {
  switch (type) {
    case GGMLType::F32: return dq_f32;
    case GGMLType::F16: return dq_f16;
    case GGMLType::BF16: return dq_bf16;
    case GGMLType::Q8_0: return dq_q8_0;
    case GGMLType::Q8_1: return dq_q8_1;
    case GGMLType::Q4_0: return dq_q4_0;
    case GGMLType::Q4_1: return dq_q4_1;
    case GGMLType::Q5_0: return dq_q5_0;
    case GGMLType::Q5_1: return dq_q5_1;
    case GGMLType::Q2_K: return dq_q2_k;
    case GGMLType::Q3_K: return dq_q3_k;
    case GGMLType::Q4_K: return dq_q4_k;
    case GGMLType::Q5_K: return dq_q5_k;
    case GGMLType::Q6_K: return dq_q6_k;
    default: return nullptr;
  }
}

}  // namespace

std::string ggml_type_name(GGMLType type) {
  const TypeTraits* t = traits(type);
  return t ? t->name : "type" + std::to_string(static_cast<uint32_t>(type));
}

int64_t ggml_block_elems(GGMLType type) {
  const TypeTraits* t = traits(type);
  return t ? t->block_elems : 0;
}

int64_t ggml_block_bytes(GGMLType type) {
  const TypeTraits* t = traits(type);
  return t ? t->block_bytes : 0;
}

bool ggml_can_dequantize(GGMLType type) { return dequant_fn(type) != nullptr; }

void dequantize_row(GGMLType type, const void* src, float* dst, int64_t n) {
  const DequantFn fn = dequant_fn(type);
  if (fn == nullptr) {
    throw std::invalid_argument("dequantize_row: cannot dequantize tensor type " +
                                ggml_type_name(type));
  }
  const int64_t block = ggml_block_elems(type);
  if (n < 0 || n % block != 0) {
    throw std::invalid_argument("dequantize_row: " + std::to_string(n) +
                                " elements is not a multiple of the " + ggml_type_name(type) +
                                " block size " + std::to_string(block));
  }
  fn(static_cast<const uint8_t*>(src), dst, n);
}

}  // namespace octet
