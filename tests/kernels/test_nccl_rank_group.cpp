// The NCCL rank group (make_rank_group("cuda", N), kernels/rank_group_cuda.cpp) on this
// machine's GPUs: rank r's backend is a CUDA backend on cuda:r, and a sum over the ranks'
// device buffers equals the host sum. With one GPU only the refusal of two ranks runs; without
// a GPU, or in a build without CUDA (OCTET_HAVE_CUDA) and NCCL, it exits 77 (skipped).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/rank_group.h"

#if OCTET_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

using namespace octet;

namespace {

int gpus_or_skip() {
#if OCTET_HAVE_CUDA
  const int n = cuda_device_count();
  if (n > 0) return n;
  std::printf("SKIPPED: no CUDA GPU\n");
#else
  std::printf("SKIPPED: built without CUDA\n");
#endif
  std::fflush(stdout);
  std::exit(77);
}

}  // namespace

TEST_CASE("nccl rank group: one rank per GPU, sums over the ranks", "[nccl][cuda]") {
  const int gpus = gpus_or_skip();
  if (gpus < 2) {
    // Two ranks need two GPUs: a clear refusal (or, without NCCL, the NCCL one).
    try {
      (void)make_rank_group("cuda", 2);
      FAIL("two ranks on one GPU were accepted");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK((what.find("needs 2 GPUs") != std::string::npos ||
             what.find("needs NCCL") != std::string::npos));
    }
    return;
  }
  const int world = gpus >= 4 ? 4 : 2;
  std::unique_ptr<RankGroup> group;
  try {
    group = make_rank_group("cuda", world);
  } catch (const std::invalid_argument& e) {
    std::printf("SKIPPED: %s\n", e.what());  // a CUDA build without NCCL
    std::fflush(stdout);
    std::exit(77);
  }
  REQUIRE(group->world_size() == world);
  constexpr int64_t kCount = 1000;
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  std::vector<std::string> names(static_cast<size_t>(world));
  group->run([&](int rank, Communicator& comm) {
    Backend& be = *group->rank_backend(rank);
    names[rank] = be.name();
    // value(rank, i) = rank + 1 + i % 7: small integers, exact in any summation order.
    std::vector<float> host(kCount);
    for (int64_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(rank + 1 + i % 7);
    Buffer buf = be.allocate(kCount * 4);
    be.upload(buf, 0, host.data(), kCount * 4);
    comm.all_reduce_sum(buf.as<float>(), kCount);
    got[rank].resize(kCount);
    be.download(buf, 0, got[rank].data(), kCount * 4);
  });
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << " on " << names[r]);
    CHECK(names[r].rfind("cuda:" + std::to_string(r) + " ", 0) == 0);
    for (int64_t i = 0; i < kCount; ++i) {
      // sum over ranks of (rank + 1 + i % 7) = world (world + 1) / 2 + world (i % 7)
      const float want = static_cast<float>(world * (world + 1) / 2 + world * (i % 7));
      if (got[r][i] != want) {
        INFO("element " << i);
        CHECK(got[r][i] == want);
        break;
      }
    }
  }
}
