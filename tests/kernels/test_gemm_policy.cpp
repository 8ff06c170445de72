// The host-side policy of the cuBLASLt GEMMs (kernels/cuda/gemm_policy.h), without a GPU: the
// cache key and the path of a call never depend on m (batch invariance: a row's bits must not
// change with how many rows share its call), the eligibility table (hand-derived from cuBLASLt's
// 16-byte rules), the acceptance rule for a heuristic candidate, the probe rows, and the
// fallback warning's greppable prefix. The GPU side (the bits themselves) is
// test_cuda_backend.cpp's "GEMMs are batch invariant" case.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cuda/gemm_policy.h"

using namespace octet::cuda_kernels;

namespace {

constexpr uintptr_t kBase = 0x7f0000000000;  // a 256-byte aligned device address

GemmCall call(GemmInput t, int64_t m, int64_t n, int64_t k, int64_t ld, uintptr_t act = kBase,
              uintptr_t w = kBase + 0x100000, uintptr_t d = kBase + 0x200000) {
  return GemmCall{t, m, n, k, ld, act, w, d};
}

// Row counts a server step can have: every m up to 1100, then powers of two and their
// neighbours up to 2^20, and around the default max_rows (where calls are chunked).
std::vector<int64_t> many_m() {
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 1100; ++m) ms.push_back(m);
  for (int64_t p = 2048; p <= (int64_t{1} << 20); p *= 2)
    for (int64_t m : {p - 1, p, p + 1}) ms.push_back(m);
  for (int64_t m : {kLtDefaultMaxRows - 1, kLtDefaultMaxRows, kLtDefaultMaxRows + 1, int64_t{300}})
    ms.push_back(m);
  return ms;
}

struct Shape {
  GemmInput type;
  int64_t n, k, ld;
};
// Eligible and refused shapes of every type (Llama-3.1-8B, SmolLM2, stories260K and the op
// suite's sizes among them).
const Shape kShapes[] = {
    {GemmInput::E4M3, 6144, 4096, 4096},   {GemmInput::E4M3, 4096, 14336, 14336},
    {GemmInput::E4M3, 64, 128, 128},       {GemmInput::E4M3, 96, 64, 256},
    {GemmInput::E4M3, 64, 172, 172},       {GemmInput::E4M3, 37, 133, 133},
    {GemmInput::E4M3, 70, 128, 128},       {GemmInput::E4M3, 64, 56, 168},
    {GemmInput::BF16, 576, 1536, 1536},    {GemmInput::BF16, 64, 72, 72},
    {GemmInput::BF16, 64, 68, 68},         {GemmInput::F32, 64, 172, 172},
    {GemmInput::F32, 130, 515, 515},       {GemmInput::F32, 96, 128, 128},
    {GemmInput::F32, 0, 128, 128},
};

}  // namespace

TEST_CASE("gemm policy: the cache key holds (type, n, k, ld) and never m", "[gemm_policy]") {
  const std::vector<int64_t> ms = many_m();
  for (const Shape& s : kShapes) {
    CAPTURE(gemm_input_name(s.type), s.n, s.k, s.ld);
    const LtGemmKey k1 = lt_gemm_key(call(s.type, 1, s.n, s.k, s.ld));
    CHECK(k1.type == s.type);
    CHECK(k1.n == s.n);
    CHECK(k1.k == s.k);
    CHECK(k1.ld == s.ld);
    int differ = 0;
    for (int64_t m : ms) {
      const LtGemmKey km = lt_gemm_key(call(s.type, m, s.n, s.k, s.ld));
      differ += (km == k1 && !(km < k1) && !(k1 < km)) ? 0 : 1;
    }
    CHECK(differ == 0);
  }
  // Any other field makes another key, and the order is strict.
  const LtGemmKey base{GemmInput::E4M3, 64, 128, 128};
  for (const LtGemmKey other :
       {LtGemmKey{GemmInput::BF16, 64, 128, 128}, LtGemmKey{GemmInput::E4M3, 68, 128, 128},
        LtGemmKey{GemmInput::E4M3, 64, 144, 144}, LtGemmKey{GemmInput::E4M3, 64, 128, 256}}) {
    CHECK_FALSE(other == base);
    CHECK((other < base) != (base < other));
  }
}

TEST_CASE("gemm policy: the eligibility table", "[gemm_policy]") {
  struct Row {
    GemmCall c;
    bool has_fp8;
    LtRefusal expect;
  };
  const GemmInput F8 = GemmInput::E4M3, BF = GemmInput::BF16, F32 = GemmInput::F32;
  const Row rows[] = {
      // FP8: k and ld multiples of 16, n % 4, 16-byte aligned, sm_89+.
      {call(F8, 1, 64, 64, 64), true, LtRefusal::None},
      {call(F8, 300, 6144, 4096, 4096), true, LtRefusal::None},
      {call(F8, 5, 64, 64, 256), true, LtRefusal::None},  // a k group of a 256-wide row
      {call(F8, 1, 64, 64, 64), false, LtRefusal::NoFp8},
      {call(F8, 1, 64, 72, 72), true, LtRefusal::KNotMultiple},    // 72 % 16 = 8
      {call(F8, 1, 64, 172, 172), true, LtRefusal::KNotMultiple},  // stories260K's w2
      {call(F8, 1, 64, 56, 168), true, LtRefusal::KNotMultiple},   // 168 in 3 groups
      {call(F8, 1, 64, 64, 72), true, LtRefusal::LdNotMultiple},
      {call(F8, 1, 64, 64, 48), true, LtRefusal::LdNotMultiple},   // ld < k
      {call(F8, 1, 70, 64, 64), true, LtRefusal::NNotMultiple4},
      {call(F8, 1, 37, 128, 128), true, LtRefusal::NNotMultiple4},
      {call(F8, 1, 64, 64, 64, kBase + 8), true, LtRefusal::Misaligned},
      {call(F8, 1, 64, 64, 64, kBase, kBase + 16 + 4), true, LtRefusal::Misaligned},
      {call(F8, 1, 64, 64, 64, kBase, kBase, kBase + 4), true, LtRefusal::Misaligned},
      {call(F8, 1, 64, 64, 64, kBase + 16, kBase + 48, kBase + 64), true, LtRefusal::None},
      // BF16: multiples of 8.
      {call(BF, 1, 64, 72, 72), true, LtRefusal::None},
      {call(BF, 1, 64, 72, 72), false, LtRefusal::None},
      {call(BF, 1, 64, 68, 68), true, LtRefusal::KNotMultiple},
      {call(BF, 1, 64, 64, 68), true, LtRefusal::LdNotMultiple},
      {call(BF, 1, 66, 64, 64), true, LtRefusal::NNotMultiple4},
      // F32: multiples of 4.
      {call(F32, 1, 64, 172, 172), false, LtRefusal::None},
      {call(F32, 17, 64, 68, 68), true, LtRefusal::None},
      {call(F32, 1, 64, 66, 66), true, LtRefusal::KNotMultiple},
      {call(F32, 1, 64, 45, 45), true, LtRefusal::KNotMultiple},
      {call(F32, 1, 130, 516, 516), true, LtRefusal::NNotMultiple4},
      {call(F32, 1, 0, 64, 64), true, LtRefusal::Empty},
      {call(F32, 1, 64, 0, 0), true, LtRefusal::Empty},
  };
  for (const Row& r : rows) {
    CAPTURE(gemm_input_name(r.c.type), r.c.n, r.c.k, r.c.ld, r.c.act % 16, r.c.w % 16,
            r.c.d % 16, r.has_fp8);
    CHECK(lt_refusal(r.c, r.has_fp8) == r.expect);
    CHECK(std::string(lt_refusal_text(lt_refusal(r.c, r.has_fp8))).size() > 0);
  }
  CHECK(lt_k_multiple(F8) == 16);
  CHECK(lt_k_multiple(BF) == 8);
  CHECK(lt_k_multiple(F32) == 4);
}

TEST_CASE("gemm policy: whether a call may take cuBLASLt never depends on m", "[gemm_policy]") {
  const std::vector<int64_t> ms = many_m();
  for (const Shape& s : kShapes)
    for (bool has_fp8 : {false, true})
      for (uintptr_t shift : {uintptr_t{0}, uintptr_t{8}}) {
        CAPTURE(gemm_input_name(s.type), s.n, s.k, s.ld, has_fp8, shift);
        const LtRefusal r1 = lt_refusal(call(s.type, 1, s.n, s.k, s.ld, kBase + shift), has_fp8);
        int differ = 0;
        for (int64_t m : ms)
          differ += lt_refusal(call(s.type, m, s.n, s.k, s.ld, kBase + shift), has_fp8) != r1;
        CHECK(differ == 0);
      }
}

TEST_CASE("gemm policy: one plan per key, made once, the same path for every m",
          "[gemm_policy]") {
  // A stand-in for cuBLASLt: a plan per key, none where k % 32 != 0 (as if no candidate were
  // acceptable). It sees only the key, as LtGemm::make_plan does.
  struct FakePlan {
    LtGemmKey key;
  };
  LtPlanCache<FakePlan> cache;
  int made = 0;
  auto make = [&made](const LtGemmKey& key) -> std::unique_ptr<FakePlan> {
    ++made;
    if (key.k % 32 != 0) return nullptr;
    return std::make_unique<FakePlan>(FakePlan{key});
  };
  const std::vector<int64_t> ms = many_m();
  int keys_routed = 0, with_plan = 0;
  for (const Shape& s : kShapes) {
    CAPTURE(gemm_input_name(s.type), s.n, s.k, s.ld);
    const GemmCall c1 = call(s.type, 1, s.n, s.k, s.ld);
    const bool refused = lt_refusal(c1, true) != LtRefusal::None;
    const int made_before = made;
    FakePlan* p1 = lt_route(cache, c1, true, make);
    if (refused) CHECK(p1 == nullptr);
    int differ = 0;
    for (int64_t m : ms) differ += lt_route(cache, call(s.type, m, s.n, s.k, s.ld), true, make) != p1;
    CHECK(differ == 0);
    CHECK(made - made_before == (refused ? 0 : 1));  // chosen once, at the key's first call
    if (!refused) ++keys_routed;
    if (p1 != nullptr) {
      ++with_plan;
      CHECK(p1->key == lt_gemm_key(c1));
    }
  }
  CHECK(cache.size() == static_cast<size_t>(keys_routed));
  CHECK(cache.usable() == static_cast<size_t>(with_plan));
  CHECK(with_plan > 0);
  CHECK(with_plan < keys_routed);  // both outcomes were exercised
}

TEST_CASE("gemm policy: probe rows", "[gemm_policy]") {
  using V = std::vector<int64_t>;
  CHECK(lt_probe_rows(kLtDefaultMaxRows) == V{1, 2, 3, 7, 16, 17, 64, 128, 300, 16384});
  CHECK(lt_probe_rows(100) == V{1, 2, 3, 7, 16, 17, 64, 100});
  CHECK(lt_probe_rows(300) == V{1, 2, 3, 7, 16, 17, 64, 128, 300});
  CHECK(lt_probe_rows(1) == V{1});
  CHECK(kLtDefaultMaxRows == 16384);
  CHECK(kLtWorkspaceBytes == 0);
}

TEST_CASE("gemm policy: the acceptance rule for a cuBLASLt candidate", "[gemm_policy]") {
  LtCandidate ok;
  ok.heuristic_ok = true;
  ok.config_read = true;
  ok.split_k_num = 1;
  ok.reduction_scheme = 0;
  ok.accepted_at_probes = true;
  ok.workspace_bytes = 0;
  CHECK(lt_reject(ok) == LtReject::None);

  LtCandidate c = ok;
  c.heuristic_ok = false;
  CHECK(lt_reject(c) == LtReject::Heuristic);
  c = ok;
  c.config_read = false;
  CHECK(lt_reject(c) == LtReject::Config);
  for (int32_t splits : {0, 2, 4, 16}) {
    c = ok;
    c.split_k_num = splits;
    CHECK(lt_reject(c) == LtReject::SplitK);
  }
  for (uint32_t scheme : {1u, 2u, 4u}) {  // INPLACE, COMPUTE_TYPE, OUTPUT_TYPE
    c = ok;
    c.reduction_scheme = scheme;
    CHECK(lt_reject(c) == LtReject::Reduction);
  }
  c = ok;
  c.workspace_bytes = 1;
  CHECK(lt_reject(c) == LtReject::Workspace);
  c = ok;
  c.accepted_at_probes = false;  // e.g. refused at m = max_rows
  CHECK(lt_reject(c) == LtReject::Probe);

  // The first acceptable in the heuristic's order; -1 (simt_gemm for every m) when none.
  LtCandidate split = ok, probe = ok;
  split.split_k_num = 2;
  probe.accepted_at_probes = false;
  CHECK(lt_choose({}) == -1);
  CHECK(lt_choose({split, probe}) == -1);
  CHECK(lt_choose({ok, split}) == 0);
  CHECK(lt_choose({split, probe, ok, ok}) == 2);
}

TEST_CASE("gemm policy: the simt_gemm fallback warning", "[gemm_policy]") {
  const std::string line =
      lt_fallback_warning(LtGemmKey{GemmInput::E4M3, 64, 172, 172}, "k is not a multiple");
  INFO(line);
  CHECK(std::string(kSimtFallbackWarning) == "octet: warning: simt_gemm fallback");
  CHECK(line.rfind("octet: warning: simt_gemm fallback", 0) == 0);
  CHECK(line.find("10-100x slower") != std::string::npos);
  CHECK(line.find("FP8 E4M3 GEMM n=64 k=172 ld=172: k is not a multiple") != std::string::npos);
  CHECK(line.find('\n') == std::string::npos);
}
