#include "engine/dist/overlapped_reducer.h"

#include <algorithm>
#include <chrono>

namespace ampd::engine::dist {

namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
}  // namespace

OverlappedReducer::OverlappedReducer(GradientBuckets* buckets)
    : buckets_(buckets), num_buckets_(static_cast<int>(buckets->buckets().size())) {
  ready_.assign(buckets_->tensors(), 0);
  remaining_.assign(num_buckets_, 0);
  done_ = num_buckets_;  // nothing pending until BeginStep
  launched_ = num_buckets_;
  thread_ = std::thread([this] { Loop(); });
}

OverlappedReducer::~OverlappedReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OverlappedReducer::BeginStep() {
  std::lock_guard<std::mutex> lock(mu_);
  std::fill(ready_.begin(), ready_.end(), 0);
  for (int b = 0; b < num_buckets_; ++b) {
    remaining_[b] = static_cast<int>(buckets_->buckets()[b].size());
  }
  launched_ = 0;
  done_ = 0;
  status_ = absl::OkStatus();
  allreduce_s_ = 0;
}

void OverlappedReducer::TensorReady(int t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (t < 0 || t >= static_cast<int>(ready_.size()) || ready_[t]) return;
    ready_[t] = 1;
    --remaining_[buckets_->bucket_of(t)];
  }
  cv_.notify_all();
}

void OverlappedReducer::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // The next bucket in order, once all of its gradients are ready.
    cv_.wait(lock,
             [&] { return stop_ || (launched_ < num_buckets_ && remaining_[launched_] == 0); });
    if (stop_) return;
    const int b = launched_++;
    const bool failed = !status_.ok();
    lock.unlock();
    absl::Status s;
    const Clock::time_point start = Clock::now();
    if (!failed) s = buckets_->AllReduceBucket(b);
    const double seconds = Since(start);
    lock.lock();
    allreduce_s_ += seconds;
    if (!s.ok() && status_.ok()) status_ = s;
    ++done_;
    cv_.notify_all();
  }
}

absl::Status OverlappedReducer::Finish() {
  // Parameters the loss did not reach have no gradient: they count as zero.
  for (int t = 0; t < static_cast<int>(ready_.size()); ++t) {
    bool missing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      missing = !ready_[t];
    }
    if (missing) {
      // Its bucket cannot have been launched yet: safe to write.
      std::fill_n(buckets_->grad(t), buckets_->numel(t), 0.0f);
      TensorReady(t);
    }
  }
  const Clock::time_point start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_ == num_buckets_; });
  exposed_s_ = Since(start);
  return status_;
}

}  // namespace ampd::engine::dist
