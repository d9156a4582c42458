// The NCCL stand-in (include/nccl.h): communicators whose ranks are threads
// of one process or processes of one machine (each with its own emulated
// device), meeting in a directory. A unique id names the directory
// (/tmp/ampd-nccl-emu-...); ranks join in ncclCommInitRank (which, as
// NCCL's, returns once all have joined), and each collective is a
// generation: every rank writes its input to a file of that generation,
// waits for the others' files, and computes the result from all of them in
// rank order, so every rank gets the same bits (and in-place calls are
// safe: the inputs are copies). A rank deletes its file of a generation
// once every rank has posted the next one (they have all read it then). A
// rank that never arrives is an error after kTimeout rather than a hang,
// so that a broken test fails.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

constexpr auto kTimeout = std::chrono::seconds(60);

bool IsDevice(const void* p, size_t bytes) { return cudaemu::IsDeviceRange(p, bytes); }

// Writes `bytes` to `path` whole (a temporary name, then a rename).
bool WriteWhole(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

bool ReadWhole(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Waits until every path exists (polling, ever less often), up to kTimeout.
bool WaitForAll(const std::vector<std::string>& paths) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  auto pause = std::chrono::microseconds(20);
  for (size_t next = 0; next < paths.size();) {
    if (Exists(paths[next])) {
      ++next;
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  return true;
}

}  // namespace

struct ncclComm {
  std::string dir;
  int size = 0;
  int rank = 0;
  uint64_t generation = 0;

  std::string File(const std::string& what, int r) const {
    return dir + "/" + what + ".r" + std::to_string(r);
  }
  std::string Generation(uint64_t g, int r) const { return File("g" + std::to_string(g), r); }
  std::vector<std::string> All(const std::string& what) const {
    std::vector<std::string> paths;
    for (int r = 0; r < size; ++r) paths.push_back(File(what, r));
    return paths;
  }
};

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::memset(id->internal, 0, sizeof(id->internal));
  std::snprintf(id->internal, sizeof(id->internal), "/tmp/ampd-nccl-emu-%d-%u-%u-%llu",
                static_cast<int>(getpid()), rd(), rd(), static_cast<unsigned long long>(counter++));
  if (mkdir(id->internal, 0700) != 0) return ncclSystemError;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto c = new ncclComm;
  c->dir.assign(id.internal, strnlen(id.internal, sizeof(id.internal)));
  c->size = nranks;
  c->rank = rank;
  // Every rank says how many ranks it expects; a mismatch is the callers' bug.
  if (!WriteWhole(c->File("join", rank), std::to_string(nranks)) || !WaitForAll(c->All("join"))) {
    delete c;
    return ncclSystemError;
  }
  for (const std::string& path : c->All("join")) {
    std::string n;
    if (!ReadWhole(path, &n) || n != std::to_string(nranks)) {
      delete c;
      return ncclInvalidUsage;
    }
  }
  *comm = c;
  return ncclSuccess;
}

namespace {

// One rank's input to a collective: count, op (a reduction, or -1 - root
// for a broadcast), then the floats.
struct Posted {
  uint64_t count = 0;
  int64_t op = 0;
  std::vector<float> data;
};

std::string Encode(const float* send, size_t count, int op) {
  std::string bytes(16 + count * sizeof(float), '\0');
  const uint64_t n = count;
  const int64_t o = op;
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, &o, 8);
  if (count > 0) std::memcpy(bytes.data() + 16, send, count * sizeof(float));
  return bytes;
}

bool Decode(const std::string& bytes, Posted* p) {
  if (bytes.size() < 16) return false;
  std::memcpy(&p->count, bytes.data(), 8);
  std::memcpy(&p->op, bytes.data() + 8, 8);
  if (bytes.size() != 16 + p->count * sizeof(float)) return false;
  p->data.resize(p->count);
  if (p->count > 0) std::memcpy(p->data.data(), bytes.data() + 16, p->count * sizeof(float));
  return true;
}

// One rank's part in a collective.
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
  ncclComm& c = *comm;
  const uint64_t g = c.generation++;
  if (!WriteWhole(c.Generation(g, c.rank), Encode(static_cast<const float*>(send), count, op))) {
    return ncclSystemError;
  }
  std::vector<std::string> paths;
  for (int r = 0; r < c.size; ++r) paths.push_back(c.Generation(g, r));
  if (!WaitForAll(paths)) {
    std::fprintf(stderr, "nccl emulator: rank %d waited %lld s for its peers\n", c.rank,
                 static_cast<long long>(kTimeout.count()));
    return ncclSystemError;
  }
  // Every rank has posted generation g, so all have read g - 1.
  if (g > 0) std::remove(c.Generation(g - 1, c.rank).c_str());
  std::vector<Posted> in(c.size);
  for (int r = 0; r < c.size; ++r) {
    std::string bytes;
    if (!ReadWhole(paths[r], &bytes) || !Decode(bytes, &in[r])) return ncclInternalError;
    if (in[r].count != count || in[r].op != op) return ncclInvalidUsage;
  }
  std::vector<float> out(count);
  if (op < 0) {
    const int root = -1 - op;
    std::copy(in[root].data.begin(), in[root].data.end(), out.begin());
  } else {
    std::copy(in[0].data.begin(), in[0].data.end(), out.begin());
    for (int i = 1; i < c.size; ++i) {
      for (size_t k = 0; k < count; ++k) {
        const float x = in[i].data[k];
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
  if (count > 0) std::memcpy(recv, out.data(), count * sizeof(float));
  return ncclSuccess;
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
  if (datatype != ncclFloat32 || comm == nullptr || root < 0 || root >= comm->size) {
    return ncclInvalidArgument;
  }
  return Collective(sendbuff, recvbuff, count, -1 - root, comm, stream);
}

namespace {
thread_local int group_depth = 0;  // NCCL's groups nest, per thread
}  // namespace

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;  // an end without a start
  --group_depth;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  // As NCCL's, without waiting for the peers: they may still be reading this
  // rank's last input, so it stays, with the join files and the directory
  // (a few small files per communicator under /tmp; the emulator's only
  // leftovers).
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
