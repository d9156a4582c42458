#include "engine/ops/dropout.h"

#include "engine/backend/kernels/dropout.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::DropoutKernel;
using backend::Kernel;

namespace {
struct Shard {
  int64_t first = 0, count = 0;  // count 0: no scope
};
thread_local Shard shard;
}  // namespace

DropoutShardScope::DropoutShardScope(int64_t first, int64_t count)
    : saved_first_(shard.first), saved_count_(shard.count) {
  shard = {first, count};
}
DropoutShardScope::~DropoutShardScope() { shard = {saved_first_, saved_count_}; }

uint64_t ShardDropoutSeed(uint64_t seed, int64_t elements) {
  if (shard.count <= 0 || shard.first == 0 || elements % shard.count != 0) return seed;
  return backend::DropoutSeedAt(seed,
                                static_cast<uint64_t>(shard.first * (elements / shard.count)));
}

Tensor Dropout(Tensor x, double p, uint64_t seed, bool training) {
  if (!training || p == 0.0) return x;
  seed = ShardDropoutSeed(seed, x.numel());  // the saved seed: the backward's mask too
  OpDispatch d(OpId::kDropout, {&x});
  Tensor y = Kernel<DropoutKernel>(x.device())(x, p, seed);
  d.Finish(y);
  return RecordOp(y, OpId::kDropout, {.inputs = {x}, .scalar = p, .seed = seed});
}

// The mask is a function of (seed, index): applying it to g is the backward.
std::vector<Tensor> DropoutGradient(const SavedForBackward& s, const Tensor& g) {
  return {Kernel<DropoutKernel>(g.device())(g, s.scalar, s.seed)};
}

}  // namespace ampd::engine::ops
