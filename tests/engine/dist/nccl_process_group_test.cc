// NCCL process groups, in the GPU suite (tools/gpu_bundle: a 1-GPU world,
// and 2 ranks where the machine has 2 GPUs) and on the CUDA emulator's NCCL
// stand-in (2 ranks as threads, in CI): sums, maxima and broadcasts of device
// buffers equal what the CPU computes from the ranks' inputs; the unique id
// travels through the rendezvous store; bad arguments are errors.

#include "engine/dist/nccl_process_group.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/engine/dist/nccl_ranks.h"

namespace ampd::engine::dist {
namespace {

using testing::Devices;
using testing::OnRanks;

// Rank r's input: random values, different on every rank.
std::vector<float> Input(int rank, size_t n) {
  std::mt19937 gen(1234 + rank);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

void CollectivesMatchTheCpu(int size) {
  constexpr size_t kN = 100003;  // not a multiple of anything NCCL likes
  OnRanks(size, [&](int rank, NcclProcessGroup& g) {
    absl::StatusOr<float*> buffer = g.Alloc(kN);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    std::vector<float> sum(kN, 0.0f), max(kN, -1e30f);
    for (int r = 0; r < size; ++r) {
      const std::vector<float> in = Input(r, kN);
      for (size_t k = 0; k < kN; ++k) {
        sum[k] += in[k];  // in rank order, as NCCL's ring on <= 2 ranks
        max[k] = std::max(max[k], in[k]);
      }
    }
    std::vector<float> out(kN);
    const std::vector<float> mine = Input(rank, kN);
    ASSERT_TRUE(g.ToDevice(*buffer, mine.data(), kN).ok());
    ASSERT_TRUE(g.AllReduceSum(*buffer, kN).ok());
    ASSERT_TRUE(g.ToHost(out.data(), *buffer, kN).ok());
    for (size_t k = 0; k < kN; ++k) {
      ASSERT_NEAR(out[k], sum[k], 1e-5f * (1 + std::abs(sum[k]))) << "rank " << rank << " @" << k;
    }
    ASSERT_TRUE(g.ToDevice(*buffer, mine.data(), kN).ok());
    ASSERT_TRUE(g.AllReduceMax(*buffer, kN).ok());
    ASSERT_TRUE(g.ToHost(out.data(), *buffer, kN).ok());
    EXPECT_EQ(out, max) << "rank " << rank;
    // Rank size-1's values reach every rank.
    ASSERT_TRUE(g.ToDevice(*buffer, mine.data(), kN).ok());
    ASSERT_TRUE(g.Broadcast(*buffer, kN, size - 1).ok());
    ASSERT_TRUE(g.ToHost(out.data(), *buffer, kN).ok());
    EXPECT_EQ(out, Input(size - 1, kN)) << "rank " << rank;
    // AMP's found-inf flag: one rank's inf is every rank's.
    float flag = rank == 0 ? 1.0f : 0.0f;
    ASSERT_TRUE(g.ToDevice(*buffer, &flag, 1).ok());
    ASSERT_TRUE(g.AllReduceMax(*buffer, 1).ok());
    ASSERT_TRUE(g.ToHost(&flag, *buffer, 1).ok());
    EXPECT_EQ(flag, 1.0f);
    EXPECT_FALSE(g.Broadcast(*buffer, 1, size).ok());  // no such root
    g.Free(*buffer);
  });
}

TEST(NcclProcessGroupTest, AOneRankWorldLeavesItsBuffersAsTheyAre) { CollectivesMatchTheCpu(1); }

TEST(NcclProcessGroupTest, TwoRanksSumMaxAndBroadcastAsTheCpu) { CollectivesMatchTheCpu(2); }

TEST(NcclProcessGroupTest, BadArgumentsAndAMissingRankZeroAreErrors) {
  std::vector<int> devices;
  std::string why;
  if (!Devices(1, &devices, &why)) GTEST_SKIP() << why;
  NcclOptions o;
  o.store = InProcessStore();
  o.rank = 2;
  o.size = 2;
  EXPECT_EQ(ConnectNccl(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.rank = 0;
  o.store = nullptr;
  EXPECT_EQ(ConnectNccl(o).status().code(), absl::StatusCode::kInvalidArgument);
  // Rank 1 whose rank 0 never publishes the id: an error within the timeout.
  o.store = InProcessStore();
  o.rank = 1;
  o.timeout = std::chrono::milliseconds(200);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<NcclProcessGroup>> g = ConnectNccl(o);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded) << g.status();
  EXPECT_NE(g.status().message().find("unique id"), std::string::npos) << g.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace ampd::engine::dist
