#ifndef AMPD_TESTS_ENGINE_DIST_NCCL_RANKS_H_
#define AMPD_TESTS_ENGINE_DIST_NCCL_RANKS_H_

// NCCL ranks for the GPU suite's tests and their emulator runs: threads of
// one process, each with a connected NcclProcessGroup.

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/dist/nccl_process_group.h"
#include "gtest/gtest.h"

namespace ampd::engine::dist::testing {

// Whether NCCL runs on the CUDA emulator here (its ranks share its device).
inline bool NcclEmulated() {
  int count = 0;
  std::string name;
  return NcclAvailable() && NcclDevices(&count, &name).ok() &&
         name.find("emulator") != std::string::npos;
}

// Whether `size` ranks can run here, and on which device each; the reason
// when not (no GPU, a build without CUDA, fewer GPUs than ranks).
inline bool Devices(int size, std::vector<int>* devices, std::string* why) {
  if (!NcclAvailable()) {
    *why = "this build has no NCCL (no CUDA)";
    return false;
  }
  int count = 0;
  std::string name;
  if (absl::Status s = NcclDevices(&count, &name); !s.ok() || count == 0) {
    *why = absl::StrCat("no usable GPU: ", s.message());
    return false;
  }
  // The emulator's ranks are threads sharing its one device; NCCL on a GPU
  // takes one device per rank.
  const bool emulated = name.find("emulator") != std::string::npos;
  if (!emulated && count < size) {
    *why = absl::StrCat(size, " ranks need ", size, " GPUs; this machine has ", count);
    return false;
  }
  devices->clear();
  for (int r = 0; r < size; ++r) devices->push_back(emulated ? 0 : r);
  return true;
}

// body(rank, group) on `size` connected ranks, one thread each.
inline void OnRanks(int size, const std::function<void(int, NcclProcessGroup&)>& body) {
  std::vector<int> devices;
  std::string why;
  if (!Devices(size, &devices, &why)) GTEST_SKIP() << why;
  std::shared_ptr<RendezvousStore> store = InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      NcclOptions o;
      o.rank = r;
      o.size = size;
      o.device = devices[r];
      o.store = store;
      absl::StatusOr<std::unique_ptr<NcclProcessGroup>> group = ConnectNccl(o);
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_TRUE((*group)->device_memory());
      EXPECT_EQ((*group)->rank(), r);
      EXPECT_EQ((*group)->size(), size);
      body(r, **group);
      EXPECT_TRUE((*group)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace ampd::engine::dist::testing

#endif  // AMPD_TESTS_ENGINE_DIST_NCCL_RANKS_H_
