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
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"

namespace ampd::engine::cpu {

using backend::AttentionResult;
using backend::CachedAttentionKernel;
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

// One query row: softmax(q . k_j * scale) over keys j < n_keys (rows of
// `keys`/`values`, `stride` apart) times the values, into out[0, D), with an
// online softmax over tiles of kKeyTile keys. Returns the logsumexp. Both the
// whole-sequence kernel and the cached one compute every row here, which is
// what makes the cache exact.
template <typename C>
C AttendRow(const C* q, const C* keys, const C* values, int64_t stride, int64_t n_keys, int64_t D,
            C scale, C* s, C* out) {
  C acc[256];  // D <= 256 (ValidateGpt)
  std::fill(acc, acc + D, C(0));
  C m = -std::numeric_limits<C>::infinity(), l = 0;
  for (int64_t j0 = 0; j0 < n_keys; j0 += kKeyTile) {
    const int64_t j1 = std::min(n_keys, j0 + kKeyTile);
    C tile_max = m;
    for (int64_t j = j0; j < j1; ++j) {
      s[j - j0] = scale * Dot(q, keys + j * stride, D);
      tile_max = std::max(tile_max, s[j - j0]);
    }
    // Rescale what came before to the new maximum, once per tile.
    const C correction = std::exp(m - tile_max);
    l *= correction;
    for (int64_t d = 0; d < D; ++d) acc[d] *= correction;
    for (int64_t j = j0; j < j1; ++j) {
      const C p = std::exp(s[j - j0] - tile_max);
      l += p;
      const C* v = values + j * stride;
      for (int64_t d = 0; d < D; ++d) acc[d] += p * v[d];
    }
    m = tile_max;
  }
  for (int64_t d = 0; d < D; ++d) out[d] = acc[d] / l;
  return m + std::log(l);
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
    std::vector<C> s(kKeyTile);
    for (int64_t i = 0; i < T; ++i) {
      const C* keys = x + L.K(b, 0, h);
      const C* values = x + L.V(b, 0, h);
      lse[bh * T + i] = AttendRow(x + L.Q(b, i, h), keys, values, 3 * L.C, i + 1, L.D, scale,
                                  s.data(), y.data() + L.Y(b, i, h));
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

Tensor CpuBackendImpl::CachedAttention(const Tensor& qkv, const Tensor& k_cache,
                                       const Tensor& v_cache, int64_t past, int64_t n_head) {
  return UsesDouble(qkv) ? CachedAttentionImpl<double>(qkv, k_cache, v_cache, past, n_head)
                         : CachedAttentionImpl<float>(qkv, k_cache, v_cache, past, n_head);
}

template <typename C>
Tensor CpuBackendImpl::CachedAttentionImpl(const Tensor& qkv, const Tensor& k_cache,
                                           const Tensor& v_cache, int64_t past, int64_t n_head) {
  const int64_t B = k_cache.dim(0), max_len = k_cache.dim(1), E = k_cache.dim(2);
  const int64_t n = qkv.dim(0) / B, D = E / n_head;
  // The new rows' k and v into the caches, as stored (qkv's dtype).
  const size_t es = DTypeSize(qkv.dtype());
  const auto* src = static_cast<const uint8_t*>(qkv.raw());
  auto* kc = static_cast<uint8_t*>(k_cache.raw());
  auto* vc = static_cast<uint8_t*>(v_cache.raw());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* row = src + (b * n + i) * 3 * E * es;
      const int64_t at = (b * max_len + past + i) * E * es;
      std::memcpy(kc + at, row + E * es, E * es);
      std::memcpy(vc + at, row + 2 * E * es, E * es);
    }
  }
  const C scale = C(1) / std::sqrt(C(D));
  Values<C> in(qkv), kv(k_cache), vv(v_cache);
  Output<C> y({B * n, E}, qkv.dtype());
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * n_head; ++bh) {
    const int64_t b = bh / n_head, h = bh % n_head;
    std::vector<C> s(kKeyTile);
    const C* keys = kv.data() + b * max_len * E + h * D;
    const C* values = vv.data() + b * max_len * E + h * D;
    for (int64_t i = 0; i < n; ++i) {
      AttendRow(in.data() + (b * n + i) * 3 * E + h * D, keys, values, E, past + i + 1, D, scale,
                s.data(), y.data() + (b * n + i) * E + h * D);
    }
  }
  return y.Finish();
}

AMPD_REGISTER_KERNEL(CausalAttentionKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttention>::Call);
AMPD_REGISTER_KERNEL(CausalAttentionBackwardKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CausalAttentionBackward>::Call);
AMPD_REGISTER_KERNEL(CachedAttentionKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::CachedAttention>::Call);

}  // namespace ampd::engine::cpu
