// The CPU emulator's cuDNN (see include/cudnn.h): the legacy convolution
// calls engine/cuda/conv.cu makes, as a reference cross-correlation queued on
// the stream like a kernel, behind the checks a real call makes.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cudnn.h"
#include "engine/core/half.h"

struct cudnnContext {
  cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;
  int pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  int groups = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace {

size_t Size(cudnnDataType_t t) {
  return t == CUDNN_DATA_DOUBLE ? 8 : t == CUDNN_DATA_FLOAT ? 4 : 2;
}

double Get(const void* p, cudnnDataType_t t, int64_t i) {
  switch (t) {
    case CUDNN_DATA_HALF:
      return ampd::engine::core::F16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case CUDNN_DATA_BFLOAT16:
      return ampd::engine::core::BF16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case CUDNN_DATA_DOUBLE:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<const float*>(p)[i];
  }
}

void Put(void* p, cudnnDataType_t t, int64_t i, double v) {
  switch (t) {
    case CUDNN_DATA_HALF:
      static_cast<uint16_t*>(p)[i] = ampd::engine::core::F32ToF16Bits(static_cast<float>(v));
      break;
    case CUDNN_DATA_BFLOAT16:
      static_cast<uint16_t*>(p)[i] = ampd::engine::core::F32ToBF16Bits(static_cast<float>(v));
      break;
    case CUDNN_DATA_DOUBLE:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      static_cast<float*>(p)[i] = static_cast<float>(v);
  }
}

bool ValidType(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_DOUBLE || t == CUDNN_DATA_HALF ||
         t == CUDNN_DATA_BFLOAT16;
}

int OutSize(int in, int k, int s, int p, int d) {
  const int span = in + 2 * p - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;
}

// The checks cudnnGetConvolution*Algorithm_v7 and the convolution calls
// make on the descriptors, before any pointer.
cudnnStatus_t CheckProblem(const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                           const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y) {
  if (!x || !w || !conv || !y || !x->set || !w->set || !conv->set || !y->set) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // The data configurations: x, w, y of one type; FLOAT compute for
  // f32/f16/bf16 (PSEUDO_HALF, PSEUDO_BFLOAT16, FLOAT), DOUBLE for f64.
  if (x->type != w->type || y->type != x->type) return CUDNN_STATUS_NOT_SUPPORTED;
  const bool f64 = x->type == CUDNN_DATA_DOUBLE;
  if ((conv->compute == CUDNN_DATA_DOUBLE) != f64) return CUDNN_STATUS_NOT_SUPPORTED;
  if (conv->groups < 1 || x->c != w->c * conv->groups || w->k % conv->groups != 0) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (y->n != x->n || y->c != w->k ||
      y->h != OutSize(x->h, w->h, conv->stride[0], conv->pad[0], conv->dilation[0]) ||
      y->w != OutSize(x->w, w->w, conv->stride[1], conv->pad[1], conv->dilation[1]) || y->h < 1 ||
      y->w < 1) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

bool Device(const void* p, size_t bytes) { return p && cudaemu::IsDeviceRange(p, bytes); }
size_t Bytes(const cudnnTensorStruct* t) {
  return static_cast<size_t>(t->n) * t->c * t->h * t->w * Size(t->type);
}
size_t Bytes(const cudnnFilterStruct* f) {
  return static_cast<size_t>(f->k) * f->c * f->h * f->w * Size(f->type);
}

enum class Pass { kForward, kBackwardData, kBackwardFilter };

// Every tap of the convolution, fn(x index, w index, y index), in one fixed
// order, or exactly that order reversed (every loop runs backwards).
template <typename F>
void ForEachTap(const cudnnTensorStruct& x, const cudnnFilterStruct& w,
                const cudnnConvolutionStruct& c, const cudnnTensorStruct& y, bool reverse,
                const F& fn) {
  const int kg = w.k / c.groups;
  auto at = [reverse](int i, int n) { return reverse ? n - 1 - i : i; };
  for (int n0 = 0; n0 < y.n; ++n0)
    for (int k0 = 0; k0 < y.c; ++k0)
      for (int oh0 = 0; oh0 < y.h; ++oh0)
        for (int ow0 = 0; ow0 < y.w; ++ow0)
          for (int ci0 = 0; ci0 < w.c; ++ci0)
            for (int r0 = 0; r0 < w.h; ++r0)
              for (int s0 = 0; s0 < w.w; ++s0) {
                const int n = at(n0, y.n), k = at(k0, y.c), oh = at(oh0, y.h), ow = at(ow0, y.w);
                const int ci = at(ci0, w.c), r = at(r0, w.h), s = at(s0, w.w);
                const int ih = oh * c.stride[0] - c.pad[0] + r * c.dilation[0];
                const int iw = ow * c.stride[1] - c.pad[1] + s * c.dilation[1];
                if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                const int cin = (k / kg) * w.c + ci;
                fn(((int64_t{n} * x.c + cin) * x.h + ih) * x.w + iw,
                   ((int64_t{k} * w.c + ci) * w.h + r) * w.w + s,
                   ((int64_t{n} * y.c + k) * y.h + oh) * y.w + ow);
              }
}

std::atomic<int> g_nondeterministic_data{0}, g_nondeterministic_filter{0};

// out = alpha * pass(a, b) + beta * out, accumulated in f32 (f64 for
// DOUBLE) per output element in tap order; reversed when `reverse`.
cudnnStatus_t Run(Pass pass, cudaStream_t stream, const void* alpha, const void* beta,
                  const cudnnTensorStruct* xd, const void* x, const cudnnFilterStruct* wd,
                  const void* w, const cudnnConvolutionStruct* cd, const cudnnTensorStruct* yd,
                  const void* y, void* out, bool reverse, const char* name) {
  if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
  if (cudaemu::StickyError() != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  const cudnnTensorStruct xs = *xd, ys = *yd;
  const cudnnFilterStruct ws = *wd;
  const cudnnConvolutionStruct cs = *cd;
  const bool f64 = xs.type == CUDNN_DATA_DOUBLE;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  if (cudaemu::Tracing()) std::fprintf(stderr, "cuda emulator: %s\n", name);
  cudaemu::Enqueue(stream, [=] {
    // Each output element's products accumulate in tap order (f32
    // multiply-adds, as one GPU thread's chain, or f64), then alpha and beta.
    const size_t out_n = pass == Pass::kForward        ? Bytes(&ys) / Size(ys.type)
                         : pass == Pass::kBackwardData ? Bytes(&xs) / Size(xs.type)
                                                       : Bytes(&ws) / Size(ws.type);
    const cudnnDataType_t t = xs.type;
    std::vector<double> acc64(f64 ? out_n : 0, 0.0);
    std::vector<float> acc32(f64 ? 0 : out_n, 0.0f);
    ForEachTap(xs, ws, cs, ys, reverse, [&](int64_t xi, int64_t wi, int64_t yi) {
      double a, b;
      int64_t o;
      switch (pass) {
        case Pass::kForward:
          a = Get(x, t, xi), b = Get(w, t, wi), o = yi;
          break;
        case Pass::kBackwardData:
          a = Get(y, t, yi), b = Get(w, t, wi), o = xi;
          break;
        default:
          a = Get(x, t, xi), b = Get(y, t, yi), o = wi;
      }
      if (f64) {
        acc64[o] += a * b;
      } else {
        acc32[o] = std::fma(static_cast<float>(a), static_cast<float>(b), acc32[o]);
      }
    });
    for (size_t o = 0; o < out_n; ++o) {
      const double v = al * (f64 ? acc64[o] : acc32[o]) + (be != 0 ? be * Get(out, t, o) : 0.0);
      Put(out, t, o, v);
    }
  });
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    default:
      return "CUDNN_STATUS_EXECUTION_FAILED";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  *handle = new cudnnContext();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnTensorStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (!desc || n <= 0 || c <= 0 || h <= 0 || w <= 0 || !ValidType(type)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;  // the emulator's subset
  *desc = {true, type, n, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnFilterStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  if (!desc || k <= 0 || c <= 0 || h <= 0 || w <= 0 || !ValidType(type)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  if (format != CUDNN_TENSOR_NCHW) return CUDNN_STATUS_NOT_SUPPORTED;
  *desc = {true, type, k, c, h, w};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* desc) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  *desc = new cudnnConvolutionStruct();
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  delete desc;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (!desc || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0 ||
      !ValidType(compute)) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  // The emulator computes cross-correlation, PyTorch's (and ours).
  if (mode != CUDNN_CROSS_CORRELATION) return CUDNN_STATUS_NOT_SUPPORTED;
  desc->set = true;
  desc->pad[0] = pad_h, desc->pad[1] = pad_w;
  desc->stride[0] = u, desc->stride[1] = v;
  desc->dilation[0] = dilation_h, desc->dilation[1] = dilation_w;
  desc->mode = mode;
  desc->compute = compute;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc, int groups) {
  if (!desc || groups < 1) return CUDNN_STATUS_BAD_PARAM;
  desc->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc, cudnnMathType_t math) {
  if (!desc) return CUDNN_STATUS_BAD_PARAM;
  desc->math = math;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t w,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t y, int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  if (!handle || !returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  const cudnnStatus_t s = CheckProblem(x, w, conv, y);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  perf[0] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
             CUDNN_STATUS_SUCCESS,
             0,
             0,
             CUDNN_DETERMINISTIC,
             conv->math};
  *returned = 1;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t w, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dx, int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  if (!handle || !returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  const cudnnStatus_t s = CheckProblem(dx, w, conv, dy);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  perf[0] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
             CUDNN_STATUS_SUCCESS,
             0,
             0,
             CUDNN_NON_DETERMINISTIC,
             conv->math};
  *returned = 1;
  if (requested > 1) {
    perf[1] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
               CUDNN_STATUS_SUCCESS,
               0,
               1024,
               CUDNN_DETERMINISTIC,
               conv->math};
    *returned = 2;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t x, const cudnnTensorDescriptor_t dy,
    const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dw, int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  if (!handle || !returned || !perf || requested < 1) return CUDNN_STATUS_BAD_PARAM;
  const cudnnStatus_t s = CheckProblem(x, dw, conv, dy);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  perf[0] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
             CUDNN_STATUS_SUCCESS,
             0,
             0,
             CUDNN_NON_DETERMINISTIC,
             conv->math};
  *returned = 1;
  if (requested > 1) {
    perf[1] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
               CUDNN_STATUS_SUCCESS,
               0,
               1024,
               CUDNN_DETERMINISTIC,
               conv->math};
    *returned = 2;
  }
  return CUDNN_STATUS_SUCCESS;
}

// The deterministic algorithms (ALGO_1) ask for a 1 KiB workspace, which must
// be device memory of at least that size.
namespace {
cudnnStatus_t CheckWorkspace(int algo, const void* workspace, size_t bytes) {
  if (algo == 0) return CUDNN_STATUS_SUCCESS;
  if (bytes < 1024 || !Device(workspace, 1024)) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}
}  // namespace

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                      const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t s = CheckProblem(x_desc, w_desc, conv, y_desc);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return CUDNN_STATUS_NOT_SUPPORTED;
  if (!Device(x, Bytes(x_desc)) || !Device(w, Bytes(w_desc)) || !Device(y, Bytes(y_desc))) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  return Run(Pass::kForward, handle->stream, alpha, beta, x_desc, x, w_desc, w, conv, y_desc,
             nullptr, y, false, "cudnnConvolutionForward");
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t s = CheckProblem(dx_desc, w_desc, conv, dy_desc);
  if (s == CUDNN_STATUS_SUCCESS) s = CheckWorkspace(algo, workspace, workspace_bytes);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!Device(w, Bytes(w_desc)) || !Device(dy, Bytes(dy_desc)) || !Device(dx, Bytes(dx_desc))) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const bool reverse = algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 && (g_nondeterministic_data++ % 2);
  return Run(Pass::kBackwardData, handle->stream, alpha, beta, dx_desc, nullptr, w_desc, w, conv,
             dy_desc, dy, dx, reverse, "cudnnConvolutionBackwardData");
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  cudnnStatus_t s = CheckProblem(x_desc, dw_desc, conv, dy_desc);
  if (s == CUDNN_STATUS_SUCCESS) s = CheckWorkspace(algo, workspace, workspace_bytes);
  if (s != CUDNN_STATUS_SUCCESS) return s;
  if (!Device(x, Bytes(x_desc)) || !Device(dy, Bytes(dy_desc)) || !Device(dw, Bytes(dw_desc))) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const bool reverse =
      algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && (g_nondeterministic_filter++ % 2);
  return Run(Pass::kBackwardFilter, handle->stream, alpha, beta, x_desc, x, dw_desc, nullptr, conv,
             dy_desc, dy, dw, reverse, "cudnnConvolutionBackwardFilter");
}
