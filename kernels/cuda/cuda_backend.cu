// CudaBackend (cuda_backend_impl.h): the device, buffers, transfers and CUDA graphs, and the
// factory functions of cuda_backend.h.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

#include "kernels/common/check.h"
#include "kernels/cuda/cuda_backend_impl.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_scope.h"

namespace octet {

CudaBackend::CudaBackend(int device, const cudaDeviceProp& prop) : device_(device), prop_(prop) {
  OCTET_CUDA_CHECK(cudaSetDevice(device_));
  // First: it throws on a bad OCTET_ATTENTION_BACKEND, before anything here needs freeing.
  attention_ = std::make_unique<ck::PagedAttention>();  // on device_ (its SM count)
  OCTET_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  OCTET_CUDA_CHECK(cudaMallocHost(&staging_, kStagingBytes));
  lt_ = std::make_unique<ck::LtGemm>(stream_, prop_.major, prop_.minor);
  if (!lt_->has_fp8()) {
    std::fprintf(stderr,
                 "octet: warning: %s has no FP8 tensor cores (sm_%d%d < sm_89): FP8 linear "
                 "layers run W8A16 (E4M3 weights and activations dequantized to BF16 per "
                 "call, cuBLASLt BF16 GEMM), slower than FP8 on sm_89+\n",
                 name().c_str(), prop_.major, prop_.minor);
  }
}

CudaBackend::~CudaBackend() {
  // No aborts in a destructor: a failing call at exit is ignored.
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  lt_.reset();
  attention_.reset();
  scratch_.reset();
  cudaFreeHost(staging_);
  cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const {
  const double gib = static_cast<double>(prop_.totalGlobalMem) / double(int64_t{1} << 30);
  char gib_text[32];
  std::snprintf(gib_text, sizeof(gib_text), "%.0f", gib);
  return "cuda:" + std::to_string(device_) + " (" + std::string(prop_.name) + ", sm_" +
         std::to_string(prop_.major) + std::to_string(prop_.minor) + ", " + gib_text + " GiB)";
}

DeviceMemoryInfo CudaBackend::memory_info() const {
  ck::DeviceScope on(device_);
  size_t free_bytes = 0, total_bytes = 0;
  OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

WorkspaceBytes CudaBackend::reserve_workspace(const WorkspaceShape& shape) {
  OCTET_CHECK(capture_key_ < 0, "reserve_workspace during graph capture ", capture_key_);
  const WorkspaceBytes b = workspace_bytes(shape);
  ck::DeviceScope on(device_);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued work may use the old buffers
  scratch_.reset();  // freed unless a graph holds it
  scratch_floats_ = 0;
  scratch_reserved_ = false;
  if (b.gemm_scratch > 0) {
    scratch_ = ck::device_buffer(device_, static_cast<size_t>(b.gemm_scratch));
    scratch_floats_ = static_cast<size_t>(b.gemm_scratch) / sizeof(float);
  }
  scratch_reserved_ = true;
  attention_->reserve(
      ck::AttentionWorkspace{b.attention_plan, b.attention_partials / int64_t{sizeof(float)},
                             b.attention_prefill},
      stream_);
  return b;
}

Buffer CudaBackend::allocate(int64_t bytes) {
  OCTET_CHECK(bytes >= 0, "allocate: negative size ", bytes);
  OCTET_CHECK(capture_key_ < 0, "allocate during graph capture ", capture_key_);
  if (bytes == 0) return {};
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it
    throw std::bad_alloc();
  }
  OCTET_CUDA_CHECK(err);
  OCTET_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), stream_));
  const int device = device_;
  // cudaFree waits for the work that may still use the memory (it synchronises the device).
  // The caller's current device is restored: a rank thread freeing a peer's buffer keeps
  // its own GPU.
  auto free_on_device = [device](void* q) {
    int current = device;
    const bool known = cudaGetDevice(&current) == cudaSuccess;
    cudaSetDevice(device);
    cudaFree(q);
    if (known) cudaSetDevice(current);
  };
  return Buffer(std::shared_ptr<void>(p, free_on_device), bytes);
}

void CudaBackend::upload(const Buffer& dst, int64_t offset, const void* src, int64_t bytes) {
  OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= dst.bytes(), "upload: ", bytes,
              " bytes at ", offset, " overflow a buffer of ", dst.bytes());
  OCTET_CHECK(capture_key_ < 0, "upload during graph capture ", capture_key_);
  if (bytes == 0) return;
  OCTET_CUDA_CHECK(cudaMemcpyAsync(static_cast<uint8_t*>(dst.data()) + offset, src,
                                   static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  // From pageable memory the call returns once src is staged; from pinned memory the copy is
  // asynchronous, so wait for it before the caller may reuse src.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, src) == cudaSuccess && attr.type == cudaMemoryTypeHost) {
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  cudaGetLastError();  // cudaPointerGetAttributes may leave an error for pageable pointers
}

void CudaBackend::download(const Buffer& src, int64_t offset, void* dst, int64_t bytes) {
  OCTET_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= src.bytes(), "download: ", bytes,
              " bytes at ", offset, " overflow a buffer of ", src.bytes());
  OCTET_CHECK(capture_key_ < 0, "download during graph capture ", capture_key_);
  download_raw(static_cast<const uint8_t*>(src.data()) + offset, dst, bytes);
}

void CudaBackend::synchronize() {
  OCTET_CHECK(capture_key_ < 0, "synchronize during graph capture ", capture_key_);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::begin_capture(int64_t key) {
  OCTET_CHECK(key >= 0 && capture_key_ < 0, "begin_capture: graph ", key, " while capturing ",
              capture_key_);
  // The graph replaces any of this key: wait for its last replay before freeing it.
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    OCTET_CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
    graphs_.erase(it);
  }
  attention_->begin_capture();
  capture_scratch_.clear();
  // Relaxed: the capture may cudaMalloc its attention plans (and, before reserve_workspace,
  // scratch); nothing on this stream may synchronise (the ops above refuse to).
  OCTET_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  capture_key_ = key;
}

void CudaBackend::end_capture() {
  OCTET_CHECK(capture_key_ >= 0, "end_capture without begin_capture");
  const int64_t key = capture_key_;
  capture_key_ = -1;
  cudaGraph_t graph = nullptr;
  OCTET_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  Graph g;
  g.kernels = kernel_nodes(graph);
  const cudaError_t err = cudaGraphInstantiate(&g.exec, graph, 0);
  cudaGraphDestroy(graph);
  OCTET_CUDA_CHECK(err);
  g.attention = attention_->end_capture();
  g.scratch = std::move(capture_scratch_);
  capture_scratch_.clear();
  graphs_.emplace(key, std::move(g));
}

int64_t CudaBackend::graph_kernel_count(int64_t key) const {
  const auto it = graphs_.find(key);
  return it == graphs_.end() ? -1 : it->second.kernels;
}

void CudaBackend::drop_graph(int64_t key) {
  const auto it = graphs_.find(key);
  if (it == graphs_.end()) return;
  int current = device_;
  const bool known = cudaGetDevice(&current) == cudaSuccess;
  OCTET_CUDA_CHECK(cudaSetDevice(device_));
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));  // its last replay has finished
  OCTET_CUDA_CHECK(cudaGraphExecDestroy(it->second.exec));
  graphs_.erase(it);
  if (known) cudaSetDevice(current);
}

void CudaBackend::replay(int64_t key, const PagedAttentionBatch& batch) {
  OCTET_CHECK(capture_key_ < 0, "replay during graph capture ", capture_key_);
  const auto it = graphs_.find(key);
  OCTET_CHECK(it != graphs_.end(), "replay: no graph ", key);
  // The plans go up first on the same stream, then the graph reads them.
  ck::PagedAttention::prepare_replay(*it->second.attention, batch, stream_);
  OCTET_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream_));
}

void CudaBackend::download_raw(const void* src, void* dst, int64_t bytes) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t done = 0; done < bytes;) {
    const size_t chunk = static_cast<size_t>(std::min<int64_t>(bytes - done, kStagingBytes));
    OCTET_CUDA_CHECK(cudaMemcpyAsync(staging_, s + done, chunk, cudaMemcpyDeviceToHost, stream_));
    OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(d + done, staging_, chunk);
    done += static_cast<int64_t>(chunk);
  }
}

int64_t CudaBackend::kernel_nodes(cudaGraph_t graph) {
  size_t count = 0;
  if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return -1;
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0 && cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return -1;
  int64_t kernels = 0;
  for (size_t i = 0; i < count; ++i) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess) return -1;
    kernels += type == cudaGraphNodeTypeKernel ? 1 : 0;
  }
  return kernels;
}

void* cuda_backend_stream(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  OCTET_CHECK(cuda != nullptr, "cuda_backend_stream: ", backend.name(), " is not a CUDA backend");
  return static_cast<void*>(cuda->stream());
}

int cuda_backend_device(const Backend& backend) {
  const auto* cuda = dynamic_cast<const CudaBackend*>(&backend);
  OCTET_CHECK(cuda != nullptr, "cuda_backend_device: ", backend.name(), " is not a CUDA backend");
  return cuda->device();
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

int cuda_device_capability(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return prop.major * 10 + prop.minor;
}

std::unique_ptr<Backend> make_cuda_backend(int index) {
  const std::string device = "cuda:" + std::to_string(index);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument("device '" + device + "': no usable CUDA GPU (" +
                                cudaGetErrorString(err) + ")");
  }
  if (count == 0) throw std::invalid_argument("device '" + device + "': no CUDA GPU found");
  if (index < 0 || index >= count)
    throw std::invalid_argument("device '" + device + "': only " + std::to_string(count) +
                                " CUDA GPU(s)");
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    throw std::invalid_argument("device '" + device + "': cannot query it");
  }
  if (prop.major < 8)
    throw std::invalid_argument("device '" + device + "' (" + prop.name + ", sm_" +
                                std::to_string(prop.major) + std::to_string(prop.minor) +
                                "): compute capability 8.0 or newer is needed");
  return std::make_unique<CudaBackend>(index, prop);
}

}  // namespace octet
