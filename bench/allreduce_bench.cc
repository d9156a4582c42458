// Gloo all-reduce through ampd's DDP buckets (engine/dist: the gradients live
// in their bucket's flat buffer; divide it by the world size, all-reduce it)
// against Gloo's own all-reduce on a buffer of the same size, 2
// ranks as threads over loopback, per bucket size. Interleaved rounds; the
// median of each is reported, and their ratio (see bench/README.md).
//
//   bazel run -c opt //bench:allreduce_bench -- [--rounds=N] [--mib=1,4,25]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "engine/dist/gradient_buckets.h"
#include "engine/dist/process_group.h"
#include "gloo/allreduce.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/hash_store.h"
#include "gloo/transport/tcp/device.h"

ABSL_FLAG(int, rounds, 15, "Interleaved rounds (the median is reported)");
ABSL_FLAG(int, calls, 5, "All-reduces per timed batch");
ABSL_FLAG(std::vector<std::string>, mib, std::vector<std::string>({"1", "4", "25"}),
          "Bucket sizes in MiB");

namespace {

using Clock = std::chrono::steady_clock;
using ampd::engine::dist::ProcessGroup;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Rank {
  std::unique_ptr<ProcessGroup> group;             // ampd's (engine/dist)
  std::shared_ptr<gloo::rendezvous::Context> raw;  // Gloo's own, for the baseline
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int rounds = std::max(1, absl::GetFlag(FLAGS_rounds));
  const int calls = std::max(1, absl::GetFlag(FLAGS_calls));
  std::vector<int64_t> sizes;
  for (const std::string& m : absl::GetFlag(FLAGS_mib)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(m, &v) || v <= 0) {
      std::fprintf(stderr, "--mib: %s is not a positive integer\n", m.c_str());
      return 2;
    }
    sizes.push_back(v);
  }
  constexpr int kRanks = 2;
  std::shared_ptr<ampd::engine::dist::RendezvousStore> store = ampd::engine::dist::InProcessStore();
  gloo::rendezvous::HashStore raw_store;
  std::vector<Rank> ranks(kRanks);
  {
    std::vector<std::thread> t;
    for (int r = 0; r < kRanks; ++r) {
      t.emplace_back([&, r] {
        ampd::engine::dist::GlooOptions o;
        o.rank = r;
        o.size = kRanks;
        o.store = store;
        auto g = ampd::engine::dist::ConnectGloo(o);
        if (!g.ok()) {
          std::fprintf(stderr, "%s\n", std::string(g.status().message()).c_str());
          std::exit(1);
        }
        ranks[r].group = std::move(*g);
        auto device = gloo::transport::tcp::CreateDevice("127.0.0.1");
        ranks[r].raw = std::make_shared<gloo::rendezvous::Context>(r, kRanks);
        ranks[r].raw->connectFullMesh(raw_store, device);
      });
    }
    for (auto& th : t) th.join();
  }

  std::printf("2 ranks (threads) over loopback, median of %d rounds x %d all-reduces\n", rounds,
              calls);
  std::printf("%8s %14s %14s %10s %12s %16s %10s\n", "MiB", "ampd ms", "gloo ms", "ampd/gloo",
              "ampd GB/s", "predivided ms", "/gloo");
  for (int64_t mib : sizes) {
    const int64_t n = mib * (int64_t{1} << 20) / 4;
    // DDP's first bucket (1 MiB) is the last tensor; the bucket timed is the
    // second: four tensors of n floats in all, closing exactly at its cap.
    const std::vector<int64_t> numels = {n - n / 2 - n / 4 - n / 8, n / 8, n / 4, n / 2,
                                         ampd::engine::dist::kFirstBucketBytes / 4};
    std::vector<std::vector<float>> raw_buf(kRanks, std::vector<float>(n, 1.0f));
    using ampd::engine::dist::Averaging;
    std::vector<std::unique_ptr<ampd::engine::dist::GradientBuckets>> buckets, predivided;
    for (int r = 0; r < kRanks; ++r) {
      buckets.push_back(std::make_unique<ampd::engine::dist::GradientBuckets>(
          ranks[r].group.get(), numels, /*bucket_bytes=*/n * 4, Averaging::kSumOnly));
      predivided.push_back(std::make_unique<ampd::engine::dist::GradientBuckets>(
          ranks[r].group.get(), numels, /*bucket_bytes=*/n * 4, Averaging::kPredivide));
    }
    if (buckets[0]->buckets() != std::vector<std::vector<int>>{{4}, {3, 2, 1, 0}}) {
      std::fprintf(stderr, "unexpected bucket assignment for %lld MiB\n",
                   static_cast<long long>(mib));
      return 1;
    }
    std::vector<double> ours, theirs, ours_predivided;
    std::vector<uint32_t> raw_tag(kRanks, 0);
    for (int round = 0; round < rounds; ++round) {
      for (int k = 0; k < 3; ++k) {
        const int which = (k + round) % 3;  // 0 ours, 1 Gloo's, 2 ours predivided
        std::vector<std::thread> t;
        const Clock::time_point start = Clock::now();
        for (int r = 0; r < kRanks; ++r) {
          t.emplace_back([&, r] {
            for (int c = 0; c < calls; ++c) {
              if (which != 1) {
                auto& b = which == 0 ? buckets[r] : predivided[r];
                if (!b->AllReduceBucket(1).ok()) std::exit(1);
              } else {
                gloo::AllreduceOptions opts(ranks[r].raw);
                opts.setOutput(raw_buf[r].data(), static_cast<size_t>(n));
                opts.setReduceFunction(
                    static_cast<void (*)(void*, const void*, const void*, size_t)>(
                        &gloo::sum<float>));
                opts.setTag(raw_tag[r]++);  // a fresh tag per call, as engine/dist does
                gloo::allreduce(opts);
              }
            }
          });
        }
        for (auto& th : t) th.join();
        const double ms =
            std::chrono::duration<double, std::milli>(Clock::now() - start).count() / calls;
        (which == 0 ? ours : which == 1 ? theirs : ours_predivided).push_back(ms);
      }
    }
    const double a = Median(ours), g = Median(theirs), p = Median(ours_predivided);
    std::printf("%8lld %14.3f %14.3f %9.2fx %12.2f %16.3f %9.2fx\n", static_cast<long long>(mib), a,
                g, a / g, static_cast<double>(n) * 4 / (a * 1e6), p, p / g);
  }
  return 0;
}
