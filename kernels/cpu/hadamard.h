#pragma once
// Normalized fast Walsh-Hadamard transform (FWHT) of rows: Backend::hadamard_rotate on the CPU
// (--kv-cache-rotation hadamard rotates each head's q and k before the KV write).
#include <cstdint>

namespace octet::cpu {

/// x[0, n) = H x / sqrt(n) in place, H the Sylvester-ordered Hadamard matrix
/// (H[i][j] = (-1)^popcount(i & j)): log2(n) butterfly stages (a, b) -> (a + b, a - b) with
/// stride 1, 2, 4, ..., then one multiply by 1 / sqrt(n) (a float, rounded once). n: a power of
/// two (OCTET_CHECK). The FWHT is the textbook one (e.g. Fino & Algazi 1976).
void hadamard_row(float* x, int64_t n);

/// hadamard_row of each of `rows` rows of x: [rows, n]. Rows spread over threads; each row's
/// result depends on that row alone (batch invariant).
void hadamard_rows(float* x, int64_t rows, int64_t n);

}  // namespace octet::cpu
