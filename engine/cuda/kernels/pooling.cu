// 2-D pooling and its gradient: the twins of engine/cpu/pooling.cc, with the
// window arithmetic of engine/ops/pool_window.h. The backward
// gathers per input element over the outputs that cover it (no float
// atomics), adding in the same output order as the CPU's scatter.

#include "engine/cuda/kernels/kernel_util.h"
#include "engine/ops/pool_window.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary
using ops::Pool2dGeometry;
using ops::PoolOutputsCovering;
using ops::PoolTapIndex;
using ops::PoolWindow;
using ops::PoolWindowAt;

// The plane index of window (wh, ww)'s first maximum (NaN beats every
// number), -1 when it is empty.
template <typename C>
__device__ int64_t WindowArgMax(const void* x, int xdt, int64_t base, const PoolWindow& wh,
                                const PoolWindow& ww, int64_t w) {
  int64_t best = -1;
  C best_v = 0;
  for (int64_t i = 0; i < wh.count; ++i) {
    const int64_t r = wh.first + i * wh.step;
    for (int64_t j = 0; j < ww.count; ++j) {
      const int64_t k = r * w + ww.first + j * ww.step;
      const C v = Load<C>(x, xdt, base + k);
      if (best < 0 || v > best_v || (isnan(v) && !isnan(best_v))) best = k, best_v = v;
    }
  }
  return best;
}

template <typename C>
__global__ void Pool2dKernel(const void* x, int xdt, int64_t planes, int64_t h, int64_t w,
                             Pool2dGeometry g, int64_t oh, int64_t ow, void* y, int ydt) {
  GRID_STRIDE(idx, planes * oh * ow) {
    const int64_t p = idx / (oh * ow), o_h = (idx / ow) % oh, o_w = idx % ow;
    const PoolWindow wh = PoolWindowAt(g, 0, h, o_h), ww = PoolWindowAt(g, 1, w, o_w);
    const int64_t base = p * h * w;
    C v = 0;
    if (g.op == OpId::kMaxPool2d) {
      const int64_t k = WindowArgMax<C>(x, xdt, base, wh, ww, w);
      v = k < 0 ? -INFINITY : Load<C>(x, xdt, base + k);
    } else {
      C s = 0;
      for (int64_t i = 0; i < wh.count; ++i) {
        for (int64_t j = 0; j < ww.count; ++j) {
          s += Load<C>(x, xdt, base + (wh.first + i * wh.step) * w + ww.first + j * ww.step);
        }
      }
      const int64_t div = wh.span * ww.span;
      v = div > 0 ? s / static_cast<C>(div) : C(0);
    }
    Store<C>(y, ydt, idx, v);
  }
}

template <typename C>
__global__ void Pool2dBackwardKernel(const void* x, int xdt, const void* dy, int dydt,
                                     int64_t planes, int64_t h, int64_t w, Pool2dGeometry g,
                                     int64_t oh, int64_t ow, void* dx) {
  GRID_STRIDE(idx, planes * h * w) {
    const int64_t p = idx / (h * w), ih = (idx / w) % h, iw = idx % w, k = ih * w + iw;
    int64_t lo_h, hi_h, lo_w, hi_w;
    PoolOutputsCovering(g, 0, h, oh, ih, &lo_h, &hi_h);
    PoolOutputsCovering(g, 1, w, ow, iw, &lo_w, &hi_w);
    C acc = 0;
    for (int64_t o_h = lo_h; o_h <= hi_h; ++o_h) {
      const PoolWindow wh = PoolWindowAt(g, 0, h, o_h);
      if (PoolTapIndex(wh, ih) < 0) continue;
      for (int64_t o_w = lo_w; o_w <= hi_w; ++o_w) {
        const PoolWindow ww = PoolWindowAt(g, 1, w, o_w);
        if (PoolTapIndex(ww, iw) < 0) continue;
        const C d = Load<C>(dy, dydt, (p * oh + o_h) * ow + o_w);
        if (g.op == OpId::kMaxPool2d) {
          if (WindowArgMax<C>(x, xdt, p * h * w, wh, ww, w) == k) acc += d;
        } else {
          const int64_t div = wh.span * ww.span;
          if (div > 0) acc += d / static_cast<C>(div);
        }
      }
    }
    Store<C>(dx, xdt, idx, acc);
  }
}

}  // namespace

std::string LaunchPool2d(const void* x, int xdt, int64_t planes, int64_t h, int64_t w,
                         const ops::Pool2dGeometry& g, int64_t oh, int64_t ow, void* y, int ydt,
                         Stream s) {
  if (!ops::IsPool2dOp(g.op)) {
    return std::string("LaunchPool2d: op ") + ops::OpName(g.op) + " has no CUDA kernel here";
  }
  const int64_t n = planes * oh * ow;
  if (n == 0) return "";
  if (xdt == kF64) {
    LAUNCH(Pool2dKernel<double>, Blocks(n), kThreads, S(s), x, xdt, planes, h, w, g, oh, ow, y,
           ydt);
  } else {
    LAUNCH(Pool2dKernel<float>, Blocks(n), kThreads, S(s), x, xdt, planes, h, w, g, oh, ow, y, ydt);
  }
  return Check("Pool2dKernel");
}

std::string LaunchPool2dBackward(const void* x, int xdt, const void* dy, int dydt, int64_t planes,
                                 int64_t h, int64_t w, const ops::Pool2dGeometry& g, int64_t oh,
                                 int64_t ow, void* dx, Stream s) {
  if (!ops::IsPool2dOp(g.op)) {
    return std::string("LaunchPool2dBackward: op ") + ops::OpName(g.op) +
           " has no CUDA kernel here";
  }
  const int64_t n = planes * h * w;
  if (n == 0) return "";
  if (xdt == kF64) {
    LAUNCH(Pool2dBackwardKernel<double>, Blocks(n), kThreads, S(s), x, xdt, dy, dydt, planes, h, w,
           g, oh, ow, dx);
  } else {
    LAUNCH(Pool2dBackwardKernel<float>, Blocks(n), kThreads, S(s), x, xdt, dy, dydt, planes, h, w,
           g, oh, ow, dx);
  }
  return Check("Pool2dBackwardKernel");
}

}  // namespace ampd::engine::cuda
