#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/dist/nccl_comm.h"

namespace ampd::engine::dist::nccl {

struct Comm {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* scratch = nullptr;  // the barrier's one float
  // Timed events around each overlapped group since TakeTimes (reused from
  // step to step), and the stream's latest RecordDone.
  std::vector<cudaEvent_t> starts, ends;
  size_t groups = 0;
  cudaEvent_t done = nullptr;
};

namespace {

std::string CudaErr(const std::string& call, cudaError_t err) {
  if (err == cudaSuccess) return "";
  cudaGetLastError();
  return call + ": " + cudaGetErrorString(err);
}

std::string NcclErr(const std::string& call, ncclResult_t r) {
  if (r == ncclSuccess) return "";
  return call + ": " + ncclGetErrorString(r);
}

// Waits for the communicator's stream: the collective's result is final.
std::string Wait(Comm* c, const std::string& what, ncclResult_t r) {
  if (std::string e = NcclErr(what, r); !e.empty()) return e;
  return CudaErr(what + " (cudaStreamSynchronize)", cudaStreamSynchronize(c->stream));
}

}  // namespace

bool Available() { return true; }

std::string Devices(int* count, std::string* first_name) {
  *count = 0;
  if (std::string e = CudaErr("cudaGetDeviceCount", cudaGetDeviceCount(count)); !e.empty()) {
    *count = 0;
    return e;
  }
  if (*count > 0) {
    cudaDeviceProp prop;
    if (std::string e = CudaErr("cudaGetDeviceProperties", cudaGetDeviceProperties(&prop, 0));
        !e.empty()) {
      return e;
    }
    *first_name = prop.name;
  }
  return "";
}

std::string GetUniqueId(std::string* id) {
  ncclUniqueId u;
  if (std::string e = NcclErr("ncclGetUniqueId", ncclGetUniqueId(&u)); !e.empty()) return e;
  id->assign(u.internal, sizeof(u.internal));
  return "";
}

std::string Init(int device, int size, int rank, const std::string& id, Comm** comm) {
  *comm = nullptr;
  ncclUniqueId u;
  if (id.size() != sizeof(u.internal)) {
    return "ncclCommInitRank: the unique id has " + std::to_string(id.size()) + " bytes, not " +
           std::to_string(sizeof(u.internal));
  }
  std::memcpy(u.internal, id.data(), sizeof(u.internal));
  auto* c = new Comm;
  c->device = device;
  std::string e = CudaErr("cudaSetDevice(" + std::to_string(device) + ")", cudaSetDevice(device));
  if (e.empty()) {
    e = CudaErr("cudaStreamCreateWithFlags",
                cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  }
  if (e.empty()) {
    e = CudaErr("cudaMalloc", cudaMalloc(reinterpret_cast<void**>(&c->scratch), sizeof(float)));
  }
  if (e.empty()) e = NcclErr("ncclCommInitRank", ncclCommInitRank(&c->comm, size, u, rank));
  if (!e.empty()) {
    Destroy(c);
    return e;
  }
  *comm = c;
  return "";
}

std::string AllReduce(Comm* c, float* data, int64_t n, bool max) {
  if (n == 0) return "";
  cudaSetDevice(c->device);
  return Wait(c, "ncclAllReduce",
              ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat32,
                            max ? ncclMax : ncclSum, c->comm, c->stream));
}

std::string Broadcast(Comm* c, float* data, int64_t n, int root) {
  if (n == 0) return "";
  cudaSetDevice(c->device);
  return Wait(
      c, "ncclBroadcast",
      ncclBroadcast(data, data, static_cast<size_t>(n), ncclFloat32, root, c->comm, c->stream));
}

std::string Barrier(Comm* c) { return AllReduce(c, c->scratch, 1, false); }

namespace {

// pool[i], created (timed) when missing.
std::string PooledEvent(std::vector<cudaEvent_t>* pool, size_t i, cudaEvent_t* e) {
  while (pool->size() <= i) {
    cudaEvent_t made = nullptr;
    if (std::string err =
            CudaErr("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&made, cudaEventDefault));
        !err.empty()) {
      return err;
    }
    pool->push_back(made);
  }
  *e = (*pool)[i];
  return "";
}

}  // namespace

std::string AllReduceSumAfter(Comm* c, void* ready, float* const* data, const int64_t* n,
                              int count) {
  cudaSetDevice(c->device);
  cudaEvent_t start = nullptr, end = nullptr;
  if (std::string e = PooledEvent(&c->starts, c->groups, &start); !e.empty()) return e;
  if (std::string e = PooledEvent(&c->ends, c->groups, &end); !e.empty()) return e;
  if (ready != nullptr) {
    if (std::string e = CudaErr("cudaStreamWaitEvent",
                                cudaStreamWaitEvent(c->stream, static_cast<cudaEvent_t>(ready), 0));
        !e.empty()) {
      return e;
    }
  }
  if (std::string e = CudaErr("cudaEventRecord", cudaEventRecord(start, c->stream)); !e.empty()) {
    return e;
  }
  if (std::string e = NcclErr("ncclGroupStart", ncclGroupStart()); !e.empty()) return e;
  std::string failed;
  for (int i = 0; i < count && failed.empty(); ++i) {
    if (n[i] == 0) continue;
    failed = NcclErr("ncclAllReduce", ncclAllReduce(data[i], data[i], static_cast<size_t>(n[i]),
                                                    ncclFloat32, ncclSum, c->comm, c->stream));
  }
  // A group once started is always ended, even after a failed call.
  if (std::string e = NcclErr("ncclGroupEnd", ncclGroupEnd()); failed.empty()) failed = e;
  if (!failed.empty()) return failed;
  ++c->groups;
  return CudaErr("cudaEventRecord", cudaEventRecord(end, c->stream));
}

std::string RecordDone(Comm* c, void** done) {
  cudaSetDevice(c->device);
  if (c->done == nullptr) {
    if (std::string e = CudaErr("cudaEventCreateWithFlags",
                                cudaEventCreateWithFlags(&c->done, cudaEventDefault));
        !e.empty()) {
      return e;
    }
  }
  *done = c->done;
  return CudaErr("cudaEventRecord", cudaEventRecord(c->done, c->stream));
}

std::string TakeTimes(Comm* c, void* since, float* collective_ms, float* tail_ms) {
  cudaSetDevice(c->device);
  *collective_ms = 0;
  *tail_ms = 0;
  const size_t groups = c->groups;
  c->groups = 0;
  for (size_t i = 0; i < groups; ++i) {
    float ms = 0;
    if (std::string e =
            CudaErr("cudaEventElapsedTime", cudaEventElapsedTime(&ms, c->starts[i], c->ends[i]));
        !e.empty()) {
      return e;
    }
    *collective_ms += ms;
  }
  if (since != nullptr && c->done != nullptr) {
    return CudaErr("cudaEventElapsedTime",
                   cudaEventElapsedTime(tail_ms, static_cast<cudaEvent_t>(since), c->done));
  }
  return "";
}

std::string ToDevice(Comm* c, float* dst, const float* src, int64_t n) {
  cudaSetDevice(c->device);
  std::string e =
      CudaErr("cudaMemcpyAsync (to the device)",
              cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, c->stream));
  if (!e.empty()) return e;
  return CudaErr("cudaStreamSynchronize", cudaStreamSynchronize(c->stream));
}

std::string ToHost(Comm* c, float* dst, const float* src, int64_t n) {
  cudaSetDevice(c->device);
  std::string e =
      CudaErr("cudaMemcpyAsync (to the host)",
              cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
  if (!e.empty()) return e;
  return CudaErr("cudaStreamSynchronize", cudaStreamSynchronize(c->stream));
}

std::string DeviceAlloc(Comm* c, float** ptr, int64_t n) {
  cudaSetDevice(c->device);
  return CudaErr("cudaMalloc", cudaMalloc(reinterpret_cast<void**>(ptr), n * sizeof(float)));
}

void DeviceFree(Comm* c, float* ptr) {
  cudaSetDevice(c->device);
  cudaFree(ptr);
}

void Destroy(Comm* c) {
  if (c == nullptr) return;
  cudaSetDevice(c->device);
  if (c->comm != nullptr) ncclCommDestroy(c->comm);
  if (c->scratch != nullptr) cudaFree(c->scratch);
  if (c->stream != nullptr) cudaStreamDestroy(c->stream);
  for (cudaEvent_t e : c->starts) cudaEventDestroy(e);
  for (cudaEvent_t e : c->ends) cudaEventDestroy(e);
  if (c->done != nullptr) cudaEventDestroy(c->done);
  delete c;
}

}  // namespace ampd::engine::dist::nccl
