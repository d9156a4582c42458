#include "engine/dist/nccl_process_group.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/dist/nccl_comm.h"

namespace ampd::engine::dist {
namespace {

absl::Status Check(const std::string& error, int rank) {
  if (error.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(error, " (NCCL rank ", rank, ")"));
}

class Group : public NcclProcessGroup {
 public:
  Group(nccl::Comm* comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~Group() override { nccl::Destroy(comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduceSum(float* data, int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative element count");
    return Check(nccl::AllReduce(comm_, data, n, /*max=*/false), rank_);
  }
  absl::Status AllReduceMax(float* data, int64_t n) override {
    if (n < 0) return absl::InvalidArgumentError("all-reduce of a negative element count");
    return Check(nccl::AllReduce(comm_, data, n, /*max=*/true), rank_);
  }
  absl::Status Broadcast(float* data, int64_t n, int root) override {
    if (n < 0 || root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast of ", n, " elements from rank ", root, " in a world of ", size_));
    }
    return Check(nccl::Broadcast(comm_, data, n, root), rank_);
  }
  absl::Status Barrier() override { return Check(nccl::Barrier(comm_), rank_); }

  absl::StatusOr<float*> Alloc(int64_t n) override {
    float* p = nullptr;
    if (absl::Status s = Check(nccl::DeviceAlloc(comm_, &p, n), rank_); !s.ok()) return s;
    return p;
  }
  void Free(float* p) override { nccl::DeviceFree(comm_, p); }
  absl::Status ToDevice(float* dst, const float* src, int64_t n) override {
    return Check(nccl::ToDevice(comm_, dst, src, n), rank_);
  }
  absl::Status ToHost(float* dst, const float* src, int64_t n) override {
    return Check(nccl::ToHost(comm_, dst, src, n), rank_);
  }

  absl::Status AllReduceSumAfter(void* ready, const std::vector<DeviceBuffer>& buffers) override {
    std::vector<float*> data;
    std::vector<int64_t> n;
    for (const DeviceBuffer& b : buffers) {
      if (b.n < 0) return absl::InvalidArgumentError("all-reduce of a negative element count");
      data.push_back(b.data);
      n.push_back(b.n);
    }
    return Check(
        nccl::AllReduceSumAfter(comm_, ready, data.data(), n.data(), static_cast<int>(data.size())),
        rank_);
  }
  absl::StatusOr<void*> RecordDone() override {
    void* done = nullptr;
    if (absl::Status s = Check(nccl::RecordDone(comm_, &done), rank_); !s.ok()) return s;
    return done;
  }
  absl::Status TakeTimes(void* since, double* collective_s, double* tail_s) override {
    float collective_ms = 0, tail_ms = 0;
    absl::Status s = Check(nccl::TakeTimes(comm_, since, &collective_ms, &tail_ms), rank_);
    *collective_s = collective_ms / 1e3;
    *tail_s = tail_ms / 1e3;
    return s;
  }

 private:
  nccl::Comm* comm_;
  int rank_, size_;
};

}  // namespace

bool NcclAvailable() { return nccl::Available(); }

absl::Status NcclDevices(int* count, std::string* first_name) {
  const std::string e = nccl::Devices(count, first_name);
  return e.empty() ? absl::OkStatus() : absl::UnavailableError(e);
}

absl::StatusOr<std::unique_ptr<NcclProcessGroup>> ConnectNccl(const NcclOptions& o) {
  if (!nccl::Available()) {
    return absl::UnimplementedError("this ampd was built without CUDA, so without NCCL");
  }
  if (o.size < 1) return absl::InvalidArgumentError(absl::StrCat("world size ", o.size, " < 1"));
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", o.rank, " is outside [0, ", o.size, ")"));
  }
  if (o.store == nullptr) return absl::InvalidArgumentError("no rendezvous store");
  // Rank 0's unique id, through the store (NCCL's own bootstrap then
  // connects the ranks).
  const std::string key = o.prefix + "/nccl_unique_id";
  std::string id;
  if (o.rank == 0) {
    if (absl::Status s = Check(nccl::GetUniqueId(&id), 0); !s.ok()) return s;
    if (absl::Status s = o.store->Set(key, id); !s.ok()) return s;
  } else {
    absl::StatusOr<std::string> got = o.store->Get(key, o.timeout);
    if (!got.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL rank ", o.rank, ": rank 0's unique id never came: ", got.status().message()));
    }
    id = *std::move(got);
  }
  nccl::Comm* comm = nullptr;
  if (absl::Status s = Check(nccl::Init(o.device, o.size, o.rank, id, &comm), o.rank); !s.ok()) {
    return s;
  }
  return std::unique_ptr<NcclProcessGroup>(new Group(comm, o.rank, o.size));
}

namespace {

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectAsProcessGroup(const NcclOptions& o) {
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> group = ConnectNccl(o);
  if (!group.ok()) return group.status();
  return std::unique_ptr<ProcessGroup>(std::move(*group));
}

[[maybe_unused]] const bool kRegistered = [] {
  RegisterNccl({&ConnectAsProcessGroup, &NcclDevices});
  return true;
}();

}  // namespace

}  // namespace ampd::engine::dist
