#ifndef AMPD_ENGINE_OPS_POOL_WINDOW_H_
#define AMPD_ENGINE_OPS_POOL_WINDOW_H_

// The geometry of the 2-D pooling ops and their window arithmetic
// (torch.nn.functional's max_pool2d, avg_pool2d, adaptive_avg_pool2d), once
// for every backend: plain C++ beside the op list, which the CUDA kernels
// include too.

#include <cstdint>

#include "engine/ops/op_list.h"

#if defined(__CUDACC__)
#define AMPD_POOL_HD __host__ __device__
#else
#define AMPD_POOL_HD
#endif

namespace ampd::engine::ops {

struct Pool2dGeometry {
  OpId op = OpId::kMaxPool2d;  // kMaxPool2d, kAvgPool2d or kAdaptiveAvgPool2d
  int64_t kernel[2] = {1, 1};  // [0] height, [1] width; not for adaptive
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};    // implicit -inf (max) or zeros (avg)
  int64_t dilation[2] = {1, 1};   // max only
  bool count_include_pad = true;  // avg only
  int64_t output[2] = {1, 1};     // adaptive only: the output size
};

// The output's spatial size along dim d for an input of `in`.
AMPD_POOL_HD inline int64_t PoolOutputSize(const Pool2dGeometry& g, int d, int64_t in) {
  if (g.op == OpId::kAdaptiveAvgPool2d) return g.output[d];
  const int64_t span = in + 2 * g.padding[d] - g.dilation[d] * (g.kernel[d] - 1) - 1;
  return span < 0 ? 0 : span / g.stride[d] + 1;
}

// One output position's window along dim d: taps first + i*step for i in
// [0, count) that fall inside the input, and the average's divisor share.
struct PoolWindow {
  int64_t first = 0;  // the first tap (inside the input)
  int64_t step = 1;
  int64_t count = 0;  // taps inside the input
  int64_t span = 0;   // positions the average divides by along this dim
};
AMPD_POOL_HD inline PoolWindow PoolWindowAt(const Pool2dGeometry& g, int d, int64_t in, int64_t o) {
  PoolWindow w;
  if (g.op == OpId::kAdaptiveAvgPool2d) {
    const int64_t out = g.output[d];
    const int64_t begin = o * in / out, end = ((o + 1) * in + out - 1) / out;
    w.first = begin;
    w.count = end - begin;
    w.span = w.count;
    return w;
  }
  const int64_t dil = g.op == OpId::kMaxPool2d ? g.dilation[d] : 1;
  int64_t start = o * g.stride[d] - g.padding[d];
  int64_t taps = g.kernel[d];
  // avg_pool2d's divisor with padding: the window clipped to the padded input.
  const int64_t padded_end =
      start + g.kernel[d] < in + g.padding[d] ? start + g.kernel[d] : in + g.padding[d];
  const int64_t padded_span = padded_end - start;
  while (taps > 0 && start < 0) start += dil, --taps;
  while (taps > 0 && start + (taps - 1) * dil >= in) --taps;
  w.first = start;
  w.step = dil;
  w.count = taps;
  w.span = g.count_include_pad ? padded_span : taps;
  return w;
}

// The outputs along dim d whose windows may hold input position i: a
// superset [lo, hi] (PoolTapIndex says which really do). Backward kernels
// that gather per input element use it instead of float atomics.
AMPD_POOL_HD inline void PoolOutputsCovering(const Pool2dGeometry& g, int d, int64_t in,
                                             int64_t out, int64_t i, int64_t* lo, int64_t* hi) {
  if (g.op == OpId::kAdaptiveAvgPool2d) {
    // Window o spans [o*in/out, ceil((o+1)*in/out)): o*in/out <= i and
    // (o+1)*in > i*out.
    *lo = (i * out) / in - 1;
    *hi = ((i + 1) * out + in - 1) / in;
  } else {
    const int64_t dil = g.op == OpId::kMaxPool2d ? g.dilation[d] : 1;
    // o*s - p <= i <= o*s - p + (k-1)*dil
    const int64_t top = i + g.padding[d];
    *lo = (top - (g.kernel[d] - 1) * dil + g.stride[d] - 1) / g.stride[d] - 1;
    *hi = top / g.stride[d];
  }
  if (*lo < 0) *lo = 0;
  if (*hi > out - 1) *hi = out - 1;
}

// Tap number of input position i in window w, or -1 when it is not one.
AMPD_POOL_HD inline int64_t PoolTapIndex(const PoolWindow& w, int64_t i) {
  const int64_t off = i - w.first;
  if (off < 0 || off % w.step != 0) return -1;
  return off / w.step < w.count ? off / w.step : -1;
}

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_POOL_WINDOW_H_
