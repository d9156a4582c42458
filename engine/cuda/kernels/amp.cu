// Device AMP on lists of tensors, one launch per list: unscale and check for
// inf/NaN, the loss-scale update (torch._amp_update_scale_) and the sum of
// squares for gradient clipping; no host reads.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// ---- AMP

__global__ void UnscaleAndCheckKernel(TensorList list, const float* scale, float factor,
                                      float* found_inf) {
  const int t = blockIdx.y;
  // As PyTorch: the reciprocal in f64, rounded to f32.
  const float mult = scale ? static_cast<float>(1.0 / static_cast<double>(*scale)) : factor;
  void* p = list.ptr[t];
  const int dt = list.dt[t];
  const int64_t n = list.numel[t];
  bool bad = false;
  GRID_STRIDE(i, n) {
    const float v = Load<float>(p, dt, i) * mult;  // checked before rounding back
    bad |= !isfinite(v);
    Store<float>(p, dt, i, v);
  }
  if (bad) *found_inf = 1.0f;  // every writer writes the same value
}

__global__ void UpdateScaleKernel(float* scale, float* growth_tracker, const float* found_inf,
                                  float growth_factor, float backoff_factor,
                                  int64_t growth_interval, float min_scale, float max_scale) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float s = *scale;
  if (*found_inf != 0.0f) {
    s *= backoff_factor;
    *growth_tracker = 0;
  } else {
    const int64_t successful = static_cast<int64_t>(*growth_tracker) + 1;
    if (successful == growth_interval) {
      const float grown = s * growth_factor;
      if (isfinite(grown)) s = grown;
      *growth_tracker = 0;
    } else {
      *growth_tracker = static_cast<float>(successful);
    }
  }
  if (min_scale > 0) s = fmaxf(s, min_scale);
  if (max_scale > 0) s = fminf(s, max_scale);
  *scale = s;
}

__global__ void MultiSumOfSquaresKernel(TensorList list, int blocks_per_tensor, double* partial) {
  const int t = blockIdx.y;
  double acc = 0;
  GRID_STRIDE(i, list.numel[t]) {
    const double v = Load<double>(list.ptr[t], list.dt[t], i);
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[t * blocks_per_tensor + blockIdx.x] = acc;
}

}  // namespace

namespace {
int64_t MaxNumel(const TensorList& list) {
  int64_t m = 1;
  for (int i = 0; i < list.count; ++i) m = std::max(m, list.numel[i]);
  return m;
}

// The multiplier is 1/scale[0] when scale is given, else factor.
std::string MultiplyAndCheck(const TensorList& grads, const float* scale, float factor,
                             float* found_inf, Stream s) {
  if (grads.count == 0) return "";
  dim3 grid(std::min(Blocks(MaxNumel(grads)), 1024), grads.count);
  LAUNCH(UnscaleAndCheckKernel, grid, kThreads, S(s), grads, scale, factor, found_inf);
  return Check("UnscaleAndCheckKernel");
}

}  // namespace

std::string LaunchUnscaleAndCheck(const TensorList& grads, const float* scale, float* found_inf,
                                  Stream s) {
  return MultiplyAndCheck(grads, scale, 1.0f, found_inf, s);
}

std::string LaunchMultiplyAndCheck(const TensorList& grads, float factor, float* found_inf,
                                   Stream s) {
  return MultiplyAndCheck(grads, nullptr, factor, found_inf, s);
}

std::string LaunchUpdateScale(float* scale, float* growth_tracker, const float* found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval,
                              double min_scale, double max_scale, Stream s) {
  LAUNCH(UpdateScaleKernel, 1, 1, S(s), scale, growth_tracker, found_inf,
         static_cast<float>(growth_factor), static_cast<float>(backoff_factor), growth_interval,
         static_cast<float>(min_scale), static_cast<float>(max_scale));
  return Check("UpdateScaleKernel");
}

std::string LaunchSumOfSquares(const TensorList& tensors, double* scratch, bool accumulate,
                               void* out, int odt, Stream s) {
  if (!accumulate) {
    cudaError_t err = cudaMemsetAsync(scratch + kMaxReduceBlocks, 0, sizeof(double), S(s));
    if (err != cudaSuccess)
      return std::string("cudaMemsetAsync(sum of squares): ") + cudaGetErrorString(err);
  }
  if (tensors.count == 0) {
    LaunchFinishSum(scratch, 0, 1.0, scratch + kMaxReduceBlocks, out, odt, s);
    return Check("FinishSumKernel");
  }
  const int per_tensor =
      std::max(1, std::min(ReduceBlocks(MaxNumel(tensors)), kMaxReduceBlocks / tensors.count));
  dim3 grid(per_tensor, tensors.count);
  LAUNCH(MultiSumOfSquaresKernel, grid, kThreads, S(s), tensors, per_tensor, scratch);
  LaunchFinishSum(scratch, per_tensor * tensors.count, 1.0, scratch + kMaxReduceBlocks, out, odt,
                  s);
  return Check("SumOfSquares");
}

}  // namespace ampd::engine::cuda
