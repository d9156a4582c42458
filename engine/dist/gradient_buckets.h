#ifndef AMPD_ENGINE_DIST_GRADIENT_BUCKETS_H_
#define AMPD_ENGINE_DIST_GRADIENT_BUCKETS_H_

// Gradient averaging as PyTorch's DistributedDataParallel does it: the
// parameters' gradients are grouped into buckets in reverse order of the
// parameters (the order the backward finishes them), the first bucket capped
// at 1 MiB and the others at `bucket_bytes` (25 MiB by default); a bucket is
// closed once it reaches its cap, so it may exceed it by its last tensor.
// Each bucket is one all-reduce of one flat f32 buffer, and the gradients
// live in those buffers (DDP's gradient_as_bucket_view): no copies in or out.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "engine/dist/process_group.h"

namespace ampd::engine::dist {

inline constexpr int64_t kFirstBucketBytes = int64_t{1} << 20;
inline constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;

// The buckets of tensors with these element counts (f32), as lists of tensor
// indices: bucket 0 holds the last tensor.
std::vector<std::vector<int>> AssignBuckets(const std::vector<int64_t>& numels,
                                            int64_t bucket_bytes = kDefaultBucketBytes);

// How the sum over the ranks becomes their mean.
enum class Averaging {
  kPredivide,  // each rank divides by the world size first (DDP's default order)
  kSumOnly,    // no division here: the caller folds 1 / size into a pass it
               // makes anyway (the loss-scale unscale, say)
};

class GradientBuckets {
 public:
  // `numels`: each gradient's element count, in parameter order.
  GradientBuckets(ProcessGroup* group, std::vector<int64_t> numels,
                  int64_t bucket_bytes = kDefaultBucketBytes,
                  Averaging averaging = Averaging::kPredivide);

  const std::vector<std::vector<int>>& buckets() const { return buckets_; }
  // Where tensor t's gradient lives (numels[t] floats in its bucket's buffer).
  float* grad(int t) { return buffers_[bucket_of_[t]].data() + offset_[t]; }
  int64_t numel(int t) const { return numels_[t]; }
  int tensors() const { return static_cast<int>(numels_.size()); }
  int bucket_of(int t) const { return bucket_of_[t]; }

  // One bucket's all-reduce (the unit a backward hook launches as soon as
  // the bucket's gradients are final); every rank calls the same buckets in
  // the same order.
  absl::Status AllReduceBucket(int bucket);
  // Every bucket, in order.
  absl::Status AllReduceAll();

 private:
  ProcessGroup* group_;
  Averaging averaging_;
  std::vector<std::vector<int>> buckets_;
  std::vector<std::vector<float>> buffers_;  // one per bucket
  std::vector<int64_t> numels_;
  std::vector<int> bucket_of_;
  std::vector<int64_t> offset_;
};

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_GRADIENT_BUCKETS_H_
