// The NCCL stand-in (include/nccl.h): communicators of threads in this
// process. A unique id names a "clique"; ranks join it in ncclCommInitRank
// (which, as NCCL's, returns once all have joined), and each collective is a
// generation of the clique: every rank posts its buffers, and the last to
// arrive computes the result from all inputs (read before anything is
// written, so in-place calls are safe) into every rank's output, then wakes
// the others. A rank that never arrives is an error after kTimeout rather
// than a hang, so that a broken test fails.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "nccl.h"

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

struct Clique {
  int size = 0;
  int joined = 0;
  std::mutex mu;
  std::condition_variable cv;
  // The collective in progress.
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<const float*> send;
  std::vector<float*> recv;
  std::vector<size_t> counts;
  std::vector<int> ops;  // ncclRedOp_t, or -1 - root for a broadcast
  bool mismatch = false;
};

std::mutex& RegistryMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<std::string, std::shared_ptr<Clique>>& Registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Clique>>;
  return *r;
}

bool IsDevice(const void* p, size_t bytes) { return cudaemu::IsDeviceRange(p, bytes); }

}  // namespace

struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
};

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "emu-nccl-%u-%u-%llu", rd(), rd(),
                static_cast<unsigned long long>(counter++));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  std::shared_ptr<Clique> c;
  {
    std::lock_guard<std::mutex> lock(RegistryMu());
    const std::string key(id.internal, sizeof(id.internal));
    auto& slot = Registry()[key];
    if (!slot) {
      slot = std::make_shared<Clique>();
      slot->size = nranks;
      slot->send.resize(nranks);
      slot->recv.resize(nranks);
      slot->counts.resize(nranks);
      slot->ops.resize(nranks);
    }
    c = slot;
  }
  std::unique_lock<std::mutex> lock(c->mu);
  if (c->size != nranks) return ncclInvalidUsage;
  ++c->joined;
  c->cv.notify_all();
  if (!c->cv.wait_for(lock, kTimeout, [&] { return c->joined >= c->size; })) {
    return ncclSystemError;
  }
  *comm = new ncclComm{c, rank};
  return ncclSuccess;
}

namespace {

// One rank's part in a collective; `op` is a reduction or -1 - root.
ncclResult_t Collective(const void* send, void* recv, size_t count, int op, ncclComm_t comm,
                        cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (count > 0 &&
      (!IsDevice(send, count * sizeof(float)) || !IsDevice(recv, count * sizeof(float)))) {
    std::fprintf(stderr, "nccl emulator: a buffer is not device memory\n");
    return ncclInvalidArgument;
  }
  // The inputs are final once the work queued before the collective has run.
  if (cudaStreamSynchronize(stream) != cudaSuccess) return ncclUnhandledCudaError;
  Clique& c = *comm->clique;
  std::unique_lock<std::mutex> lock(c.mu);
  const int r = comm->rank;
  c.send[r] = static_cast<const float*>(send);
  c.recv[r] = static_cast<float*>(recv);
  c.counts[r] = count;
  c.ops[r] = op;
  const uint64_t generation = c.generation;
  if (++c.arrived == c.size) {
    c.mismatch = false;
    for (int i = 1; i < c.size; ++i) {
      if (c.counts[i] != c.counts[0] || c.ops[i] != c.ops[0]) c.mismatch = true;
    }
    if (!c.mismatch) {
      std::vector<float> out(count);
      if (op < 0) {
        const int root = -1 - op;
        std::copy(c.send[root], c.send[root] + count, out.begin());
      } else {
        std::copy(c.send[0], c.send[0] + count, out.begin());
        for (int i = 1; i < c.size; ++i) {
          for (size_t k = 0; k < count; ++k) {
            const float x = c.send[i][k];
            switch (op) {
              case ncclSum:
              case ncclAvg:
                out[k] += x;
                break;
              case ncclProd:
                out[k] *= x;
                break;
              case ncclMax:
                out[k] = std::max(out[k], x);
                break;
              case ncclMin:
                out[k] = std::min(out[k], x);
                break;
            }
          }
        }
        if (op == ncclAvg) {
          for (float& x : out) x /= static_cast<float>(c.size);
        }
      }
      for (int i = 0; i < c.size; ++i) std::copy(out.begin(), out.end(), c.recv[i]);
    }
    c.arrived = 0;
    ++c.generation;
    c.cv.notify_all();
  } else if (!c.cv.wait_for(lock, kTimeout, [&] { return c.generation != generation; })) {
    std::fprintf(stderr, "nccl emulator: rank %d waited %lld s for its peers\n", r,
                 static_cast<long long>(kTimeout.count()));
    return ncclSystemError;
  }
  return c.mismatch ? ncclInvalidUsage : ncclSuccess;
}

}  // namespace

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (datatype != ncclFloat32 || op < ncclSum || op > ncclAvg) return ncclInvalidArgument;
  return Collective(sendbuff, recvbuff, count, op, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (datatype != ncclFloat32 || comm == nullptr || root < 0 || root >= comm->clique->size) {
    return ncclInvalidArgument;
  }
  return Collective(sendbuff, recvbuff, count, -1 - root, comm, stream);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (a peer never arrived)";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage (the ranks' calls do not match)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}
