// Device AMP on lists of tensors, one launch per list: unscale and check for
// inf/NaN, the loss-scale update (torch._amp_update_scale_) and the sum of
// squares for gradient clipping; no host reads.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// A list's blocks by tensor (kernel_util.h).
using ListBlocks = BlockMap<kMaxTensorsPerLaunch>;

// ---- AMP

// The multiplier: 1 / scale[0] (scale given), factor_ptr[0] (given; 1 means
// nothing to do, as clipping that clips nothing), else factor.
__global__ void UnscaleAndCheckKernel(TensorList list, ListBlocks map, const float* scale,
                                      const float* factor_ptr, float factor, float* found_inf) {
  int64_t blocks, block;
  const int t = TensorOfBlock(map, &blocks, &block);
  if (factor_ptr && *factor_ptr == 1.0f) return;
  // As PyTorch: the reciprocal in f64, rounded to f32.
  const float mult = scale        ? static_cast<float>(1.0 / static_cast<double>(*scale))
                     : factor_ptr ? *factor_ptr
                                  : factor;
  void* p = list.ptr[t];
  const int dt = list.dt[t];
  const int64_t n = list.numel[t];
  // A multiplier of 1 (no loss scaling: the pass is only the inf/NaN check)
  // writes nothing back: the values would be the same.
  const bool write = mult != 1.0f;
  bool bad = false;
  for (int64_t i = block * blockDim.x + threadIdx.x; i < n; i += blocks * blockDim.x) {
    const float v = Load<float>(p, dt, i) * mult;  // checked before rounding back
    bad |= !isfinite(v);
    if (write) Store<float>(p, dt, i, v);
  }
  if (bad) *found_inf = 1.0f;  // every writer writes the same value
}

// backend::ClipFactor on the device, in the same f64 arithmetic (IEEE sqrt,
// add and divide: the same bits as the host's).
__global__ void ClipFactorKernel(const float* sum_sq, double max_norm, float* factor) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const double norm = sqrt(static_cast<double>(*sum_sq));
  *factor = isfinite(norm) && norm > max_norm ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
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

__global__ void MultiSumOfSquaresKernel(TensorList list, ListBlocks map, double* partial) {
  int64_t blocks, b;
  const int t = TensorOfBlock(map, &blocks, &b);
  double acc = 0;
  for (int64_t i = b * blockDim.x + threadIdx.x; i < list.numel[t]; i += blocks * blockDim.x) {
    const double v = Load<double>(list.ptr[t], list.dt[t], i);
    acc += v * v;
  }
  acc = BlockSum(acc);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

}  // namespace

namespace {
ListBlocks BlocksBySize(const TensorList& list) {
  return kernel_util::BlocksBySize<kMaxTensorsPerLaunch>(list.numel, list.count);
}

// The multiplier is 1/scale[0] when scale is given, else factor.
std::string MultiplyAndCheck(const TensorList& grads, const float* scale, const float* factor_ptr,
                             float factor, float* found_inf, Stream s) {
  if (grads.count == 0) return "";
  const ListBlocks map = BlocksBySize(grads);
  LAUNCH(UnscaleAndCheckKernel, map.first[grads.count], kThreads, S(s), grads, map, scale,
         factor_ptr, factor, found_inf);
  return Check("UnscaleAndCheckKernel");
}

}  // namespace

std::string LaunchUnscaleAndCheck(const TensorList& grads, const float* scale, float* found_inf,
                                  Stream s) {
  return MultiplyAndCheck(grads, scale, nullptr, 1.0f, found_inf, s);
}

std::string LaunchMultiplyAndCheck(const TensorList& grads, float factor, float* found_inf,
                                   Stream s) {
  return MultiplyAndCheck(grads, nullptr, nullptr, factor, found_inf, s);
}

std::string LaunchClipFactor(const float* sum_sq, double max_norm, float* factor, Stream s) {
  LAUNCH(ClipFactorKernel, 1, 1, S(s), sum_sq, max_norm, factor);
  return Check("ClipFactorKernel");
}

std::string LaunchMultiplyByDeviceFactorAndCheck(const TensorList& grads, const float* factor,
                                                 float* found_inf, Stream s) {
  return MultiplyAndCheck(grads, nullptr, factor, 1.0f, found_inf, s);
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
  const ListBlocks map = BlocksBySize(tensors);
  const int blocks = map.first[tensors.count];
  LAUNCH(MultiSumOfSquaresKernel, blocks, kThreads, S(s), tensors, map, scratch);
  LaunchFinishSum(scratch, blocks, 1.0, scratch + kMaxReduceBlocks, out, odt, s);
  return Check("SumOfSquares");
}

}  // namespace ampd::engine::cuda
