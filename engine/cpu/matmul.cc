// The CPU backend: GEMMs through oneDNN matmul primitives.

#include "engine/backend/kernels/matmul.h"

#include <map>
#include <tuple>
#include <vector>

#include "engine/backend/kernels/gelu_mlp.h"
#include "engine/core/half.h"
#include "engine/cpu/bf16_gemm_route.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/kernel_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ampd::engine::cpu {

using backend::KernelMethod;
using backend::LinearByMatmul;
using backend::LinearGeluTanhKernel;
using backend::LinearKernel;
using backend::MatmulDGeluTanhKernel;
using backend::MatmulKernel;

namespace {

// oneDNN matmul primitives, cached per shape and layout: creating a primitive
// JIT-compiles a kernel, which would otherwise dominate small steps. Each
// thread keeps its own cache (primitive, memory objects and stream made once),
// so a call takes no lock and only swaps the buffer pointers; a second thread
// asking for a known shape gets the kernel from oneDNN's primitive cache.
class DnnlMatmul {
 public:
  static DnnlMatmul& Get() {
    static thread_local DnnlMatmul instance;
    return instance;
  }

  // a, b, c are raw buffers of type dt (c of dt_out); bias, when not null,
  // n values of bias_dt added to every row before the one rounding to dt_out.
  void Run(dnnl::memory::data_type dt, dnnl::memory::data_type dt_out, const void* a, const void* b,
           void* c, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b,
           const void* bias = nullptr,
           dnnl::memory::data_type bias_dt = dnnl::memory::data_type::undef) {
    using tag = dnnl::memory::format_tag;
    auto key = std::make_tuple(static_cast<int>(dt), static_cast<int>(dt_out), m, n, k, trans_a,
                               trans_b, bias == nullptr ? -1 : static_cast<int>(bias_dt));
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      const dnnl::engine& eng = Engine();
      const dnnl::memory::desc ad({m, k}, dt, trans_a ? tag::ba : tag::ab);
      const dnnl::memory::desc bd({k, n}, dt, trans_b ? tag::ba : tag::ab);
      const dnnl::memory::desc cd({m, n}, dt_out, tag::ab);
      Entry e;
      if (bias == nullptr) {
        e.prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
      } else {
        const dnnl::memory::desc biasd({1, n}, bias_dt, tag::ab);
        e.prim =
            dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, biasd, cd), eng));
        e.bias = dnnl::memory(biasd, eng, DNNL_MEMORY_NONE);
      }
      e.a = dnnl::memory(ad, eng, DNNL_MEMORY_NONE);
      e.b = dnnl::memory(bd, eng, DNNL_MEMORY_NONE);
      e.c = dnnl::memory(cd, eng, DNNL_MEMORY_NONE);
      it = cache_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.a.set_data_handle(const_cast<void*>(a));
    e.b.set_data_handle(const_cast<void*>(b));
    e.c.set_data_handle(c);
    if (bias == nullptr) {
      e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
    } else {
      e.bias.set_data_handle(const_cast<void*>(bias));
      e.prim.execute(stream_, {{DNNL_ARG_SRC, e.a},
                               {DNNL_ARG_WEIGHTS, e.b},
                               {DNNL_ARG_BIAS, e.bias},
                               {DNNL_ARG_DST, e.c}});
    }
    stream_.wait();
  }

 private:
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory a, b, c, bias;
  };
  static const dnnl::engine& Engine() {
    static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
    return *engine;
  }
  DnnlMatmul() : stream_(Engine()) {}
  dnnl::stream stream_;
  std::map<std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool, int>, Entry> cache_;
};

}  // namespace

void GemmF32(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
             bool trans_a, bool trans_b) {
  using dt = dnnl::memory::data_type;
  DnnlMatmul::Get().Run(dt::f32, dt::f32, a, b, c, m, n, k, trans_a, trans_b);
}

void GemmBf16(const uint16_t* a, const uint16_t* b, float* c, int64_t m, int64_t n, int64_t k,
              bool trans_a, bool trans_b) {
  using dt = dnnl::memory::data_type;
  if (Bf16GemmRouteInEffect() == Bf16GemmRoute::kNative) {
    DnnlMatmul::Get().Run(dt::bf16, dt::f32, a, b, c, m, n, k, trans_a, trans_b);
    return;
  }
  // Called per attention head inside a parallel region: the widened
  // operands go to this thread's buffers, reused call to call.
  static thread_local std::vector<float> wa, wb;
  wa.resize(static_cast<size_t>(m * k));
  wb.resize(static_cast<size_t>(k * n));
  core::ConvertBF16ToF32(a, wa.data(), wa.size());
  core::ConvertBF16ToF32(b, wb.data(), wb.size());
  DnnlMatmul::Get().Run(dt::f32, dt::f32, wa.data(), wb.data(), c, m, n, k, trans_a, trans_b);
}

Tensor CpuBackendImpl::Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                              DType out) {
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
  if (a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 &&
      (out == DType::kBF16 || out == DType::kF32) &&
      Bf16GemmRouteInEffect() == Bf16GemmRoute::kNative) {
    Tensor c = Tensor::Uninitialized({m, n}, out);
    DnnlMatmul::Get().Run(dt::bf16, out == DType::kBF16 ? dt::bf16 : dt::f32, a.raw(), b.raw(),
                          c.raw(), m, n, k, trans_a, trans_b);
    return c;
  }
  // f32, and f16: oneDNN 2.6 has no f16 matmul on CPUs, so f16 operands
  // (already f16-exact) are widened to f32, multiplied with f32
  // accumulation, and the result rounded to f16 once. bf16 takes the same
  // path where its route is widened (bf16_gemm_route.h).
  Tensor af = a.dtype() == DType::kF32 ? a : Cast(a, DType::kF32);
  Tensor bf = b.dtype() == DType::kF32 ? b : Cast(b, DType::kF32);
  Tensor c = Tensor::Uninitialized({m, n}, DType::kF32);
  DnnlMatmul::Get().Run(dt::f32, dt::f32, af.raw(), bf.raw(), c.raw(), m, n, k, trans_a, trans_b);
  return out == DType::kF32 ? c : Cast(c, out);
}

AMPD_REGISTER_KERNEL(MatmulKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Matmul>::Call);
// x [M, in] @ w [out, in]^T + b with the bias in oneDNN's epilogue: one
// pass over y instead of a second elementwise one, and y rounded once (as
// PyTorch's addmm and the CUDA backend's cuBLASLt bias epilogue do). bf16
// (by either route) and f32 operands; others take the unfused
// LinearByMatmul.
Tensor CpuBackendImpl::Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
  using dt = dnnl::memory::data_type;
  const bool bf16 = x.dtype() == DType::kBF16 && w.dtype() == DType::kBF16 &&
                    (out == DType::kBF16 || out == DType::kF32);
  const bool f32 = x.dtype() == DType::kF32 && w.dtype() == DType::kF32 && out == DType::kF32;
  if (!b.defined() || !(bf16 || f32) || (b.dtype() != DType::kF32 && b.dtype() != DType::kBF16) ||
      x.rank() != 2 || b.numel() != w.dim(0)) {
    return LinearByMatmul(x, w, b, out);
  }
  const int64_t m = x.dim(0), k = x.dim(1), n = w.dim(0);
  // The bias goes in as f32 (widening is exact): oneDNN's f32 matmul takes
  // no other.
  const Tensor bias = b.dtype() == DType::kF32 ? b : Cast(b, DType::kF32);
  // bf16 on the widened route: f32 operands, the bias in the f32 epilogue,
  // one rounding to out.
  const bool native_bf16 = bf16 && Bf16GemmRouteInEffect() == Bf16GemmRoute::kNative;
  const Tensor xin = bf16 && !native_bf16 ? Cast(x, DType::kF32) : x;
  const Tensor win = bf16 && !native_bf16 ? Cast(w, DType::kF32) : w;
  const DType y_dt = native_bf16 ? out : DType::kF32;
  Tensor y = Tensor::Uninitialized({m, n}, y_dt);
  DnnlMatmul::Get().Run(native_bf16 ? dt::bf16 : dt::f32, y_dt == DType::kBF16 ? dt::bf16 : dt::f32,
                        xin.raw(), win.raw(), y.raw(), m, n, k, false, true, bias.raw(), dt::f32);
  return y_dt == out ? y : Cast(y, out);
}

AMPD_REGISTER_KERNEL(LinearKernel, Device::kCpu, KernelMethod<&CpuBackendImpl::Linear>::Call);

// GPT-2's MLP: the CPU has no fused GELU epilogue; its kernels are the three
// ops' own calls (the same bits as running the ops one by one).
AMPD_REGISTER_KERNEL(LinearGeluTanhKernel, Device::kCpu, backend::LinearGeluTanhUnfused);
AMPD_REGISTER_KERNEL(MatmulDGeluTanhKernel, Device::kCpu, backend::MatmulDGeluTanhUnfused);

}  // namespace ampd::engine::cpu
