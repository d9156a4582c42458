#ifndef AMPD_ENGINE_DIST_OVERLAPPED_REDUCER_H_
#define AMPD_ENGINE_DIST_OVERLAPPED_REDUCER_H_

// DDP's overlap of communication with the backward: each gradient is marked
// ready as soon as the backward has made it final; a bucket whose gradients
// are all ready is all-reduced on a communication thread while the backward
// goes on. Buckets are launched strictly in their order (bucket 0 first), as
// DDP does, so every rank issues the same collectives in the same order.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/dist/gradient_buckets.h"

namespace ampd::engine::dist {

class OverlappedReducer {
 public:
  explicit OverlappedReducer(GradientBuckets* buckets);
  ~OverlappedReducer();
  OverlappedReducer(const OverlappedReducer&) = delete;
  OverlappedReducer& operator=(const OverlappedReducer&) = delete;

  // A new step: no gradient ready yet.
  void BeginStep();
  // Tensor t's gradient is in buckets->grad(t) and final for this step.
  void TensorReady(int t);
  // Marks every tensor not yet ready (a parameter the loss did not reach:
  // its bucket slot is zeroed), waits for every bucket's all-reduce, and
  // returns the first failure.
  absl::Status Finish();

  // The last step's all-reduce time (on the communication thread) and how
  // much of it Finish() waited for after the backward: the rest was hidden.
  double allreduce_seconds() const { return allreduce_s_; }
  double exposed_seconds() const { return exposed_s_; }

 private:
  void Loop();

  GradientBuckets* buckets_;
  std::vector<int> remaining_;  // per bucket: gradients not yet ready
  std::vector<char> ready_;     // per tensor
  std::mutex mu_;
  std::condition_variable cv_;
  int launched_ = 0;  // buckets handed to the communication thread
  int done_ = 0;      // buckets all-reduced this step
  int num_buckets_ = 0;
  bool stop_ = false;
  absl::Status status_;
  double allreduce_s_ = 0, exposed_s_ = 0;
  std::thread thread_;
};

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_OVERLAPPED_REDUCER_H_
