// The CPU backend: batch norm forward and backward, one channel per task.
// Per-channel sums are taken in double in a fixed order (ChannelSums), so the
// statistics do not depend on the thread count.

#include "engine/backend/kernels/batch_norm.h"

#include <utility>

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::BatchNormBackwardKernel;
using backend::BatchNormGrads;
using backend::BatchNormKernel;
using backend::BatchNormResult;
using backend::KernelMethod;

namespace {

// x's layout as [N, C, inner]: inner is H*W (1 for [N, C]).
struct Channels {
  int64_t n, c, inner;
  explicit Channels(const Tensor& x)
      : n(x.dim(0)), c(x.dim(1)), inner(x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1))) {}
  int64_t count() const { return n * inner; }
  // fn(index) over channel ch's elements, in a fixed order.
  template <typename F>
  void ForEach(int64_t ch, const F& fn) const {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t base = (i * c + ch) * inner;
      for (int64_t j = 0; j < inner; ++j) fn(base + j);
    }
  }
};

// The sums of first(i) and second(i) over channel ch's elements, in double,
// in a fixed order that does not depend on the thread count: eight running
// sums by position within each image's plane (element j joins sum j % 8),
// added pairwise at the end. One chain of dependent adds would take the
// adder's full latency per element; eight independent ones vectorise.
template <typename F, typename G>
std::pair<double, double> ChannelSums(const Channels& s, int64_t ch, const F& first,
                                      const G& second) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < s.n; ++i) {
    const int64_t base = (i * s.c + ch) * s.inner;
    int64_t j = 0;
    for (; j + 8 <= s.inner; j += 8) {
      for (int l = 0; l < 8; ++l) {
        a[l] += first(base + j + l);
        b[l] += second(base + j + l);
      }
    }
    for (; j < s.inner; ++j) {
      a[j % 8] += first(base + j);
      b[j % 8] += second(base + j);
    }
  }
  auto total = [](const double* v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  };
  return {total(a), total(b)};
}

// ChannelSums of one function.
template <typename F>
double ChannelSum(const Channels& s, int64_t ch, const F& f) {
  return ChannelSums(s, ch, f, [](int64_t) { return 0.0; }).first;
}

// Moves a running statistic toward `value` in its own dtype (f32 or f64).
void Blend(const Tensor& running, int64_t ch, double momentum, double value) {
  if (running.dtype() == DType::kF64) {
    double& r = running.data<double>()[ch];
    r = (1 - momentum) * r + momentum * value;
  } else {
    float& r = running.data<float>()[ch];
    r = static_cast<float>((1 - momentum) * r + momentum * value);
  }
}

}  // namespace

BatchNormResult CpuBackendImpl::BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& running_mean, const Tensor& running_var,
                                          bool training, double momentum, double eps, DType out) {
  return UsesDouble(x) ? BatchNormImpl<double>(x, gamma, beta, running_mean, running_var, training,
                                               momentum, eps, out)
                       : BatchNormImpl<float>(x, gamma, beta, running_mean, running_var, training,
                                              momentum, eps, out);
}

template <typename C>
BatchNormResult CpuBackendImpl::BatchNormImpl(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, const Tensor& running_mean,
                                              const Tensor& running_var, bool training,
                                              double momentum, double eps, DType out) {
  const Channels s(x);
  const DType stat = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
  Values<C> xv(x), gv(gamma), bv(beta);
  Output<C> y(x.shape(), out), mean({s.c}, stat), rstd({s.c}, stat);
  const std::vector<double> rm = running_mean.ToDoubles(), rv = running_var.ToDoubles();
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    double mu, var;
    if (training) {
      const double sum = ChannelSum(s, ch, [&](int64_t i) { return static_cast<double>(xv[i]); });
      mu = sum / static_cast<double>(s.count());
      const double sq = ChannelSum(s, ch, [&](int64_t i) {
        const double d = xv[i] - mu;
        return d * d;
      });
      var = sq / static_cast<double>(s.count());
      // The running variance is the unbiased one (PyTorch's).
      const double unbiased = s.count() > 1 ? sq / static_cast<double>(s.count() - 1) : var;
      Blend(running_mean, ch, momentum, mu);
      Blend(running_var, ch, momentum, unbiased);
    } else {
      mu = rm[ch];
      var = rv[ch];
    }
    const C m = static_cast<C>(mu), r = static_cast<C>(1.0 / std::sqrt(var + eps));
    mean[ch] = m;
    rstd[ch] = r;
    const C scale = r * gv[ch], shift = bv[ch];
    s.ForEach(ch, [&](int64_t i) { y[i] = (xv[i] - m) * scale + shift; });
  });
  return {y.Finish(), mean.Finish(), rstd.Finish()};
}

BatchNormGrads CpuBackendImpl::BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                                 const Tensor& mean, const Tensor& rstd,
                                                 const Tensor& dy, bool training) {
  return UsesDouble(x) ? BatchNormBackwardImpl<double>(x, gamma, mean, rstd, dy, training)
                       : BatchNormBackwardImpl<float>(x, gamma, mean, rstd, dy, training);
}

template <typename C>
BatchNormGrads CpuBackendImpl::BatchNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                                     const Tensor& mean, const Tensor& rstd,
                                                     const Tensor& dy, bool training) {
  const Channels s(x);
  Values<C> xv(x), gv(gamma), mv(mean), rv(rstd), dv(dy);
  Output<C> dx(x.shape(), x.dtype());
  std::vector<double> dg(s.c), db(s.c);
  ParallelFor(s.c, x.numel() >= kParallelMin, [&](int64_t ch) {
    const C m = mv[ch], r = rv[ch];
    const auto [sum_dy, sum_dy_xhat] = ChannelSums(
        s, ch, [&](int64_t i) { return static_cast<double>(dv[i]); },
        [&](int64_t i) { return static_cast<double>(dv[i]) * ((xv[i] - m) * r); });
    dg[ch] = sum_dy_xhat;
    db[ch] = sum_dy;
    const C scale = r * gv[ch];
    if (!training) {
      s.ForEach(ch, [&](int64_t i) { dx[i] = dv[i] * scale; });
      return;
    }
    // dx = gamma * rstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
    const C inv = static_cast<C>(1.0 / static_cast<double>(s.count()));
    const C a = static_cast<C>(sum_dy) * inv, b = static_cast<C>(sum_dy_xhat) * inv;
    s.ForEach(ch, [&](int64_t i) { dx[i] = scale * (dv[i] - a - (xv[i] - m) * r * b); });
  });
  return {dx.Finish(), Tensor::FromDoubles(dg, {s.c}, gamma.dtype()),
          Tensor::FromDoubles(db, {s.c}, gamma.dtype())};
}

AMPD_REGISTER_KERNEL(BatchNormKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::BatchNorm>::Call);
AMPD_REGISTER_KERNEL(BatchNormBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::BatchNormBackward>::Call);

}  // namespace ampd::engine::cpu
