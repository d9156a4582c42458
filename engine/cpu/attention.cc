// The CPU backend: fused causal self-attention (backend/kernels/attention.h),
// blocked over (batch, head) pairs across threads and over tiles of keys
// within a row, with an online softmax in the compute type (f32; f64 for f64
// input). Nothing of size T x T is ever stored: the backward recomputes each
// row's probabilities from its logsumexp, and each thread accumulates dK and
// dV for its own (batch, head) in row order, so no two threads write one
// value and the result does not depend on the thread count.

#include "engine/backend/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::AttentionResult;
using backend::CausalAttentionBackwardKernel;
using backend::CausalAttentionKernel;
using backend::KernelMethod;

namespace {

constexpr int64_t kKeyTile = 64;

// Where q, k, v of (b, t, head) start in a [B*T, 3C] buffer.
struct QkvLayout {
  int64_t T, C, H, D;
  int64_t Q(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * 3 * C + h * D; }
  int64_t K(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + C; }
  int64_t V(int64_t b, int64_t t, int64_t h) const { return Q(b, t, h) + 2 * C; }
  int64_t Y(int64_t b, int64_t t, int64_t h) const { return (b * T + t) * C + h * D; }
};

template <typename C>
C Dot(const C* a, const C* b, int64_t n) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

AttentionResult CpuBackendImpl::CausalAttention(const Tensor& qkv, int64_t seq_len,
                                                int64_t n_head) {
  return UsesDouble(qkv) ? CausalAttentionImpl<double>(qkv, seq_len, n_head)
                         : CausalAttentionImpl<float>(qkv, seq_len, n_head);
}

template <typename C>
AttentionResult CpuBackendImpl::CausalAttentionImpl(const Tensor& qkv, int64_t seq_len,
                                                    int64_t n_head) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
  Values<C> in(qkv);
  const C* x = in.data();
  Output<C> y({B * T, L.C}, qkv.dtype());
  Output<C> lse({B, n_head, T}, std::is_same_v<C, double> ? DType::kF64 : DType::kF32);
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    std::vector<C> acc(L.D), s(kKeyTile);
    for (int64_t i = 0; i < T; ++i) {
      const C* q = x + L.Q(b, i, h);
      C m = -std::numeric_limits<C>::infinity(), l = 0;
      std::fill(acc.begin(), acc.end(), C(0));
      for (int64_t j0 = 0; j0 <= i; j0 += kKeyTile) {
        const int64_t j1 = std::min(i + 1, j0 + kKeyTile);
        C tile_max = m;
        for (int64_t j = j0; j < j1; ++j) {
          s[j - j0] = scale * Dot(q, x + L.K(b, j, h), L.D);
          tile_max = std::max(tile_max, s[j - j0]);
        }
        // Rescale what came before to the new maximum, once per tile.
        const C correction = std::exp(m - tile_max);
        l *= correction;
        for (int64_t d = 0; d < L.D; ++d) acc[d] *= correction;
        for (int64_t j = j0; j < j1; ++j) {
          const C p = std::exp(s[j - j0] - tile_max);
          l += p;
          const C* v = x + L.V(b, j, h);
          for (int64_t d = 0; d < L.D; ++d) acc[d] += p * v[d];
        }
        m = tile_max;
      }
      C* out = y.data() + L.Y(b, i, h);
      for (int64_t d = 0; d < L.D; ++d) out[d] = acc[d] / l;
      lse[bh * T + i] = m + std::log(l);
    }
  }
  return {y.Finish(), lse.Finish()};
}

Tensor CpuBackendImpl::CausalAttentionBackward(const Tensor& qkv, const Tensor& y,
                                               const Tensor& lse, const Tensor& dy, int64_t seq_len,
                                               int64_t n_head) {
  return UsesDouble(qkv) ? CausalAttentionBackwardImpl<double>(qkv, y, lse, dy, seq_len, n_head)
                         : CausalAttentionBackwardImpl<float>(qkv, y, lse, dy, seq_len, n_head);
}

template <typename C>
Tensor CpuBackendImpl::CausalAttentionBackwardImpl(const Tensor& qkv, const Tensor& y,
                                                   const Tensor& lse, const Tensor& dy,
                                                   int64_t seq_len, int64_t n_head) {
  const int64_t T = seq_len, B = qkv.dim(0) / T, C3 = qkv.dim(1);
  const QkvLayout L{T, C3 / 3, n_head, C3 / 3 / n_head};
  const C scale = C(1) / std::sqrt(C(L.D));
  Values<C> in(qkv), yv(y), gv(dy), lv(lse);
  const C *x = in.data(), *o = yv.data(), *g = gv.data(), *ls = lv.data();
  Output<C> dx(qkv.shape(), qkv.dtype());
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    // One pass over the query rows: row i's probabilities (at most T values,
    // never the matrix) give dQ_i, and add to dK_j and dV_j, which this
    // thread alone owns for its (b, h) and sums in row order.
    std::vector<C> p(T), ds(T), dk(T * L.D, C(0)), dv(T * L.D, C(0));
    for (int64_t i = 0; i < T; ++i) {
      const C* q = x + L.Q(b, i, h);
      const C* gi = g + L.Y(b, i, h);
      const C delta = Dot(gi, o + L.Y(b, i, h), L.D);  // dO_i . O_i
      const C row_lse = ls[bh * T + i];
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(scale * Dot(q, x + L.K(b, j, h), L.D) - row_lse);
        ds[j] = p[j] * (Dot(gi, x + L.V(b, j, h), L.D) - delta) * scale;
      }
      C* dq = dx.data() + L.Q(b, i, h);
      std::fill(dq, dq + L.D, C(0));
      for (int64_t j = 0; j <= i; ++j) {
        const C* k = x + L.K(b, j, h);
        C* dkj = dk.data() + j * L.D;
        C* dvj = dv.data() + j * L.D;
        const C dsj = ds[j], pj = p[j];
#pragma omp simd
        for (int64_t d = 0; d < L.D; ++d) {
          dq[d] += dsj * k[d];
          dkj[d] += dsj * q[d];
          dvj[d] += pj * gi[d];
        }
      }
    }
    for (int64_t j = 0; j < T; ++j) {
      std::copy(dk.begin() + j * L.D, dk.begin() + (j + 1) * L.D, dx.data() + L.K(b, j, h));
      std::copy(dv.begin() + j * L.D, dv.begin() + (j + 1) * L.D, dx.data() + L.V(b, j, h));
    }
  }
  return dx.Finish();
}

AMPD_REGISTER_KERNEL(CausalAttentionKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttention>::Call);
AMPD_REGISTER_KERNEL(CausalAttentionBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttentionBackward>::Call);

}  // namespace ampd::engine::cpu
