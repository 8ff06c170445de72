#!/usr/bin/env python3
"""Reference values of octet's KV block hash (engine/kv_cache_manager.h, hash_block_tokens),
written from the definition alone: FNV-1a 64 over the little-endian bytes of the parent hash
(8), the extra key (8) and each token id (4, as uint32), then splitmix64's finalizer.
tests/engine/test_kv_cache_manager.cpp pastes the printed values."""
import struct

M = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & M
    return h


def splitmix64_finalize(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def hash_block_tokens(parent: int, tokens, extra_key: int) -> int:
    data = struct.pack("<QQ", parent, extra_key) + b"".join(
        struct.pack("<I", t & 0xFFFFFFFF) for t in tokens)
    return splitmix64_finalize(fnv1a64(data))


if __name__ == "__main__":
    h0 = hash_block_tokens(0, [1, 2, 3, 4], 0)
    h1 = hash_block_tokens(h0, [5, 6, 7, 8], 0)
    s0 = hash_block_tokens(0, [1, 2, 3, 4], 0x1234)
    neg = hash_block_tokens(0, [-1, 0, 128000, 7], 0)
    for name, v in [("h0", h0), ("h1", h1), ("salted", s0), ("negative", neg)]:
        print(f"{name} = 0x{v:016x}ull")
