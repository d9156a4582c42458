#include "engine/dist/gradient_buckets.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ampd::engine::dist {

std::vector<std::vector<int>> AssignBuckets(const std::vector<int64_t>& numels,
                                            int64_t bucket_bytes) {
  std::vector<std::vector<int>> buckets;
  std::vector<int> current;
  int64_t bytes = 0;
  int64_t cap = std::min(kFirstBucketBytes, bucket_bytes);
  for (int i = static_cast<int>(numels.size()) - 1; i >= 0; --i) {
    current.push_back(i);
    bytes += numels[i] * static_cast<int64_t>(sizeof(float));
    if (bytes >= cap) {
      buckets.push_back(std::move(current));
      current.clear();
      bytes = 0;
      cap = bucket_bytes;
    }
  }
  if (!current.empty()) buckets.push_back(std::move(current));
  return buckets;
}

GradientBuckets::GradientBuckets(ProcessGroup* group, std::vector<int64_t> numels,
                                 int64_t bucket_bytes, Averaging averaging)
    : group_(group),
      averaging_(averaging),
      buckets_(AssignBuckets(numels, bucket_bytes)),
      numels_(numels),
      bucket_of_(numels.size()),
      offset_(numels.size()) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    int64_t n = 0;
    for (int t : buckets_[b]) {
      bucket_of_[t] = static_cast<int>(b);
      offset_[t] = n;
      n += numels[t];
    }
    buffers_.emplace_back(n, 0.0f);
  }
}

absl::Status GradientBuckets::AllReduceBucket(int bucket) {
  if (bucket < 0 || bucket >= static_cast<int>(buckets_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("no bucket ", bucket, " (there are ", buckets_.size(), ")"));
  }
  std::vector<float>& buf = buffers_[bucket];
  if (averaging_ == Averaging::kPredivide && group_->size() > 1) {
    const float scale = 1.0f / static_cast<float>(group_->size());
    float* __restrict p = buf.data();
    const int64_t n = static_cast<int64_t>(buf.size());
    for (int64_t i = 0; i < n; ++i) p[i] *= scale;
  }
  return group_->AllReduceSum(buf.data(), static_cast<int64_t>(buf.size()));
}

absl::Status GradientBuckets::AllReduceAll() {
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    if (absl::Status s = AllReduceBucket(b); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ampd::engine::dist
