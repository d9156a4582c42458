// The CPU backend: oneDNN for matmul, plain loops for the rest. Every kernel
// reads its inputs widened to a compute type C (float, or double for f64),
// computes, and rounds once on store.

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "absl/status/status.h"
#include "engine/backend.h"
#include "engine/half.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine {
namespace {

// A read-only view of a tensor's values as C, copying only when the storage
// type differs from C.
template <typename C>
class Values {
 public:
  explicit Values(const Tensor& t) {
    if constexpr (std::is_same_v<C, float>) {
      if (t.dtype() == DType::kF32) {
        ptr_ = t.data<float>();
        return;
      }
      owned_ = t.ToFloats();
    } else {
      if (t.dtype() == DType::kF64) {
        ptr_ = t.data<double>();
        return;
      }
      owned_ = t.ToDoubles();
    }
    ptr_ = owned_.data();
  }
  const C* data() const { return ptr_; }
  C operator[](int64_t i) const { return ptr_[i]; }

 private:
  const C* ptr_ = nullptr;
  std::vector<C> owned_;
};

// A writable buffer of C that becomes a tensor of `dtype`, rounding once.
template <typename C>
class Output {
 public:
  Output(const std::vector<int64_t>& shape, DType dtype) : tensor_(Tensor::Empty(shape, dtype)) {
    if (Native()) {
      ptr_ = tensor_.data<C>();
    } else {
      owned_.resize(tensor_.numel());
      ptr_ = owned_.data();
    }
  }
  C* data() { return ptr_; }
  C& operator[](int64_t i) { return ptr_[i]; }
  Tensor Finish() {
    if (!Native()) {
      if constexpr (std::is_same_v<C, float>) {
        tensor_.CopyFrom(Tensor::FromVector(owned_, tensor_.shape(), tensor_.dtype()));
      } else {
        tensor_.CopyFrom(Tensor::FromDoubles(owned_, tensor_.shape(), tensor_.dtype()));
      }
    }
    return tensor_;
  }

 private:
  bool Native() const {
    return std::is_same_v<C, float> ? tensor_.dtype() == DType::kF32
                                    : tensor_.dtype() == DType::kF64;
  }
  Tensor tensor_;
  C* ptr_ = nullptr;
  std::vector<C> owned_;
};

bool UsesDouble(const Tensor& t) { return t.dtype() == DType::kF64; }

int64_t Rows(const Tensor& t) { return t.numel() / t.dim(-1); }

template <typename C>
C ApplyUnary(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::kRelu:
      return x > 0 ? x : C(0);
    case UnaryOp::kGelu:
      return C(0.5) * x * (C(1) + std::erf(x * C(M_SQRT1_2)));
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return std::log(x);
    case UnaryOp::kNeg:
      return -x;
    case UnaryOp::kSquare:
      return x * x;
  }
  return x;
}

template <typename C>
C UnaryDerivative(UnaryOp op, C x) {
  switch (op) {
    case UnaryOp::kRelu:
      return x > 0 ? C(1) : C(0);
    case UnaryOp::kGelu: {
      C cdf = C(0.5) * (C(1) + std::erf(x * C(M_SQRT1_2)));
      C pdf = std::exp(C(-0.5) * x * x) * C(0.3989422804014327);
      return cdf + x * pdf;
    }
    case UnaryOp::kExp:
      return std::exp(x);
    case UnaryOp::kLog:
      return C(1) / x;
    case UnaryOp::kNeg:
      return C(-1);
    case UnaryOp::kSquare:
      return C(2) * x;
  }
  return C(0);
}

template <typename C>
C ApplyBinary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
  }
  return a;
}

// oneDNN matmul primitives, cached per shape and layout: creating a primitive
// JIT-compiles a kernel, which would otherwise dominate small steps.
class DnnlMatmul {
 public:
  static DnnlMatmul& Get() {
    static DnnlMatmul* instance = new DnnlMatmul();
    return *instance;
  }

  // a, b, c are raw buffers of type dt (c of dt_out).
  void Run(dnnl::memory::data_type dt, dnnl::memory::data_type dt_out, const void* a,
           const void* b, void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
    using tag = dnnl::memory::format_tag;
    auto key = std::make_tuple(static_cast<int>(dt), static_cast<int>(dt_out), m, n, k, trans_a,
                               trans_b);
    dnnl::matmul* prim;
    dnnl::memory::desc ad, bd, cd;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        Entry e;
        e.ad = dnnl::memory::desc({m, k}, dt, trans_a ? tag::ba : tag::ab);
        e.bd = dnnl::memory::desc({k, n}, dt, trans_b ? tag::ba : tag::ab);
        e.cd = dnnl::memory::desc({m, n}, dt_out, tag::ab);
        e.prim = dnnl::matmul(
            dnnl::matmul::primitive_desc(dnnl::matmul::desc(e.ad, e.bd, e.cd), engine_));
        it = cache_.emplace(key, std::move(e)).first;
      }
      prim = &it->second.prim;
      ad = it->second.ad;
      bd = it->second.bd;
      cd = it->second.cd;
    }
    dnnl::memory am(ad, engine_, const_cast<void*>(a));
    dnnl::memory bm(bd, engine_, const_cast<void*>(b));
    dnnl::memory cm(cd, engine_, c);
    dnnl::stream stream(engine_);
    prim->execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
    stream.wait();
  }

 private:
  struct Entry {
    dnnl::memory::desc ad, bd, cd;
    dnnl::matmul prim;
  };
  DnnlMatmul() : engine_(dnnl::engine::kind::cpu, 0) {}
  dnnl::engine engine_;
  std::mutex mu_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool>, Entry> cache_;
};

class CpuBackendImpl final : public Backend {
 public:
  Device device() const override { return Device::kCpu; }
  std::string name() const override { return "cpu"; }

  Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                DType out) override {
    const int64_t m = trans_a ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t n = trans_b ? b.dim(0) : b.dim(1);
    using dt = dnnl::memory::data_type;
    if (a.dtype() == DType::kF64) {
      Values<double> av(a), bv(b);
      Output<double> c({m, n}, out);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < k; ++p) {
            s += av[trans_a ? p * m + i : i * k + p] * bv[trans_b ? j * k + p : p * n + j];
          }
          c[i * n + j] = s;
        }
      }
      return c.Finish();
    }
    if (a.dtype() == DType::kBF16 && (out == DType::kBF16 || out == DType::kF32)) {
      Tensor c = Tensor::Empty({m, n}, out);
      DnnlMatmul::Get().Run(dt::bf16, out == DType::kBF16 ? dt::bf16 : dt::f32, a.raw(), b.raw(),
                            c.raw(), m, n, k, trans_a, trans_b);
      return c;
    }
    // f32, and f16: oneDNN 2.6 has no f16 matmul on this CPU, so f16 operands
    // (already f16-exact) are widened to f32, multiplied with f32
    // accumulation, and the result rounded to f16 once.
    Tensor af = a.dtype() == DType::kF32 ? a : Cast(a, DType::kF32);
    Tensor bf = b.dtype() == DType::kF32 ? b : Cast(b, DType::kF32);
    Tensor c = Tensor::Empty({m, n}, DType::kF32);
    DnnlMatmul::Get().Run(dt::f32, dt::f32, af.raw(), bf.raw(), c.raw(), m, n, k, trans_a,
                          trans_b);
    return out == DType::kF32 ? c : Cast(c, out);
  }

  Tensor Cast(const Tensor& x, DType dtype) override {
    Tensor y = Tensor::Empty(x.shape(), dtype);
    y.CopyFrom(x);
    return y;
  }

  Tensor Unary(UnaryOp op, const Tensor& x) override {
    return UsesDouble(x) ? UnaryImpl<double>(op, x) : UnaryImpl<float>(op, x);
  }
  template <typename C>
  Tensor UnaryImpl(UnaryOp op, const Tensor& x) {
    Values<C> xv(x);
    Output<C> y(x.shape(), x.dtype());
    for (int64_t i = 0; i < x.numel(); ++i) y[i] = ApplyUnary<C>(op, xv[i]);
    return y.Finish();
  }

  Tensor UnaryBackward(UnaryOp op, const Tensor& x, const Tensor& dy) override {
    return UsesDouble(x) ? UnaryBackwardImpl<double>(op, x, dy)
                         : UnaryBackwardImpl<float>(op, x, dy);
  }
  template <typename C>
  Tensor UnaryBackwardImpl(UnaryOp op, const Tensor& x, const Tensor& dy) {
    Values<C> xv(x), gv(dy);
    Output<C> dx(x.shape(), dy.dtype());
    for (int64_t i = 0; i < x.numel(); ++i) dx[i] = UnaryDerivative<C>(op, xv[i]) * gv[i];
    return dx.Finish();
  }

  Tensor Binary(BinaryOp op, const Tensor& a, const Tensor& b, DType out) override {
    return (UsesDouble(a) || UsesDouble(b) || out == DType::kF64)
               ? BinaryImpl<double>(op, a, b, out)
               : BinaryImpl<float>(op, a, b, out);
  }
  template <typename C>
  Tensor BinaryImpl(BinaryOp op, const Tensor& a, const Tensor& b, DType out) {
    Values<C> av(a), bv(b);
    Output<C> y(a.shape(), out);
    const int64_t n = a.numel();
    if (b.numel() == n) {
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[i]);
    } else if (b.numel() == 1) {
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[0]);
    } else {
      const int64_t cols = b.numel();
      for (int64_t i = 0; i < n; ++i) y[i] = ApplyBinary<C>(op, av[i], bv[i % cols]);
    }
    return y.Finish();
  }

  Tensor Scale(const Tensor& x, double factor, DType out) override {
    if (UsesDouble(x) || out == DType::kF64) {
      Values<double> xv(x);
      Output<double> y(x.shape(), out);
      for (int64_t i = 0; i < x.numel(); ++i) y[i] = xv[i] * factor;
      return y.Finish();
    }
    Values<float> xv(x);
    Output<float> y(x.shape(), out);
    const float f = static_cast<float>(factor);
    for (int64_t i = 0; i < x.numel(); ++i) y[i] = xv[i] * f;
    return y.Finish();
  }

  Tensor SumAll(const Tensor& x, DType out) override {
    // Accumulate in double: a long f32 sum would otherwise drift with length.
    Values<double> xv(x);
    double s = 0;
    for (int64_t i = 0; i < x.numel(); ++i) s += xv[i];
    return Tensor::Full({}, out, s);
  }

  Tensor SumRows(const Tensor& x, DType out) override {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    Values<double> xv(x);
    std::vector<double> s(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) s[c] += xv[r * cols + c];
    }
    return Tensor::FromDoubles(s, {cols}, out);
  }

  Tensor Softmax(const Tensor& x, bool log, DType out) override {
    return UsesDouble(x) ? SoftmaxImpl<double>(x, log, out) : SoftmaxImpl<float>(x, log, out);
  }
  template <typename C>
  Tensor SoftmaxImpl(const Tensor& x, bool log, DType out) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    Values<C> xv(x);
    Output<C> y(x.shape(), out);
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xv.data() + r * cols;
      C mx = -std::numeric_limits<C>::infinity();
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
      C sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
      const C lse = mx + std::log(sum);
      for (int64_t c = 0; c < cols; ++c) {
        y[r * cols + c] = log ? xr[c] - lse : std::exp(xr[c] - lse);
      }
    }
    return y.Finish();
  }

  Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) override {
    return UsesDouble(y) ? SoftmaxBackwardImpl<double>(y, dy, log, out)
                         : SoftmaxBackwardImpl<float>(y, dy, log, out);
  }
  template <typename C>
  Tensor SoftmaxBackwardImpl(const Tensor& y, const Tensor& dy, bool log, DType out) {
    const int64_t cols = y.dim(-1), rows = Rows(y);
    Values<C> yv(y), gv(dy);
    Output<C> dx(y.shape(), out);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * cols;
      C dot = 0;
      for (int64_t c = 0; c < cols; ++c) dot += log ? gv[o + c] : gv[o + c] * yv[o + c];
      for (int64_t c = 0; c < cols; ++c) {
        dx[o + c] = log ? gv[o + c] - std::exp(yv[o + c]) * dot : yv[o + c] * (gv[o + c] - dot);
      }
    }
    return dx.Finish();
  }

  LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                            DType out) override {
    return UsesDouble(x) ? LayerNormImpl<double>(x, gamma, beta, eps, out)
                         : LayerNormImpl<float>(x, gamma, beta, eps, out);
  }
  template <typename C>
  LayerNormResult LayerNormImpl(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                double eps, DType out) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    const DType stat = std::is_same_v<C, double> ? DType::kF64 : DType::kF32;
    Values<C> xv(x), gv(gamma), bv(beta);
    Output<C> y(x.shape(), out), mean({rows}, stat), rstd({rows}, stat);
    for (int64_t r = 0; r < rows; ++r) {
      const C* xr = xv.data() + r * cols;
      C mu = 0;
      for (int64_t c = 0; c < cols; ++c) mu += xr[c];
      mu /= cols;
      C var = 0;
      for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu);
      var /= cols;
      const C rs = C(1) / std::sqrt(var + C(eps));
      mean[r] = mu;
      rstd[r] = rs;
      for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = (xr[c] - mu) * rs * gv[c] + bv[c];
    }
    return {y.Finish(), mean.Finish(), rstd.Finish()};
  }

  LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                   const LayerNormResult& fwd, const Tensor& dy) override {
    return UsesDouble(x) ? LayerNormBackwardImpl<double>(x, gamma, fwd, dy)
                         : LayerNormBackwardImpl<float>(x, gamma, fwd, dy);
  }
  template <typename C>
  LayerNormGrads LayerNormBackwardImpl(const Tensor& x, const Tensor& gamma,
                                       const LayerNormResult& fwd, const Tensor& dy) {
    const int64_t cols = x.dim(-1), rows = Rows(x);
    Values<C> xv(x), gv(gamma), dv(dy), mv(fwd.mean), rv(fwd.rstd);
    Output<C> dx(x.shape(), x.dtype());
    std::vector<double> dg(cols, 0.0), db(cols, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * cols;
      C sum_g = 0, sum_gx = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xv[o + c] - mv[r]) * rv[r];
        const C g = dv[o + c] * gv[c];
        sum_g += g;
        sum_gx += g * xhat;
        dg[c] += dv[o + c] * xhat;
        db[c] += dv[o + c];
      }
      for (int64_t c = 0; c < cols; ++c) {
        const C xhat = (xv[o + c] - mv[r]) * rv[r];
        dx[o + c] = rv[r] * (dv[o + c] * gv[c] - (sum_g + xhat * sum_gx) / cols);
      }
    }
    return {dx.Finish(), Tensor::FromDoubles(dg, {cols}, gamma.dtype()),
            Tensor::FromDoubles(db, {cols}, gamma.dtype())};
  }

  Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                             Tensor* row_logsumexp) override {
    const int64_t cols = logits.dim(-1), rows = Rows(logits);
    const bool dbl = UsesDouble(logits);
    Values<double> xv(logits);
    std::vector<double> lse(rows);
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = xv.data() + r * cols;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - mx);
      lse[r] = mx + std::log(sum);
      total += lse[r] - xr[labels[r]];
    }
    if (row_logsumexp) *row_logsumexp = Tensor::FromDoubles(lse, {rows}, dbl ? DType::kF64 : DType::kF32);
    return Tensor::Full({}, dbl ? DType::kF64 : DType::kF32, total / rows);
  }

  Tensor SoftmaxCrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                     const Tensor& row_logsumexp, float dloss) override {
    return UsesDouble(logits) ? SceBackwardImpl<double>(logits, labels, row_logsumexp, dloss)
                              : SceBackwardImpl<float>(logits, labels, row_logsumexp, dloss);
  }
  template <typename C>
  Tensor SceBackwardImpl(const Tensor& logits, const std::vector<int32_t>& labels,
                         const Tensor& row_logsumexp, double dloss) {
    const int64_t cols = logits.dim(-1), rows = Rows(logits);
    Values<C> xv(logits), lv(row_logsumexp);
    Output<C> dx(logits.shape(), logits.dtype());
    const C g = C(dloss / rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const C p = std::exp(xv[r * cols + c] - lv[r]);
        dx[r * cols + c] = g * (p - (c == labels[r] ? C(1) : C(0)));
      }
    }
    return dx.Finish();
  }

  Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids) override {
    const int64_t dim = table.dim(1);
    const int64_t n = static_cast<int64_t>(ids.size());
    Tensor y = Tensor::Empty({n, dim}, table.dtype());
    const size_t row_bytes = dim * DTypeSize(table.dtype());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(static_cast<uint8_t*>(y.raw()) + i * row_bytes,
                  static_cast<const uint8_t*>(table.raw()) + ids[i] * row_bytes, row_bytes);
    }
    return y;
  }

  Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                           int64_t num_rows) override {
    const int64_t dim = dy.dim(-1);
    Values<double> gv(dy);
    std::vector<double> acc(num_rows * dim, 0.0);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t c = 0; c < dim; ++c) acc[ids[i] * dim + c] += gv[i * dim + c];
    }
    return Tensor::FromDoubles(acc, {num_rows, dim}, dy.dtype());
  }

  Tensor Dropout(const Tensor& x, double p, uint64_t seed) override {
    if (UsesDouble(x)) return DropoutImpl<double>(x, p, seed);
    return DropoutImpl<float>(x, p, seed);
  }
  template <typename C>
  Tensor DropoutImpl(const Tensor& x, double p, uint64_t seed) {
    Values<C> xv(x);
    Output<C> y(x.shape(), x.dtype());
    const C keep_scale = p < 1 ? C(1.0 / (1.0 - p)) : C(0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      y[i] = DropoutKeep(seed, i, p) ? xv[i] * keep_scale : C(0);
    }
    return y.Finish();
  }

  void AddInPlace(const Tensor& x, const Tensor& y, double alpha) override {
    Values<double> xv(x), yv(y);
    std::vector<double> r(x.numel());
    for (int64_t i = 0; i < x.numel(); ++i) r[i] = xv[i] + alpha * yv[i];
    x.CopyFrom(Tensor::FromDoubles(r, x.shape(), DType::kF64));
  }

  NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads, float inv_scale) override {
    NonFiniteCheck check;
    for (size_t t = 0; t < grads.size(); ++t) {
      const Tensor& g = grads[t];
      if (g.dtype() == DType::kF32) {
        float* p = g.data<float>();
        bool bad = false;
        for (int64_t i = 0; i < g.numel(); ++i) {
          p[i] *= inv_scale;
          bad |= !std::isfinite(p[i]);
        }
        if (bad && !check.found_inf) {
          check.found_inf = true;
          check.first_index = static_cast<int>(t);
        }
      } else {
        std::vector<float> v = g.ToFloats();
        bool bad = false;
        for (float& f : v) {
          f *= inv_scale;
          bad |= !std::isfinite(f);
        }
        g.CopyFrom(Tensor::FromVector(v, g.shape(), DType::kF32));
        if (bad && !check.found_inf) {
          check.found_inf = true;
          check.first_index = static_cast<int>(t);
        }
      }
    }
    return check;
  }

  double SumOfSquares(const std::vector<Tensor>& tensors) override {
    double s = 0;
    for (const Tensor& t : tensors) {
      Values<double> v(t);
      for (int64_t i = 0; i < t.numel(); ++i) s += v[i] * v[i];
    }
    return s;
  }

  void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
               const SgdHyper& h, bool first) override {
    Values<float> gv(grad);
    Values<float> pv(param);
    Output<float> out(param.shape(), param.dtype());
    float* buf = h.momentum != 0 ? momentum_buf.data<float>() : nullptr;
    for (int64_t i = 0; i < param.numel(); ++i) {
      float d = gv[i] + h.weight_decay * pv[i];
      if (buf != nullptr) {
        buf[i] = first ? d : h.momentum * buf[i] + d;
        d = h.nesterov ? d + h.momentum * buf[i] : buf[i];
      }
      out[i] = pv[i] - h.lr * d;
    }
    param.CopyFrom(out.Finish());
  }

  void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamWHyper& h) override {
    Values<float> gv(grad);
    Values<float> pv(param);
    Output<float> out(param.shape(), param.dtype());
    float* m = exp_avg.data<float>();
    float* v = exp_avg_sq.data<float>();
    const double bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step));
    const float step_size = static_cast<float>(h.lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const float decay = 1.0f - h.lr * h.weight_decay;
    for (int64_t i = 0; i < param.numel(); ++i) {
      const float g = gv[i];
      m[i] = h.beta1 * m[i] + (1.0f - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1.0f - h.beta2) * g * g;
      const float denom = std::sqrt(v[i]) / bc2_sqrt + h.eps;
      out[i] = pv[i] * decay - step_size * m[i] / denom;
    }
    param.CopyFrom(out.Finish());
  }
};

}  // namespace

Backend& CpuBackend() {
  static CpuBackendImpl* backend = new CpuBackendImpl();
  return *backend;
}

namespace {
Backend* registered_cuda = nullptr;
}  // namespace

void RegisterBackend(Device device, Backend* backend) {
  if (device == Device::kCuda) registered_cuda = backend;
}

absl::StatusOr<Backend*> BackendFor(Device device) {
  if (device == Device::kCpu) return &CpuBackend();
  if (registered_cuda != nullptr) return registered_cuda;
  return absl::FailedPreconditionError(
      "device: no CUDA backend is available (no GPU, or the engine was built without CUDA)");
}

Backend& BackendOf(const Tensor& t) {
  if (t.impl()->device == Device::kCuda && registered_cuda != nullptr) return *registered_cuda;
  return CpuBackend();
}

}  // namespace ampd::engine
