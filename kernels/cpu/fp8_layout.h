#pragma once
// FP8 weight layouts (views.h Fp8Layout): how many bytes a weight takes in each and packing a
// row-major [n, k] E4M3 matrix into one. Backend::upload_fp8_weight packs with these; the
// kernels that read a layout document its use (Rows8x32: kernels/cpu/w8a8_linear_avx2.cpp).
#include <cstdint>

#include "kernels/common/views.h"

namespace octet {

/// Rows8x32: rows in blocks of 8 (the last one padded with zero rows); within a block, each of
/// the k_groups parts of k in chunks of 32 codes (the part's last chunk padded with zero
/// codes); chunk c of part g of block b is 8 x 32 bytes at
/// ((b * k_groups + g) * chunks_per_part + c) * 256, row r's 32 bytes at 32 r, its element
/// l < 32 at byte 4 (l % 8) + {0, 2, 1, 3}[l / 8] (the order the AVX2 kernel widens them in).
/// Aborts unless n, k >= 0 and k_groups divides k.
int64_t fp8_rows8x32_bytes(int64_t n, int64_t k, int64_t k_groups);
/// dst: fp8_rows8x32_bytes(n, k, k_groups) bytes = w: [n, k] row-major in Rows8x32.
void pack_fp8_rows8x32(const uint8_t* w, int64_t n, int64_t k, int64_t k_groups, uint8_t* dst);

/// Bytes of an [n, k] E4M3 weight in `layout` (RowMajor: n * k).
int64_t fp8_weight_bytes(Fp8Layout layout, int64_t n, int64_t k, int64_t k_groups);
/// dst: fp8_weight_bytes(layout, ...) bytes = w: [n, k] row-major, in `layout`.
void pack_fp8_weight(Fp8Layout layout, const uint8_t* w, int64_t n, int64_t k, int64_t k_groups,
                     uint8_t* dst);

}  // namespace octet
