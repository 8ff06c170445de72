// Running one test body on every Backend (tests/kernels/test_backend_ops.cpp), llama.cpp's
// test-backend-ops idea: the same cases, the same host references, each device in turn. All data
// goes through Backend buffers (allocate + upload, run, download), so a device backend runs the
// cases unchanged.
//
// Skipping (Catch2 v2 has no SKIP): BACKEND_TEST_CASE(op, body) declares one TEST_CASE per
// device, "backend <device>: <op>" tagged [backend_ops][<device>]; catch_discover_tests makes each
// a CTest test that runs in its own process (CMakeLists.txt, SKIP_RETURN_CODE 77). A case whose
// device is unavailable (make_backend throws std::invalid_argument: not built with it, no GPU)
// reports "SKIPPED: ..." (a Catch warning) and returns without running its body; at process
// exit (an atexit handler), when every case this process ran was such a skip, the exit code
// becomes 77, which CTest reports as skipped, never as passed. A process that also ran real
// cases (the whole binary run by hand, a "[cpu]" filter) keeps Catch's own exit code, so a CPU
// failure is never hidden behind a 77, whatever the case order; the skips then show as warnings.
// Run one device's cases with the tag: test_backend_ops "[cpu]", test_backend_ops "[cuda]".
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace octet_test {

/// Device names every backend case runs on: "cuda" is CudaBackend on cuda:0 where octet was
/// built with CUDA and a GPU of compute capability >= 8.0 is present; elsewhere make_backend
/// refuses it (std::invalid_argument) and its cases report skipped.
inline const char* const kBackendDevices[] = {"cpu", "cuda"};

struct BackendCaseCounts {
  int ran = 0;      // cases whose body ran on a backend
  int skipped = 0;  // cases whose backend was unavailable
};
inline BackendCaseCounts& backend_case_counts() {
  static BackendCaseCounts counts;
  return counts;
}

/// atexit handler: exit code 77 (CTest: skipped) when this process only skipped cases.
inline void exit_skipped_if_nothing_ran() {
  const BackendCaseCounts& c = backend_case_counts();
  if (c.ran > 0 || c.skipped == 0) return;
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(77);
}

/// The backend for `device`, made once per process; nullptr (and `why` set) when make_backend
/// throws std::invalid_argument (unknown or unavailable device). Other exceptions propagate.
inline octet::Backend* backend_for(const std::string& device, std::string& why) {
  struct Entry {
    std::unique_ptr<octet::Backend> backend;
    std::string why;
  };
  static std::map<std::string, Entry> cache;
  auto it = cache.find(device);
  if (it == cache.end()) {
    Entry e;
    try {
      e.backend = octet::make_backend(device);
    } catch (const std::invalid_argument& ex) {
      e.why = ex.what();
    }
    it = cache.emplace(device, std::move(e)).first;
  }
  why = it->second.why;
  return it->second.backend.get();
}

/// Runs body on `device`'s backend, or records a skip (see the file comment). The CPU backend
/// is never skipped: its absence is a failure.
inline void run_on_backend(const char* device, void (*body)(octet::Backend&)) {
  std::string why;
  octet::Backend* backend = backend_for(device, why);
  if (backend == nullptr && std::strcmp(device, "cpu") != 0) {
    if (backend_case_counts().skipped++ == 0) std::atexit(exit_skipped_if_nothing_ran);
    WARN("SKIPPED: backend \"" << device << "\" unavailable: " << why);
    return;
  }
  INFO("make_backend(\"" << device << "\"): " << why);
  REQUIRE(backend != nullptr);
  ++backend_case_counts().ran;
  INFO("backend " << backend->name());
  body(*backend);
}

#define OCTET_BACKEND_CASE_(device, op, body)                                    \
  TEST_CASE("backend " device ": " op, "[backend_ops][" device "]") {            \
    ::octet_test::run_on_backend(device, body);                                  \
  }
/// One TEST_CASE per device of kBackendDevices for `body` (void(octet::Backend&)).
#define BACKEND_TEST_CASE(op, body)        \
  OCTET_BACKEND_CASE_("cpu", op, body)     \
  OCTET_BACKEND_CASE_("cuda", op, body)

/// A typed array in backend memory: allocate + upload from the host, download back.
template <typename T>
struct DeviceArray {
  octet::Buffer buffer;
  int64_t size = 0;  // elements
  T* data() const { return buffer.as<T>(); }
};

/// Backend memory holding a copy of host (an empty vector gives an empty buffer, data() null).
template <typename T>
DeviceArray<T> to_device(octet::Backend& be, const std::vector<T>& host) {
  const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
  DeviceArray<T> a{be.allocate(bytes), static_cast<int64_t>(host.size())};
  if (bytes > 0) be.upload(a.buffer, 0, host.data(), bytes);
  return a;
}

/// `size` zeroed elements of backend memory.
template <typename T>
DeviceArray<T> device_zeros(octet::Backend& be, int64_t size) {
  return DeviceArray<T>{be.allocate(size * static_cast<int64_t>(sizeof(T))), size};
}

/// The array's contents, after all queued work.
template <typename T>
std::vector<T> to_host(octet::Backend& be, const DeviceArray<T>& a) {
  std::vector<T> host(static_cast<size_t>(a.size));
  if (a.size > 0) be.download(a.buffer, 0, host.data(), a.size * static_cast<int64_t>(sizeof(T)));
  return host;
}

}  // namespace octet_test
