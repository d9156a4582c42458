// Batch norm over channels and its gradient: the twins of
// engine/cpu/batch_norm.cc. One block per channel; the per-channel sums are
// f64 block sums in a fixed order, so the statistics do not change run to run.

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

// Element k of channel ch in [N, C, inner] (k over N * inner).
__device__ __forceinline__ int64_t ChannelIndex(int64_t k, int64_t ch, int64_t c, int64_t inner) {
  return ((k / inner) * c + ch) * inner + k % inner;
}

template <typename C>
__global__ void BatchNormKernel(const void* x, int xdt, const void* gamma, int gdt,
                                const void* beta, int64_t n, int64_t c, int64_t inner,
                                void* running_mean, void* running_var, int rdt, bool training,
                                double momentum, double eps, void* y, int ydt, void* mean,
                                void* rstd, int sdt) {
  const int64_t ch = blockIdx.x, count = n * inner;
  double mu, var;
  if (training) {
    double s = 0;
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
      s += Load<C>(x, xdt, ChannelIndex(k, ch, c, inner));
    }
    mu = BlockSum(s) / static_cast<double>(count);
    double sq = 0;
    for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
      const double d = Load<C>(x, xdt, ChannelIndex(k, ch, c, inner)) - mu;
      sq += d * d;
    }
    sq = BlockSum(sq);
    var = sq / static_cast<double>(count);
    if (threadIdx.x == 0) {
      // The running variance is the unbiased one (PyTorch's).
      const double unbiased = count > 1 ? sq / static_cast<double>(count - 1) : var;
      Store<double>(running_mean, rdt, ch,
                    (1 - momentum) * Load<double>(running_mean, rdt, ch) + momentum * mu);
      Store<double>(running_var, rdt, ch,
                    (1 - momentum) * Load<double>(running_var, rdt, ch) + momentum * unbiased);
    }
  } else {
    mu = Load<double>(running_mean, rdt, ch);
    var = Load<double>(running_var, rdt, ch);
  }
  const C m = static_cast<C>(mu), r = static_cast<C>(1.0 / sqrt(var + eps));
  if (threadIdx.x == 0) {
    Store<C>(mean, sdt, ch, m);
    Store<C>(rstd, sdt, ch, r);
  }
  const C scale = r * Load<C>(gamma, gdt, ch), shift = Load<C>(beta, gdt, ch);
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t i = ChannelIndex(k, ch, c, inner);
    Store<C>(y, ydt, i, (Load<C>(x, xdt, i) - m) * scale + shift);
  }
}

template <typename C>
__global__ void BatchNormBackwardKernel(const void* x, int xdt, const void* gamma, int gdt,
                                        const void* mean, const void* rstd, int sdt, const void* dy,
                                        int dydt, int64_t n, int64_t c, int64_t inner,
                                        bool training, void* dx, void* dgamma, void* dbeta) {
  const int64_t ch = blockIdx.x, count = n * inner;
  const C m = Load<C>(mean, sdt, ch), r = Load<C>(rstd, sdt, ch);
  double sum_dy = 0, sum_dy_xhat = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t i = ChannelIndex(k, ch, c, inner);
    const C d = Load<C>(dy, dydt, i);
    sum_dy += d;
    sum_dy_xhat += static_cast<double>(d) * ((Load<C>(x, xdt, i) - m) * r);
  }
  sum_dy = BlockSum(sum_dy);
  sum_dy_xhat = BlockSum(sum_dy_xhat);
  if (threadIdx.x == 0) {
    Store<double>(dgamma, gdt, ch, sum_dy_xhat);
    Store<double>(dbeta, gdt, ch, sum_dy);
  }
  const C scale = r * Load<C>(gamma, gdt, ch);
  const C inv = static_cast<C>(1.0 / static_cast<double>(count));
  const C a = static_cast<C>(sum_dy) * inv, b = static_cast<C>(sum_dy_xhat) * inv;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    const int64_t i = ChannelIndex(k, ch, c, inner);
    const C d = Load<C>(dy, dydt, i);
    Store<C>(dx, xdt, i, training ? scale * (d - a - (Load<C>(x, xdt, i) - m) * r * b) : d * scale);
  }
}

}  // namespace

std::string LaunchBatchNorm(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                            int64_t n, int64_t c, int64_t inner, void* running_mean,
                            void* running_var, int rdt, bool training, double momentum, double eps,
                            void* y, int ydt, void* mean, void* rstd, int sdt, Stream s) {
  if (c == 0) return "";
  if (xdt == kF64) {
    LAUNCH(BatchNormKernel<double>, c, kThreads, S(s), x, xdt, gamma, gdt, beta, n, c, inner,
           running_mean, running_var, rdt, training, momentum, eps, y, ydt, mean, rstd, sdt);
  } else {
    LAUNCH(BatchNormKernel<float>, c, kThreads, S(s), x, xdt, gamma, gdt, beta, n, c, inner,
           running_mean, running_var, rdt, training, momentum, eps, y, ydt, mean, rstd, sdt);
  }
  return Check("BatchNormKernel");
}

std::string LaunchBatchNormBackward(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t n, int64_t c, int64_t inner, bool training,
                                    void* dx, void* dgamma, void* dbeta, Stream s) {
  if (c == 0) return "";
  if (xdt == kF64) {
    LAUNCH(BatchNormBackwardKernel<double>, c, kThreads, S(s), x, xdt, gamma, gdt, mean, rstd, sdt,
           dy, dydt, n, c, inner, training, dx, dgamma, dbeta);
  } else {
    LAUNCH(BatchNormBackwardKernel<float>, c, kThreads, S(s), x, xdt, gamma, gdt, mean, rstd, sdt,
           dy, dydt, n, c, inner, training, dx, dgamma, dbeta);
  }
  return Check("BatchNormBackwardKernel");
}

}  // namespace ampd::engine::cuda
