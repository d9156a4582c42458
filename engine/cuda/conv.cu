// cuDNN convolutions (conv.h). The legacy convolution API is deprecated in
// cuDNN 9 but still shipped and supported; it maps one-to-one onto what the
// op needs, and the CPU emulator implements exactly these calls.

#include <cudnn.h>

#include <map>
#include <vector>

#include "engine/cuda/conv.h"
#include "engine/cuda/kernels/kernel_util.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace ampd::engine::cuda {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

namespace {

// The workspace an algorithm may ask for; a larger one is passed over.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

enum Pass { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

std::string DnnError(const char* call, cudnnStatus_t status) {
  if (status == CUDNN_STATUS_SUCCESS) return "";
  return std::string(call) + ": " + cudnnGetErrorString(status);
}

cudnnDataType_t DnnType(int dt) {
  switch (dt) {
    case kF16:
      return CUDNN_DATA_HALF;
    case kBF16:
      return CUDNN_DATA_BFLOAT16;
    case kF64:
      return CUDNN_DATA_DOUBLE;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  return span < 0 ? 0 : span / s + 1;
}

}  // namespace

int64_t ConvArgs::y(int i) const {
  switch (i) {
    case 0:
      return x[0];
    case 1:
      return w[0];
    case 2:
      return OutSize(x[2], w[2], stride[0], padding[0], dilation[0]);
    default:
      return OutSize(x[3], w[3], stride[1], padding[1], dilation[1]);
  }
}

struct ConvRunner::Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
};

struct ConvRunner::State {
  cudnnHandle_t handle = nullptr;
  std::string init_error;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<std::vector<int64_t>, Plan> plans;
};

ConvRunner& ConvRunner::ForThisThread() {
  static thread_local ConvRunner runner;
  return runner;
}

ConvRunner::ConvRunner() : state_(new State) {
  state_->init_error = DnnError("cudnnCreate", cudnnCreate(&state_->handle));
}

ConvRunner::~ConvRunner() {
  for (auto& [key, p] : state_->plans) {
    cudnnDestroyTensorDescriptor(p.x);
    cudnnDestroyTensorDescriptor(p.y);
    cudnnDestroyFilterDescriptor(p.w);
    cudnnDestroyConvolutionDescriptor(p.conv);
  }
  if (state_->workspace != nullptr) cudaFree(state_->workspace);
  if (state_->handle != nullptr) cudnnDestroy(state_->handle);
  delete state_;
}

int ConvRunner::cached_plans() const { return static_cast<int>(state_->plans.size()); }

std::string ConvRunner::Workspace(size_t bytes, void** ws) {
  if (bytes > state_->workspace_bytes) {
    if (state_->workspace != nullptr) cudaFree(state_->workspace);
    state_->workspace = nullptr;
    state_->workspace_bytes = 0;
    const cudaError_t err = cudaMalloc(&state_->workspace, bytes);
    if (err != cudaSuccess) {
      return std::string("cudaMalloc(conv workspace): ") + cudaGetErrorString(err);
    }
    state_->workspace_bytes = bytes;
  }
  *ws = state_->workspace;
  return "";
}

std::string ConvRunner::FindPlan(const ConvArgs& a, int pass, void* stream, Plan** out) {
  if (!state_->init_error.empty()) return state_->init_error;
  std::string err = DnnError("cudnnSetStream", cudnnSetStream(state_->handle, S(stream)));
  if (!err.empty()) return err;
  const std::vector<int64_t> key = {
      pass,         a.dtype,      a.x[0],        a.x[1],        a.x[2],      a.x[3],
      a.w[0],       a.w[1],       a.w[2],        a.w[3],        a.stride[0], a.stride[1],
      a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups};
  auto it = state_->plans.find(key);
  if (it != state_->plans.end()) {
    *out = &it->second;
    return "";
  }
  Plan p;
  const cudnnDataType_t t = DnnType(a.dtype);
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  if (err.empty()) err = DnnError("cudnnCreateTensorDescriptor", cudnnCreateTensorDescriptor(&p.x));
  if (err.empty()) err = DnnError("cudnnCreateTensorDescriptor", cudnnCreateTensorDescriptor(&p.y));
  if (err.empty()) err = DnnError("cudnnCreateFilterDescriptor", cudnnCreateFilterDescriptor(&p.w));
  if (err.empty()) {
    err = DnnError("cudnnCreateConvolutionDescriptor", cudnnCreateConvolutionDescriptor(&p.conv));
  }
  if (err.empty()) {
    err = DnnError("cudnnSetTensor4dDescriptor(x)",
                   cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, t, i(a.x[0]), i(a.x[1]),
                                              i(a.x[2]), i(a.x[3])));
  }
  if (err.empty()) {
    err = DnnError("cudnnSetTensor4dDescriptor(y)",
                   cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, t, i(a.y(0)), i(a.y(1)),
                                              i(a.y(2)), i(a.y(3))));
  }
  if (err.empty()) {
    err = DnnError("cudnnSetFilter4dDescriptor",
                   cudnnSetFilter4dDescriptor(p.w, t, CUDNN_TENSOR_NCHW, i(a.w[0]), i(a.w[1]),
                                              i(a.w[2]), i(a.w[3])));
  }
  if (err.empty()) {
    // f16/bf16 accumulate in f32; f64 in f64.
    const cudnnDataType_t compute = a.dtype == kF64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    err = DnnError("cudnnSetConvolution2dDescriptor",
                   cudnnSetConvolution2dDescriptor(
                       p.conv, i(a.padding[0]), i(a.padding[1]), i(a.stride[0]), i(a.stride[1]),
                       i(a.dilation[0]), i(a.dilation[1]), CUDNN_CROSS_CORRELATION, compute));
  }
  if (err.empty()) {
    err = DnnError("cudnnSetConvolutionGroupCount",
                   cudnnSetConvolutionGroupCount(p.conv, i(a.groups)));
  }
  if (err.empty()) {
    // Tensor cores for f16/bf16; plain FMA for f32 (no TF32) and f64.
    const cudnnMathType_t math =
        a.dtype == kF16 || a.dtype == kBF16 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    err = DnnError("cudnnSetConvolutionMathType", cudnnSetConvolutionMathType(p.conv, math));
  }
  // The heuristic's ranking; the first that succeeds, fits and (backward) is deterministic.
  bool found = false;
  if (err.empty()) {
    constexpr int kMax = 16;
    int n = 0;
    if (pass == kForward) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      err = DnnError("cudnnGetConvolutionForwardAlgorithm_v7",
                     cudnnGetConvolutionForwardAlgorithm_v7(state_->handle, p.x, p.w, p.conv, p.y,
                                                            kMax, &n, perf));
      for (int k = 0; err.empty() && k < n && !found; ++k) {
        if (perf[k].status != CUDNN_STATUS_SUCCESS || perf[k].memory > kMaxWorkspaceBytes) continue;
        found = true, p.algo = perf[k].algo, p.workspace = perf[k].memory;
      }
    } else if (pass == kBackwardData) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      err = DnnError("cudnnGetConvolutionBackwardDataAlgorithm_v7",
                     cudnnGetConvolutionBackwardDataAlgorithm_v7(state_->handle, p.w, p.y, p.conv,
                                                                 p.x, kMax, &n, perf));
      for (int k = 0; err.empty() && k < n && !found; ++k) {
        if (perf[k].status != CUDNN_STATUS_SUCCESS || perf[k].memory > kMaxWorkspaceBytes ||
            perf[k].determinism != CUDNN_DETERMINISTIC) {
          continue;
        }
        found = true, p.algo = perf[k].algo, p.workspace = perf[k].memory;
      }
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      err = DnnError("cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                     cudnnGetConvolutionBackwardFilterAlgorithm_v7(state_->handle, p.x, p.y, p.conv,
                                                                   p.w, kMax, &n, perf));
      for (int k = 0; err.empty() && k < n && !found; ++k) {
        if (perf[k].status != CUDNN_STATUS_SUCCESS || perf[k].memory > kMaxWorkspaceBytes ||
            perf[k].determinism != CUDNN_DETERMINISTIC) {
          continue;
        }
        found = true, p.algo = perf[k].algo, p.workspace = perf[k].memory;
      }
    }
    if (err.empty() && !found) {
      err = std::string("cuDNN has no ") + (pass == kForward ? "" : "deterministic ") +
            "algorithm for this convolution within the workspace";
    }
  }
  if (!err.empty()) {
    cudnnDestroyTensorDescriptor(p.x);
    cudnnDestroyTensorDescriptor(p.y);
    cudnnDestroyFilterDescriptor(p.w);
    cudnnDestroyConvolutionDescriptor(p.conv);
    return err;
  }
  *out = &state_->plans.emplace(key, p).first->second;
  return "";
}

namespace {
// alpha = 1, beta = 0 in the compute type's width.
struct Scalars {
  float f1 = 1, f0 = 0;
  double d1 = 1, d0 = 0;
  explicit Scalars(int dt) : f64(dt == kF64) {}
  const void* one() const { return f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return f64 ? static_cast<const void*>(&d0) : &f0; }
  bool f64;
};
}  // namespace

std::string ConvRunner::Forward(const ConvArgs& a, const void* x, const void* w, void* y,
                                void* stream) {
  Plan* p = nullptr;
  void* ws = nullptr;
  std::string err = FindPlan(a, kForward, stream, &p);
  if (err.empty()) err = Workspace(p->workspace, &ws);
  if (!err.empty()) return err;
  const Scalars k(a.dtype);
  return DnnError("cudnnConvolutionForward",
                  cudnnConvolutionForward(state_->handle, k.one(), p->x, x, p->w, w, p->conv,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(p->algo), ws,
                                          p->workspace, k.zero(), p->y, y));
}

std::string ConvRunner::BackwardData(const ConvArgs& a, const void* dy, const void* w, void* dx,
                                     void* stream) {
  Plan* p = nullptr;
  void* ws = nullptr;
  std::string err = FindPlan(a, kBackwardData, stream, &p);
  if (err.empty()) err = Workspace(p->workspace, &ws);
  if (!err.empty()) return err;
  const Scalars k(a.dtype);
  return DnnError("cudnnConvolutionBackwardData",
                  cudnnConvolutionBackwardData(state_->handle, k.one(), p->w, w, p->y, dy, p->conv,
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(p->algo),
                                               ws, p->workspace, k.zero(), p->x, dx));
}

std::string ConvRunner::BackwardFilter(const ConvArgs& a, const void* x, const void* dy, void* dw,
                                       void* stream) {
  Plan* p = nullptr;
  void* ws = nullptr;
  std::string err = FindPlan(a, kBackwardFilter, stream, &p);
  if (err.empty()) err = Workspace(p->workspace, &ws);
  if (!err.empty()) return err;
  const Scalars k(a.dtype);
  return DnnError(
      "cudnnConvolutionBackwardFilter",
      cudnnConvolutionBackwardFilter(state_->handle, k.one(), p->x, x, p->y, dy, p->conv,
                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(p->algo), ws,
                                     p->workspace, k.zero(), p->w, dw));
}

namespace {

template <typename C>
__global__ void AddChannelBiasKernel(void* y, int ydt, const void* bias, int bdt, int64_t c,
                                     int64_t inner, int64_t n) {
  GRID_STRIDE(i, n) {
    const int64_t ch = (i / inner) % c;
    Store<C>(y, ydt, i, Load<C>(y, ydt, i) + Load<C>(bias, bdt, ch));
  }
}

template <typename C>
__global__ void ChannelSumsKernel(const void* dy, int dydt, int64_t n, int64_t c, int64_t inner,
                                  void* out, int odt) {
  const int64_t ch = blockIdx.x, count = n * inner;
  double s = 0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) {
    s += Load<C>(dy, dydt, ((k / inner) * c + ch) * inner + k % inner);
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) Store<double>(out, odt, ch, s);
}

}  // namespace

std::string LaunchAddChannelBias(void* y, int ydt, const void* bias, int bdt, int64_t n, int64_t c,
                                 int64_t inner, void* stream) {
  const int64_t total = n * c * inner;
  if (total == 0) return "";
  if (AnyF64(ydt, bdt)) {
    LAUNCH(AddChannelBiasKernel<double>, Blocks(total), kThreads, S(stream), y, ydt, bias, bdt, c,
           inner, total);
  } else {
    LAUNCH(AddChannelBiasKernel<float>, Blocks(total), kThreads, S(stream), y, ydt, bias, bdt, c,
           inner, total);
  }
  return Check("AddChannelBiasKernel");
}

std::string LaunchChannelSums(const void* dy, int dydt, int64_t n, int64_t c, int64_t inner,
                              void* out, int odt, void* stream) {
  if (c == 0) return "";
  if (dydt == kF64) {
    LAUNCH(ChannelSumsKernel<double>, c, kThreads, S(stream), dy, dydt, n, c, inner, out, odt);
  } else {
    LAUNCH(ChannelSumsKernel<float>, c, kThreads, S(stream), dy, dydt, n, c, inner, out, odt);
  }
  return Check("ChannelSumsKernel");
}

}  // namespace ampd::engine::cuda
