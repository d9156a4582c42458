// Gloo process groups over loopback, ranks as threads of this process: sums,
// maxima and DDP's bucketed average equal what one process computes; DDP's
// bucket assignment; a peer that never arrives is an error, not a hang.

#include "engine/dist/process_group.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/dist/gradient_buckets.h"
#include "engine/dist/overlapped_reducer.h"
#include "gtest/gtest.h"

namespace ampd::engine::dist {
namespace {

// Runs body(rank, group) on `size` connected ranks, one thread each.
void OnRanks(int size, const std::function<void(int, ProcessGroup&)>& body) {
  std::shared_ptr<RendezvousStore> store = InProcessStore();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.rank = r;
      o.size = size;
      o.store = store;
      o.timeout = std::chrono::seconds(20);
      absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ConnectGloo(o);
      ASSERT_TRUE(group.ok()) << group.status();
      EXPECT_EQ((*group)->rank(), r);
      EXPECT_EQ((*group)->size(), size);
      body(r, **group);
      EXPECT_TRUE((*group)->Barrier().ok());  // leave together
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ProcessGroupTest, AllReduceSumsAndMaxesOverEveryRank) {
  for (int size : {2, 3}) {
    OnRanks(size, [&](int rank, ProcessGroup& g) {
      std::vector<float> x = {1.0f * rank, 2.0f, -1.0f * rank, 0.5f};
      ASSERT_TRUE(g.AllReduceSum(x.data(), 4).ok());
      const float ranks_sum = size * (size - 1) / 2.0f;
      EXPECT_EQ(x, (std::vector<float>{ranks_sum, 2.0f * size, -ranks_sum, 0.5f * size}))
          << "rank " << rank << " of " << size;
      // AMP's found-inf flag: any rank's 1 is every rank's 1.
      float found_inf = rank == size - 1 ? 1.0f : 0.0f;
      ASSERT_TRUE(g.AllReduceMax(&found_inf, 1).ok());
      EXPECT_EQ(found_inf, 1.0f);
      ASSERT_TRUE(g.Barrier().ok());
    });
  }
}

TEST(ProcessGroupTest, BroadcastGivesEveryRankTheRootsValues) {
  for (int root : {0, 2}) {
    OnRanks(3, [&](int rank, ProcessGroup& g) {
      std::vector<float> x = {1.0f * rank, -0.0f, 3.5f + rank};
      ASSERT_TRUE(g.Broadcast(x.data(), 3, root).ok());
      EXPECT_EQ(x, (std::vector<float>{1.0f * root, -0.0f, 3.5f + root})) << "rank " << rank;
      EXPECT_EQ(g.Broadcast(x.data(), 3, 3).code(), absl::StatusCode::kInvalidArgument);
      ASSERT_TRUE(g.Barrier().ok());
    });
  }
}

// Two ranks meet through `store` and sum one number.
void MeetThrough(std::shared_ptr<RendezvousStore> store) {
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.rank = r;
      o.size = 2;
      o.store = store;
      o.prefix = "job-1";
      absl::StatusOr<std::unique_ptr<ProcessGroup>> g = ConnectGloo(o);
      ASSERT_TRUE(g.ok()) << g.status();
      float x = 1.0f + r;
      ASSERT_TRUE((*g)->AllReduceSum(&x, 1).ok());
      EXPECT_EQ(x, 3.0f);
      EXPECT_TRUE((*g)->Barrier().ok());
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(ProcessGroupTest, RanksMeetThroughAFileStoreToo) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/rendezvous");
  absl::StatusOr<std::shared_ptr<RendezvousStore>> file_store = FileStore(dir);
  ASSERT_TRUE(file_store.ok()) << file_store.status();
  MeetThrough(*file_store);
  // What a rank on another machine reads through the server (agents).
  absl::StatusOr<std::string> missing =
      (*file_store)->Get("job-1/no-such-key", std::chrono::milliseconds(50));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded) << missing.status();
  ASSERT_TRUE((*file_store)->Set("k", std::string("a\0b", 3)).ok());
  EXPECT_EQ(*(*file_store)->Get("k", std::chrono::milliseconds(50)), std::string("a\0b", 3));
}

// A store that is not one of Gloo's: the kind the server's gRPC store is.
class MapStore : public RendezvousStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    ++sets_;
    cv_.notify_all();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return absl::DeadlineExceededError(key);
    }
    return values_[key];
  }
  int sets() {
    std::lock_guard<std::mutex> lock(mu_);
    return sets_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  int sets_ = 0;
};

TEST(ProcessGroupTest, RanksMeetThroughAnyRendezvousStore) {
  auto store = std::make_shared<MapStore>();
  MeetThrough(store);
  EXPECT_GE(store->sets(), 2);  // each rank published its address there
}

TEST(ProcessGroupTest, BucketsFollowDdpReverseOrderFirstOneMiBThenTheCap) {
  const int64_t mib = (int64_t{1} << 20) / 4;  // floats per MiB
  // Parameters in model order; buckets fill from the last one.
  const std::vector<int64_t> numels = {10, mib / 2, 3 * mib, mib, mib / 4, 100};
  // From the last: 100 + mib/4 floats are under 1 MiB, adding tensor 3 (1
  // MiB) reaches it: {5, 4, 3}. Then the 2 MiB cap: tensor 2 (3 MiB) alone
  // reaches it: {2}; what is left ({1, 0}, about 0.5 MiB) is the last bucket.
  EXPECT_EQ(AssignBuckets(numels, 2 << 20),
            (std::vector<std::vector<int>>{{5, 4, 3}, {2}, {1, 0}}));
  // The default cap (25 MiB) takes everything after the first bucket at once.
  EXPECT_EQ(AssignBuckets(numels), (std::vector<std::vector<int>>{{5, 4, 3}, {2, 1, 0}}));
  EXPECT_TRUE(AssignBuckets({}).empty());
}

TEST(ProcessGroupTest, BucketedAverageEqualsTheMeanOfTheRanksGradients) {
  const std::vector<int64_t> numels = {7, 300000, 5, 70000};
  auto value = [](size_t t, int64_t i) { return static_cast<float>((i % 13) + 3 * t); };
  for (Averaging averaging : {Averaging::kPredivide, Averaging::kSumOnly}) {
    OnRanks(2, [&](int rank, ProcessGroup& g) {
      GradientBuckets buckets(&g, numels, /*bucket_bytes=*/1 << 20, averaging);
      ASSERT_GT(buckets.buckets().size(), 1u);
      // The backward writes each gradient where its bucket keeps it.
      for (size_t t = 0; t < numels.size(); ++t) {
        for (int64_t i = 0; i < numels[t]; ++i) {
          buckets.grad(t)[i] = value(t, i) * (rank == 0 ? 1.0f : 3.0f);
        }
      }
      // Buckets in any order the ranks agree on: last to first here.
      for (int b = static_cast<int>(buckets.buckets().size()) - 1; b >= 0; --b) {
        ASSERT_TRUE(buckets.AllReduceBucket(b).ok());
      }
      // (v + 3v) / 2 = 2v exactly (v/2 + 3v/2 when predivided); the sum 4v.
      const float factor = averaging == Averaging::kPredivide ? 2.0f : 4.0f;
      for (size_t t = 0; t < numels.size(); ++t) {
        for (int64_t i = 0; i < numels[t]; ++i) {
          ASSERT_EQ(buckets.grad(t)[i], factor * value(t, i)) << t << " " << i;
        }
      }
      EXPECT_TRUE(absl::IsInvalidArgument(buckets.AllReduceBucket(99)));
    });
  }
}

TEST(ProcessGroupTest, EachGradientHasItsOwnPlaceInItsBucket) {
  OnRanks(1, [&](int, ProcessGroup& g) {
    const std::vector<int64_t> numels = {3, 300000, 4};
    GradientBuckets buckets(&g, numels, /*bucket_bytes=*/1 << 20);
    for (size_t t = 0; t < numels.size(); ++t) {
      for (int64_t i = 0; i < numels[t]; ++i) buckets.grad(t)[i] = static_cast<float>(t);
    }
    ASSERT_TRUE(buckets.AllReduceAll().ok());  // one rank: nothing changes
    for (size_t t = 0; t < numels.size(); ++t) {
      for (int64_t i = 0; i < numels[t]; ++i) ASSERT_EQ(buckets.grad(t)[i], static_cast<float>(t));
    }
  });
}

TEST(ProcessGroupTest, TheOverlappedReducerLaunchesBucketsInOrderAsTheirGradientsArrive) {
  // Three buckets (1 MiB cap: tensors 3 | 2 | 1, 0); tensor 0 never gets a
  // gradient (a parameter the loss did not reach): it counts as zero.
  const int64_t quarter = (int64_t{1} << 20) / 4;
  const std::vector<int64_t> numels = {5, 7, quarter, quarter};
  OnRanks(2, [&](int rank, ProcessGroup& g) {
    GradientBuckets buckets(&g, numels, /*bucket_bytes=*/1 << 20, Averaging::kSumOnly);
    ASSERT_EQ(buckets.buckets(), (std::vector<std::vector<int>>{{3}, {2}, {1, 0}}));
    OverlappedReducer reducer(&buckets);
    for (int step = 0; step < 3; ++step) {  // the reducer is reused step after step
      reducer.BeginStep();
      // Ready out of bucket order: bucket 1's tensor first; bucket 0 must
      // still be reduced first on both ranks (or the collectives would pair
      // wrongly and the sums below would be wrong).
      for (int t : {2, 3, 1}) {
        std::fill_n(buckets.grad(t), numels[t], static_cast<float>(rank + 1 + t + step));
        reducer.TensorReady(t);
      }
      std::fill_n(buckets.grad(0), numels[0], 99.0f);  // overwritten: never ready
      ASSERT_TRUE(reducer.Finish().ok());
      for (int t : {1, 2, 3}) {
        const float want = static_cast<float>((1 + t + step) + (2 + t + step));
        for (int64_t i = 0; i < numels[t]; ++i) ASSERT_EQ(buckets.grad(t)[i], want) << t;
      }
      for (int64_t i = 0; i < numels[0]; ++i) ASSERT_EQ(buckets.grad(0)[i], 0.0f);
      EXPECT_GT(reducer.allreduce_seconds(), 0);
      EXPECT_GE(reducer.exposed_seconds(), 0);
    }
  });
}

TEST(ProcessGroupTest, APeerThatNeverArrivesIsAnErrorWithinTheTimeout) {
  GlooOptions o;
  o.rank = 0;
  o.size = 2;
  o.store = InProcessStore();
  o.timeout = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group = ConnectGloo(o);
  EXPECT_FALSE(group.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(group.status()) || absl::IsUnavailable(group.status()))
      << group.status();
  EXPECT_NE(group.status().message().find("rank 0"), std::string::npos) << group.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
}

TEST(ProcessGroupTest, BadArgumentsAreRefused) {
  GlooOptions o;
  o.store = InProcessStore();
  o.size = 2;
  o.rank = 2;
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectGloo(o).status()));
  o.rank = 0;
  o.size = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectGloo(o).status()));
  o.size = 1;
  o.store = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(ConnectGloo(o).status()));
}

}  // namespace
}  // namespace ampd::engine::dist
