#ifndef AMPD_ENGINE_CUDA_CONV_H_
#define AMPD_ENGINE_CUDA_CONV_H_

// 2-D convolutions through cuDNN (conv.cu): NCHW tensors, [out, in/groups,
// kH, kW] filters, cross-correlation, as PyTorch. f16/bf16 use tensor cores
// with f32 accumulation; f32 accumulates in f32 with TF32 off (the CPU's
// numerics); f64 in f64. The algorithm is cuDNN's heuristic's first choice
// that fits the workspace and, for the two backward passes, is
// deterministic (so the same seed gives the same losses); it is chosen once
// per problem and cached. Bias addition and the bias gradient are our own
// kernels (per-channel, f64 sums in a fixed order).

#include <cstdint>
#include <string>

namespace ampd::engine::cuda {

struct ConvArgs {
  int64_t x[4] = {0, 0, 0, 0};  // N, C, H, W
  int64_t w[4] = {0, 0, 0, 0};  // out, C/groups, kH, kW
  int64_t stride[2] = {1, 1}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
  int dtype = 0;  // x, w and y share it: engine::DType values (0 f32, 1 f16, 2 bf16, 3 f64)
  int64_t y(int i) const;  // the output's dims (PyTorch's sizes)
};

// One per thread (cuDNN handles and cached plans are not shared).
class ConvRunner {
 public:
  static ConvRunner& ForThisThread();
  // "" on success, else the failing cuDNN call and its status.
  std::string Forward(const ConvArgs& a, const void* x, const void* w, void* y, void* stream);
  std::string BackwardData(const ConvArgs& a, const void* dy, const void* w, void* dx,
                           void* stream);
  std::string BackwardFilter(const ConvArgs& a, const void* x, const void* dy, void* dw,
                             void* stream);
  int cached_plans() const;

  ConvRunner(const ConvRunner&) = delete;
  ConvRunner& operator=(const ConvRunner&) = delete;
  ~ConvRunner();

 private:
  ConvRunner();
  struct State;
  struct Plan;
  std::string FindPlan(const ConvArgs& a, int pass, void* stream, Plan** plan);
  std::string Workspace(size_t bytes, void** ws);
  State* state_;
};

// y[n, c, ...] += bias[c] over [n, c, inner].
std::string LaunchAddChannelBias(void* y, int ydt, const void* bias, int bdt, int64_t n, int64_t c,
                                 int64_t inner, void* stream);
// out[c] = sum over n and inner of dy[n, c, inner], f64 in a fixed order.
std::string LaunchChannelSums(const void* dy, int dydt, int64_t n, int64_t c, int64_t inner,
                              void* out, int odt, void* stream);

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_CONV_H_
