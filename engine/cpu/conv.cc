// The CPU backend: conv2d forward and backward through oneDNN convolution
// primitives (f32, and bf16 where oneDNN has it), and direct loops for f64
// (gradient checks) that are also the reference the tests hold oneDNN to.

#include "engine/backend/kernels/conv.h"

#include <map>
#include <unordered_map>
#include <vector>

#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine::cpu {

using backend::Conv2dBackwardDataKernel;
using backend::Conv2dBackwardWeightKernel;
using backend::Conv2dGeometry;
using backend::Conv2dKernel;
using backend::Conv2dOutputShape;
using backend::Conv2dWeightGrads;
using backend::KernelMethod;

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

enum class Pass { kForward, kBackwardData, kBackwardWeight };

// One oneDNN argument: the plain NCHW/OIHW buffer the engine holds, and the
// layout the primitive chose (format "any": blocked layouts are several times
// faster than plain ones); a reorder moves between the two when they differ.
struct Arg {
  int id = 0;
  bool output = false;
  dnnl::memory user, prim;
  dnnl::reorder reorder;  // user -> prim for inputs, prim -> user for outputs
  bool same = true;
};

struct Entry {
  dnnl::primitive prim;
  std::vector<Arg> args;
};

// Convolution primitives cached per thread by pass, dtypes, shapes and
// geometry, as DnnlMatmul caches GEMMs (creating one JIT-compiles it).
class DnnlConv {
 public:
  static DnnlConv& Get() {
    static thread_local DnnlConv instance;
    return instance;
  }

  // ptrs: the plain buffers in the pass's argument order: forward (x, w,
  // bias or null, y); backward data (dy, w, dx); backward weight (x, dy, dw,
  // db or null). `data` is the dtype of x/w/dy, `result` that of y or dx
  // (weight gradients are f32).
  void Run(Pass pass, dt data, dt result, const std::vector<int64_t>& x_shape,
           const std::vector<int64_t>& w_shape, bool bias, const Conv2dGeometry& g,
           const std::vector<void*>& ptrs) {
    std::vector<int64_t> key = {static_cast<int64_t>(pass), static_cast<int64_t>(data),
                                static_cast<int64_t>(result), bias ? 1 : 0};
    key.insert(key.end(), x_shape.begin(), x_shape.end());
    key.insert(key.end(), w_shape.begin(), w_shape.end());
    key.insert(key.end(), {g.stride[0], g.stride[1], g.padding[0], g.padding[1], g.dilation[0],
                           g.dilation[1], g.groups});
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      it = cache_.emplace(key, Make(pass, data, result, x_shape, w_shape, bias, g)).first;
    }
    Entry& e = it->second;
    std::unordered_map<int, dnnl::memory> args;
    for (size_t i = 0; i < e.args.size(); ++i) {
      Arg& a = e.args[i];
      if (ptrs[i] == nullptr) continue;
      a.user.set_data_handle(ptrs[i]);
      if (!a.same && !a.output) a.reorder.execute(stream_, a.user, a.prim);
      args[a.id] = a.same ? a.user : a.prim;
    }
    e.prim.execute(stream_, args);
    for (Arg& a : e.args) {
      if (a.output && !a.same) a.reorder.execute(stream_, a.prim, a.user);
    }
    stream_.wait();
  }

 private:
  static const dnnl::engine& Engine() {
    static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    return *engine;
  }
  DnnlConv() : stream_(Engine()) {}

  static Arg MakeArg(int id, bool output, const dnnl::memory::desc& user,
                     const dnnl::memory::desc& prim) {
    const dnnl::engine& eng = Engine();
    Arg a;
    a.id = id;
    a.output = output;
    a.user = dnnl::memory(user, eng, DNNL_MEMORY_NONE);
    a.same = user == prim;
    if (!a.same) {
      a.prim = dnnl::memory(prim, eng);
      a.reorder = output ? dnnl::reorder(a.prim, a.user) : dnnl::reorder(a.user, a.prim);
    }
    return a;
  }

  static Entry Make(Pass pass, dt data, dt result, const std::vector<int64_t>& xs,
                    const std::vector<int64_t>& ws, bool bias, const Conv2dGeometry& g) {
    const dnnl::engine& eng = Engine();
    const std::vector<int64_t> ys = Conv2dOutputShape(xs, ws, g);
    const dims x_dims(xs.begin(), xs.end()), y_dims(ys.begin(), ys.end());
    // Grouped weights are [G, out/G, in/G, kH, kW] to oneDNN.
    const dims w_dims = g.groups == 1 ? dims(ws.begin(), ws.end())
                                      : dims{g.groups, ws[0] / g.groups, ws[1], ws[2], ws[3]};
    const tag w_tag = g.groups == 1 ? tag::oihw : tag::goihw;
    const dims strides = {g.stride[0], g.stride[1]};
    const dims dilates = {g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts the gaps
    const dims pad = {g.padding[0], g.padding[1]};
    const dt x_dt = pass == Pass::kBackwardData ? result : data;
    const dt y_dt = pass == Pass::kForward ? result : data;
    const dt w_dt = pass == Pass::kBackwardWeight ? dt::f32 : data;
    const dnnl::memory::desc x_any(x_dims, x_dt, tag::any), w_any(w_dims, w_dt, tag::any),
        y_any(y_dims, y_dt, tag::any), b_md({ws[0]}, dt::f32, tag::a);
    const dnnl::memory::desc x_user(x_dims, x_dt, tag::nchw), w_user(w_dims, w_dt, w_tag),
        y_user(y_dims, y_dt, tag::nchw);
    const dnnl::memory::desc none;
    // The forward's primitive descriptor: the backward ones are hinted by it.
    const dnnl::memory::desc fx(x_dims, data, tag::any), fw(w_dims, data, tag::any),
        fy(y_dims, data, tag::any);
    dnnl::convolution_forward::primitive_desc fwd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, fx, fw,
            bias ? b_md : none, pass == Pass::kForward ? y_any : fy, strides, dilates, pad, pad),
        eng);
    Entry e;
    switch (pass) {
      case Pass::kForward: {
        // Forward with the output in `result`.
        dnnl::convolution_forward::primitive_desc pd(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                            dnnl::algorithm::convolution_direct, x_any, w_any,
                                            bias ? b_md : none, y_any, strides, dilates, pad, pad),
            eng);
        e.prim = dnnl::convolution_forward(pd);
        e.args = {MakeArg(DNNL_ARG_SRC, false, x_user, pd.src_desc()),
                  MakeArg(DNNL_ARG_WEIGHTS, false, w_user, pd.weights_desc()),
                  MakeArg(DNNL_ARG_BIAS, false, b_md, b_md),
                  MakeArg(DNNL_ARG_DST, true, y_user, pd.dst_desc())};
        break;
      }
      case Pass::kBackwardData: {
        dnnl::convolution_backward_data::primitive_desc pd(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, x_any, w_any,
                                                  y_any, strides, dilates, pad, pad),
            eng, fwd);
        e.prim = dnnl::convolution_backward_data(pd);
        e.args = {MakeArg(DNNL_ARG_DIFF_DST, false, y_user, pd.diff_dst_desc()),
                  MakeArg(DNNL_ARG_WEIGHTS, false, w_user, pd.weights_desc()),
                  MakeArg(DNNL_ARG_DIFF_SRC, true, x_user, pd.diff_src_desc())};
        break;
      }
      case Pass::kBackwardWeight: {
        dnnl::convolution_backward_weights::primitive_desc pd(
            dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, x_any,
                                                     w_any, bias ? b_md : none, y_any, strides,
                                                     dilates, pad, pad),
            eng, fwd);
        e.prim = dnnl::convolution_backward_weights(pd);
        e.args = {MakeArg(DNNL_ARG_SRC, false, x_user, pd.src_desc()),
                  MakeArg(DNNL_ARG_DIFF_DST, false, y_user, pd.diff_dst_desc()),
                  MakeArg(DNNL_ARG_DIFF_WEIGHTS, true, w_user, pd.diff_weights_desc()),
                  MakeArg(DNNL_ARG_DIFF_BIAS, true, b_md, b_md)};
        break;
      }
    }
    return e;
  }

  dnnl::stream stream_;
  std::map<std::vector<int64_t>, Entry> cache_;
};

// Whether this conv runs on oneDNN in bf16: where the GEMMs' route is
// native (bf16_gemm_route.h; oneDNN 2.6 has bf16 convolutions where it has
// bf16 matmul); elsewhere bf16 operands are widened to f32, which is exact
// (accumulation is f32 either way), as the matmul does.
bool NativeBf16(const Tensor& x) {
  return x.dtype() == DType::kBF16 && Bf16GemmRouteInEffect() == Bf16GemmRoute::kNative;
}

Tensor AsF32(const Tensor& t) {
  return t.dtype() == DType::kF32 ? t : CpuBackendImpl::Instance().Cast(t, DType::kF32);
}

// The direct loops (f64). Every tap of the convolution in one fixed order:
// fn(x index, w index, y index, output channel).
template <typename F>
void ForEachTap(const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                const Conv2dGeometry& g, const F& fn) {
  const std::vector<int64_t> ys = Conv2dOutputShape(xs, ws, g);
  const int64_t N = xs[0], C_in = xs[1], H = xs[2], W = xs[3];
  const int64_t O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3], OH = ys[2], OW = ys[3];
  const int64_t Og = O / g.groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t c0 = (o / Og) * Cg;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t yi = ((n * O + o) * OH + oh) * OW + ow;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * g.stride[0] - g.padding[0] + kh * g.dilation[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * g.stride[1] - g.padding[1] + kw * g.dilation[1];
                if (iw < 0 || iw >= W) continue;
                fn(((n * C_in + c0 + c) * H + ih) * W + iw, ((o * Cg + c) * KH + kh) * KW + kw, yi,
                   o);
              }
            }
        }
    }
}

// y = conv(x, w) + b: each output starts at its bias and adds its taps in order.
template <typename C>
void DirectForward(const C* x, const C* w, const C* b, C* y, const std::vector<int64_t>& xs,
                   const std::vector<int64_t>& ws, const Conv2dGeometry& g) {
  const std::vector<int64_t> ys = Conv2dOutputShape(xs, ws, g);
  const int64_t plane = ys[2] * ys[3];
  for (int64_t i = 0; i < ys[0] * ys[1] * plane; ++i)
    y[i] = b != nullptr ? b[(i / plane) % ys[1]] : C(0);
  ForEachTap(xs, ws, g,
             [&](int64_t xi, int64_t wi, int64_t yi, int64_t) { y[yi] += x[xi] * w[wi]; });
}

// dx (zeroed by the caller) += and dw (zeroed) += over every tap; db
// (zeroed) += each output gradient once.
template <typename C>
void DirectBackward(const C* x, const C* w, const C* dy, C* dx, C* dw, C* db,
                    const std::vector<int64_t>& xs, const std::vector<int64_t>& ws,
                    const Conv2dGeometry& g) {
  if (db != nullptr) {
    const std::vector<int64_t> ys = Conv2dOutputShape(xs, ws, g);
    const int64_t plane = ys[2] * ys[3];
    for (int64_t i = 0; i < ys[0] * ys[1] * plane; ++i) db[(i / plane) % ys[1]] += dy[i];
  }
  ForEachTap(xs, ws, g, [&](int64_t xi, int64_t wi, int64_t yi, int64_t) {
    if (dx != nullptr) dx[xi] += dy[yi] * w[wi];
    if (dw != nullptr) dw[wi] += dy[yi] * x[xi];
  });
}

}  // namespace

Tensor CpuBackendImpl::Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias,
                              const Conv2dGeometry& g, DType out) {
  const std::vector<int64_t> ys = Conv2dOutputShape(x.shape(), w.shape(), g);
  if (UsesDouble(x)) {
    Values<double> xv(x), wv(w);
    std::vector<double> bv = bias.defined() ? bias.ToDoubles() : std::vector<double>();
    Output<double> y(ys, out);
    DirectForward<double>(xv.data(), wv.data(), bias.defined() ? bv.data() : nullptr, y.data(),
                          x.shape(), w.shape(), g);
    return y.Finish();
  }
  Tensor b32 = bias.defined() ? AsF32(bias) : Tensor();
  if (NativeBf16(x) && (out == DType::kBF16 || out == DType::kF32)) {
    Tensor y = Tensor::Uninitialized(ys, out);
    DnnlConv::Get().Run(Pass::kForward, dt::bf16, out == DType::kBF16 ? dt::bf16 : dt::f32,
                        x.shape(), w.shape(), bias.defined(), g,
                        {x.raw(), w.raw(), bias.defined() ? b32.raw() : nullptr, y.raw()});
    return y;
  }
  Tensor xf = AsF32(x), wf = AsF32(w);
  Tensor y = Tensor::Uninitialized(ys, DType::kF32);
  DnnlConv::Get().Run(Pass::kForward, dt::f32, dt::f32, x.shape(), w.shape(), bias.defined(), g,
                      {xf.raw(), wf.raw(), bias.defined() ? b32.raw() : nullptr, y.raw()});
  return out == DType::kF32 ? y : Cast(y, out);
}

Tensor CpuBackendImpl::Conv2dBackwardData(const Tensor& dy, const Tensor& w,
                                          const std::vector<int64_t>& x_shape,
                                          const Conv2dGeometry& g, DType out) {
  if (UsesDouble(dy)) {
    Values<double> dyv(dy), wv(w);
    int64_t n = 1;
    for (int64_t d : x_shape) n *= d;
    std::vector<double> dx(n, 0.0);
    DirectBackward<double>(nullptr, wv.data(), dyv.data(), dx.data(), nullptr, nullptr, x_shape,
                           w.shape(), g);
    return Tensor::FromDoubles(dx, x_shape, out);
  }
  if (NativeBf16(dy) && (out == DType::kBF16 || out == DType::kF32)) {
    Tensor dx = Tensor::Uninitialized(x_shape, out);
    DnnlConv::Get().Run(Pass::kBackwardData, dt::bf16, out == DType::kBF16 ? dt::bf16 : dt::f32,
                        x_shape, w.shape(), false, g, {dy.raw(), w.raw(), dx.raw()});
    return dx;
  }
  Tensor dyf = AsF32(dy), wf = AsF32(w);
  Tensor dx = Tensor::Uninitialized(x_shape, DType::kF32);
  DnnlConv::Get().Run(Pass::kBackwardData, dt::f32, dt::f32, x_shape, w.shape(), false, g,
                      {dyf.raw(), wf.raw(), dx.raw()});
  return out == DType::kF32 ? dx : Cast(dx, out);
}

Conv2dWeightGrads CpuBackendImpl::Conv2dBackwardWeight(const Tensor& x, const Tensor& dy,
                                                       const std::vector<int64_t>& w_shape,
                                                       bool bias, const Conv2dGeometry& g,
                                                       DType out) {
  int64_t wn = 1;
  for (int64_t d : w_shape) wn *= d;
  if (UsesDouble(x)) {
    Values<double> xv(x), dyv(dy);
    std::vector<double> dw(wn, 0.0), db(bias ? w_shape[0] : 0, 0.0);
    DirectBackward<double>(xv.data(), nullptr, dyv.data(), nullptr, dw.data(),
                           bias ? db.data() : nullptr, x.shape(), w_shape, g);
    return {Tensor::FromDoubles(dw, w_shape, out),
            bias ? Tensor::FromDoubles(db, {w_shape[0]}, out) : Tensor()};
  }
  // Weight gradients come out of oneDNN in f32 and are rounded once.
  Tensor dw = Tensor::Uninitialized(w_shape, DType::kF32);
  Tensor db = bias ? Tensor::Uninitialized({w_shape[0]}, DType::kF32) : Tensor();
  if (NativeBf16(x)) {
    DnnlConv::Get().Run(Pass::kBackwardWeight, dt::bf16, dt::bf16, x.shape(), w_shape, bias, g,
                        {x.raw(), dy.raw(), dw.raw(), bias ? db.raw() : nullptr});
  } else {
    Tensor xf = AsF32(x), dyf = AsF32(dy);
    DnnlConv::Get().Run(Pass::kBackwardWeight, dt::f32, dt::f32, x.shape(), w_shape, bias, g,
                        {xf.raw(), dyf.raw(), dw.raw(), bias ? db.raw() : nullptr});
  }
  auto to_out = [&](const Tensor& t) { return out == DType::kF32 ? t : Cast(t, out); };
  return {to_out(dw), bias ? to_out(db) : Tensor()};
}

AMPD_REGISTER_KERNEL(Conv2dKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Conv2d>::Call);
AMPD_REGISTER_KERNEL(Conv2dBackwardDataKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::Conv2dBackwardData>::Call);
AMPD_REGISTER_KERNEL(Conv2dBackwardWeightKernel, Device::kCpu,
                     KernelMethod<&CpuBackendImpl::Conv2dBackwardWeight>::Call);

}  // namespace ampd::engine::cpu
