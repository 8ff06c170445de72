// NcclCommunicator over NCCL's C API (nccl.h; host code, no kernels of its own).
#include "kernels/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/common/check.h"

static_assert(octet::cuda::kNcclUniqueIdBytes == NCCL_UNIQUE_ID_BYTES,
              "the rendezvous id size must be NCCL's");

namespace octet::cuda {

namespace {

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += std::string(" (") + last + ")";
  return s;
}

void throw_if_nccl(ncclResult_t r, const std::string& what, ncclComm_t comm = nullptr) {
  if (r != ncclSuccess) throw std::runtime_error("NCCL: " + what + ": " + nccl_error(r, comm));
}

void throw_if_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    throw std::runtime_error("CUDA: " + what + ": " + cudaGetErrorString(e));
}

std::string where(int rank, int world_size, int device) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(world_size) + " on cuda:" +
         std::to_string(device);
}

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }

}  // namespace

NcclUniqueId nccl_unique_id() {
  ncclUniqueId id;
  throw_if_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  NcclUniqueId out;
  std::memcpy(out.data(), id.internal, out.size());
  return out;
}

int nccl_version() {
  int v = 0;
  throw_if_nccl(ncclGetVersion(&v), "ncclGetVersion");
  return v;
}

NcclCommunicator::NcclCommunicator(const NcclUniqueId& id, int rank, int world_size, int device,
                                   void* stream)
    : rank_(rank), world_size_(world_size), device_(device), stream_(stream) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("NcclCommunicator: rank " + std::to_string(rank) +
                                " outside [0, world_size " + std::to_string(world_size) + ")");
  throw_if_cuda(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.data(), id.size());
  ncclComm_t comm = nullptr;
  throw_if_nccl(ncclCommInitRank(&comm, world_size, nid, rank),
                "ncclCommInitRank (" + where(rank, world_size, device) + ")");
  comm_ = comm;
}

NcclCommunicator::NcclCommunicator(Adopt, void* comm, int rank, int world_size, int device,
                                   void* stream)
    : comm_(comm), rank_(rank), world_size_(world_size), device_(device), stream_(stream) {}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr && !aborted_) ncclCommDestroy(as_comm(comm_));
}

void NcclCommunicator::abort() {
  if (comm_ == nullptr || aborted_.exchange(true)) return;
  ncclCommAbort(as_comm(comm_));
}

namespace {

void check_nccl(ncclResult_t r, const char* op, ncclComm_t comm, int rank, int world, int dev) {
  OCTET_CHECK(r == ncclSuccess, op, " failed on ", where(rank, world, dev), ": ",
              nccl_error(r, comm));
}

}  // namespace

void NcclCommunicator::all_reduce_sum(float* buf, int64_t count) {
  OCTET_CHECK(!aborted_, "all_reduce_sum after abort()");
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), "all_reduce_sum: count ", count);
  if (count == 0) return;
  check_nccl(ncclAllReduce(buf, buf, static_cast<size_t>(count), ncclFloat32, ncclSum,
                           as_comm(comm_), as_stream(stream_)),
             "ncclAllReduce(sum)", as_comm(comm_), rank_, world_size_, device_);
}

void NcclCommunicator::all_reduce_sum_bf16(uint16_t* buf, int64_t count) {
  OCTET_CHECK(!aborted_, "all_reduce_sum_bf16 after abort()");
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), "all_reduce_sum_bf16: count ",
              count);
  if (count == 0) return;
  check_nccl(ncclAllReduce(buf, buf, static_cast<size_t>(count), ncclBfloat16, ncclSum,
                           as_comm(comm_), as_stream(stream_)),
             "ncclAllReduce(bf16 sum)", as_comm(comm_), rank_, world_size_, device_);
}

void NcclCommunicator::all_reduce_max(float* buf, int64_t count) {
  OCTET_CHECK(!aborted_, "all_reduce_max after abort()");
  OCTET_CHECK(count >= 0 && (buf != nullptr || count == 0), "all_reduce_max: count ", count);
  if (count == 0) return;
  check_nccl(ncclAllReduce(buf, buf, static_cast<size_t>(count), ncclFloat32, ncclMax,
                           as_comm(comm_), as_stream(stream_)),
             "ncclAllReduce(max)", as_comm(comm_), rank_, world_size_, device_);
}

void NcclCommunicator::all_gather(const float* send, int64_t count, float* recv) {
  OCTET_CHECK(!aborted_, "all_gather after abort()");
  OCTET_CHECK(count >= 0 && ((send != nullptr && recv != nullptr) || count == 0),
              "all_gather: count ", count);
  if (count == 0) return;
  check_nccl(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat32, as_comm(comm_),
                           as_stream(stream_)),
             "ncclAllGather", as_comm(comm_), rank_, world_size_, device_);
}

void NcclCommunicator::broadcast(void* buf, int64_t bytes, int root) {
  OCTET_CHECK(!aborted_, "broadcast after abort()");
  OCTET_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root, " of world_size ",
              world_size_);
  OCTET_CHECK(bytes >= 0 && (buf != nullptr || bytes == 0), "broadcast: bytes ", bytes);
  if (bytes == 0) return;
  check_nccl(ncclBroadcast(buf, buf, static_cast<size_t>(bytes), ncclUint8, root,
                           as_comm(comm_), as_stream(stream_)),
             "ncclBroadcast", as_comm(comm_), rank_, world_size_, device_);
}

std::vector<std::unique_ptr<NcclCommunicator>> make_nccl_communicators(
    const std::vector<int>& devices, const std::vector<void*>& streams) {
  if (devices.empty() || devices.size() != streams.size())
    throw std::invalid_argument("make_nccl_communicators: " + std::to_string(devices.size()) +
                                " devices and " + std::to_string(streams.size()) + " streams");
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        throw std::invalid_argument("make_nccl_communicators: cuda:" +
                                    std::to_string(devices[i]) +
                                    " listed twice (NCCL runs one rank per GPU)");
  const int world = static_cast<int>(devices.size());
  ncclUniqueId id;
  throw_if_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  int saved_device = 0;
  throw_if_cuda(cudaGetDevice(&saved_device), "cudaGetDevice");
  std::vector<ncclComm_t> comms(world, nullptr);
  throw_if_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < world; ++r) {
    const cudaError_t e = cudaSetDevice(devices[r]);
    if (e != cudaSuccess) {
      ncclGroupEnd();
      throw_if_cuda(e, "cudaSetDevice(" + std::to_string(devices[r]) + ")");
    }
    const ncclResult_t res = ncclCommInitRank(&comms[r], world, id, r);
    if (res != ncclSuccess) {
      ncclGroupEnd();
      throw_if_nccl(res, "ncclCommInitRank (" + where(r, world, devices[r]) + ")");
    }
  }
  throw_if_nccl(ncclGroupEnd(), "ncclGroupEnd (initialising " + std::to_string(world) +
                                    " ranks)");
  cudaSetDevice(saved_device);
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  out.reserve(world);
  for (int r = 0; r < world; ++r)
    out.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
        NcclCommunicator::Adopt{}, comms[r], r, world, devices[r], streams[r])));
  return out;
}

}  // namespace octet::cuda
