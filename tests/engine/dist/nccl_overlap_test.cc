// The hand-off the trainer's device step overlaps the backward with
// (Backend::MarkStream / WaitForMarker, ProcessGroup::AllReduceSumAfter /
// RecordDone / TakeTimes), in the GPU suite (tools/gpu_bundle: a 1-GPU world)
// and on the CUDA emulator (2 ranks as threads, in CI,
// tests/engine/cuda/emu:nccl_overlap_emu_test). Each rank fills two buffers
// on its backend's stream and queues their all-reduce behind a marker,
// without waiting: the sums must see the fills (NCCL's stream waited for
// the marker), and what the backend's stream reads after waiting for
// RecordDone must be the sums (it waited for NCCL's stream).

#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/tensor.h"
#include "engine/dist/nccl_process_group.h"
#include "gtest/gtest.h"
#include "tests/engine/dist/nccl_ranks.h"

namespace ampd::engine::dist {
namespace {

using core::DType;
using core::Tensor;

TEST(NcclOverlapTest, OverlappedAllReducesWaitForTheCallersStreamAndItForThem) {
  absl::StatusOr<backend::Backend*> be = backend::BackendFor(Device::kCuda);
  if (!be.ok()) GTEST_SKIP() << be.status();
  // The backend drives device 0, so on GPUs one rank; the emulator's ranks
  // are threads sharing its device.
  const int size = testing::NcclEmulated() ? 2 : 1;
  constexpr int64_t kN = 4099;
  testing::OnRanks(size, [&](int r, NcclProcessGroup& group) {
    ASSERT_TRUE(group.overlaps_device_work());
    Tensor a = (*be)->Allocate({kN}, DType::kF32, /*zero=*/false);
    Tensor b = (*be)->Allocate({kN}, DType::kF32, /*zero=*/false);
    for (int step = 0; step < 3; ++step) {  // the events are reused from step to step
      (*be)->Fill(a, r + 1.0 + step);
      (*be)->Fill(b, 10.0 * (r + 1));
      absl::StatusOr<void*> ready = (*be)->MarkStream();
      ASSERT_TRUE(ready.ok()) << ready.status();
      ASSERT_TRUE(group
                      .AllReduceSumAfter(*ready, {{static_cast<float*>(a.raw()), kN},
                                                  {static_cast<float*>(b.raw()), kN}})
                      .ok());
      absl::StatusOr<void*> done = group.RecordDone();
      ASSERT_TRUE(done.ok()) << done.status();
      ASSERT_TRUE((*be)->WaitForMarker(*done).ok());
      double want_a = 0, want_b = 0;
      for (int k = 0; k < size; ++k) {
        want_a += k + 1.0 + step;
        want_b += 10.0 * (k + 1);
      }
      const std::vector<float> got_a = a.ToFloats(), got_b = b.ToFloats();
      for (int64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(got_a[i], want_a) << "rank " << r << " step " << step << " @" << i;
        ASSERT_EQ(got_b[i], want_b) << "rank " << r << " step " << step << " @" << i;
      }
      double collective_s = -1, tail_s = -1;
      ASSERT_TRUE(group.TakeTimes(*ready, &collective_s, &tail_s).ok());
      EXPECT_GE(collective_s, 0);
      EXPECT_GE(tail_s, 0);
      // Taken: the next call sees no collectives.
      ASSERT_TRUE(group.TakeTimes(nullptr, &collective_s, &tail_s).ok());
      EXPECT_EQ(collective_s, 0);
    }
    // A negative count is refused before anything is queued.
    absl::StatusOr<void*> ready = (*be)->MarkStream();
    ASSERT_TRUE(ready.ok());
    EXPECT_EQ(group.AllReduceSumAfter(*ready, {{static_cast<float*>(a.raw()), -1}}).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// The CPU has no streams: the hand-off is refused rather than faked.
TEST(NcclOverlapTest, TheCpuHasNoStreamsToMark) {
  absl::StatusOr<backend::Backend*> cpu = backend::BackendFor(Device::kCpu);
  if (!cpu.ok()) GTEST_SKIP() << "no CPU backend linked";
  EXPECT_EQ((*cpu)->MarkStream().status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*cpu)->WaitForMarker(nullptr).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace ampd::engine::dist
