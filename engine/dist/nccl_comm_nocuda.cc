// A build without CUDA (--config=cpu, or no toolkit): NCCL is not there, and
// every call says so rather than pretending.
#include "engine/dist/nccl_comm.h"

namespace ampd::engine::dist::nccl {
namespace {
const char kNone[] = "this ampd was built without CUDA, so without NCCL";
}  // namespace

struct Comm {};

bool Available() { return false; }
std::string Devices(int* count, std::string*) {
  *count = 0;
  return kNone;
}
std::string GetUniqueId(std::string*) { return kNone; }
std::string Init(int, int, int, const std::string&, Comm** comm) {
  *comm = nullptr;
  return kNone;
}
std::string AllReduce(Comm*, float*, int64_t, bool) { return kNone; }
std::string Broadcast(Comm*, float*, int64_t, int) { return kNone; }
std::string Barrier(Comm*) { return kNone; }
std::string AllReduceSumAfter(Comm*, void*, float* const*, const int64_t*, int) { return kNone; }
std::string RecordDone(Comm*, void** done) {
  *done = nullptr;
  return kNone;
}
std::string TakeTimes(Comm*, void*, float* collective_ms, float* tail_ms) {
  *collective_ms = *tail_ms = 0;
  return kNone;
}
std::string ToDevice(Comm*, float*, const float*, int64_t) { return kNone; }
std::string ToHost(Comm*, float*, const float*, int64_t) { return kNone; }
std::string DeviceAlloc(Comm*, float**, int64_t) { return kNone; }
void DeviceFree(Comm*, float*) {}
void Destroy(Comm*) {}

}  // namespace ampd::engine::dist::nccl
