#ifndef AMPD_ENGINE_CUDA_CUDA_BACKEND_IMPL_H_
#define AMPD_ENGINE_CUDA_CUDA_BACKEND_IMPL_H_

// The CUDA backend's class. Like the CPU's, its kernels are member functions
// defined one family per file, each file registering its own in the kernel
// registry: matmul.cc (cuBLASLt), elementwise.cc, reductions.cc, softmax.cc
// (and cross-entropy), layer_norm.cc, embedding.cc, conv.cc (cuDNN),
// pooling.cc, batch_norm.cc; device_amp.cc has the
// AMP and optimizer updates, optimizers8bit.cc the 8-bit ones;
// cuda_backend.cc memory, streams and the backend's registration. Their
// launchers are in kernels.h (kernels/*.cu). Internal to engine/cuda.

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/attention.h"
#include "engine/backend/kernels/batch_norm.h"
#include "engine/backend/kernels/conv.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/backend/kernels/fp8.h"
#include "engine/backend/kernels/gelu_mlp.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/kernels/pooling.h"
#include "engine/core/fp8.h"
#include "engine/cuda/caching_allocator.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/runtime.h"

namespace ampd::engine::cuda {

using engine::DType;
using engine::OpId;
using engine::Tensor;
using engine::backend::Backend;
using engine::backend::KernelMethod;

inline int Dt(DType d) { return static_cast<int>(d); }
inline int Dt(const Tensor& t) { return static_cast<int>(t.dtype()); }

// The optimizer steps' lists (kernels.h: AdamWList, AdamW8bitList,
// Sgd8bitList): each entry of `params` with values goes into a list, whose
// fields every such list has (weights, gradient, model copy, size, dtypes,
// decay) are filled here and its states by fill(list, t, entry); a full list
// and the last one go to launch(list). An entry that accepts(entry) refuses
// takes none of them (the caller steps it alone).
template <typename List, typename Param, typename Accepts, typename Fill, typename Launch>
void StepInLists(const std::vector<Param>& params, Accepts accepts, Fill fill, Launch launch) {
  List list;
  for (const Param& p : params) {
    if (p.param.numel() == 0 || !accepts(p)) continue;
    const int t = list.count++;
    list.param[t] = p.param.raw();
    list.grad[t] = p.grad.raw();
    list.model_copy[t] = p.model_copy.defined() ? p.model_copy.raw() : nullptr;
    list.numel[t] = p.param.numel();
    list.pdt[t] = static_cast<int8_t>(Dt(p.param));
    list.gdt[t] = static_cast<int8_t>(Dt(p.grad));
    list.mdt[t] = static_cast<int8_t>(p.model_copy.defined() ? Dt(p.model_copy) : 0);
    list.decay[t] = p.weight_decay;
    fill(list, t, p);
    if (list.count == kMaxParamsPerStepLaunch) {
      launch(list);
      list.count = 0;
    }
  }
  if (list.count > 0) launch(list);
}

// One per thread that runs device work.
struct ThreadContext {
  Stream stream = nullptr;
  absl::Status error;         // the first failure on this thread
  double* scratch = nullptr;  // reductions: kMaxReduceBlocks + 1 doubles
  // Host->device staging: a small ring of pinned buffers, each reusable once
  // the copy queued from it has run (its event).
  struct Staging {
    void* host = nullptr;
    size_t bytes = 0;
    Event done = nullptr;
  };
  Staging staging[4];
  int next_staging = 0;
  void* readback = nullptr;  // pinned, for device->host reads
  size_t readback_bytes = 0;
  bool allow_tf32 = false;
  bool initialised = false;
  // The last labels uploaded: a step's loss and its backward use the same.
  std::vector<int32_t> labels;
  Tensor labels_on_device;
  // The 8-bit optimizer states' code maps (signed, then unsigned), uploaded
  // on this thread's stream when first needed.
  Tensor quant_maps;
  // MarkStream's timed events, a ring of Backend::kStreamMarkers (made as
  // needed).
  std::vector<Event> markers;
  size_t next_marker = 0;
};

class CudaBackend final : public backend::Backend {
 public:
  CudaBackend()
      : allocator_(CachingAllocator::RawOps{[](void** p, size_t bytes) { return Malloc(p, bytes); },
                                            [](void* p) { Free(p); }}) {}

  static CudaBackend& Instance();
  engine::Device device() const override { return engine::Device::kCuda; }
  std::string name() const override { return "cuda"; }

  absl::Status Ready() override;
  absl::StatusOr<void*> MarkStream() override;
  absl::Status WaitForMarker(void* marker) override;
  absl::Status Health() override { return Ctx().error; }

  AllocatorStats stats() const { return allocator_.stats(); }

  std::vector<engine::backend::DeviceProperties> Devices() override {
    return ListCudaDevices(nullptr);
  }
  double PeakFlops() override {
    const std::vector<engine::backend::DeviceProperties> d = Devices();
    return d.empty() ? 0 : d.front().peak_bf16_flops;  // jobs run on device 0
  }
  engine::backend::DeviceMemoryStats MemoryStats() override {
    const AllocatorStats a = stats();
    return {a.in_use_bytes, a.peak_in_use_bytes, a.cached_bytes, a.device_allocations};
  }
  Stream stream() { return Ctx().stream; }

  // ---- memory

  Tensor Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) override;
  void Fill(const Tensor& t, double value) override {
    if (Ok()) Record(LaunchFill(t.raw(), Dt(t), t.numel(), value, Ctx().stream));
  }

  void CopyInto(const Tensor& dst, const Tensor& src) override;
  std::vector<double> ReadScalars(const std::vector<Tensor>& scalars) override;

  void SetMatmulOptions(bool allow_tf32) override { Ctx().allow_tf32 = allow_tf32; }

  // ---- kernels, registered by their family's file (kernel_registry.h)
  // matmul.cc
  Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out);
  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out);
  backend::LinearGeluTanhResult LinearGeluTanh(const Tensor& x, const Tensor& w, const Tensor& b,
                                               DType out);
  backend::DGeluTanhResult MatmulDGeluTanh(const Tensor& dy, const Tensor& w, const Tensor& pre,
                                           bool bias_grad, DType bias_dtype);
  // elementwise.cc
  Tensor Cast(const Tensor& x, DType dtype);
  Tensor Unary(OpId op, const Tensor& x);
  Tensor UnaryBackward(OpId op, const Tensor& x, const Tensor& dy);
  Tensor Binary(OpId op, const Tensor& a, const Tensor& b, DType out);
  Tensor Scale(const Tensor& x, double factor, DType out);
  void AddInPlace(const Tensor& x, const Tensor& y, double alpha);
  Tensor Dropout(const Tensor& x, double p, uint64_t seed);
  // reductions.cc
  Tensor SumAll(const Tensor& x, DType out);
  Tensor SumRows(const Tensor& x, DType out);
  // softmax.cc (and the cross-entropy below)
  Tensor Softmax(const Tensor& x, bool log, DType out);
  Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out);
  // layer_norm.cc
  engine::backend::LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, double eps, DType out);
  engine::backend::LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                                    const engine::backend::LayerNormResult& fwd,
                                                    const Tensor& dy);
  Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                             Tensor* row_logsumexp);
  Tensor SoftmaxCrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                     const Tensor& row_logsumexp, float dloss);
  // The upstream gradient (the loss scale times 1/accumulation, on the
  // device) is read by the kernel: no host wait in the middle of backward.
  Tensor SoftmaxCrossEntropyBackwardOnDevice(const Tensor& logits,
                                             const std::vector<int32_t>& labels,
                                             const Tensor& row_logsumexp, const Tensor& dloss);
  engine::backend::CrossEntropyResult CrossEntropy(const Tensor& logits,
                                                   const std::vector<int32_t>& labels);
  Tensor CrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                              const Tensor& row_logsumexp, const Tensor& dloss);
  // attention.cc
  backend::AttentionResult CausalAttention(const Tensor& qkv, int64_t seq_len, int64_t n_head,
                                           const backend::AttentionDropout& dropout);
  Tensor CachedAttention(const Tensor& qkv, const Tensor& k_cache, const Tensor& v_cache,
                         int64_t past, int64_t n_head);
  Tensor CausalAttentionBackward(const Tensor& qkv, const Tensor& y, const Tensor& lse,
                                 const Tensor& dy, int64_t seq_len, int64_t n_head,
                                 const backend::AttentionDropout& dropout);
  // conv.cc (cuDNN)
  Tensor Conv2d(const Tensor& x, const Tensor& w, const Tensor& bias,
                const backend::Conv2dGeometry& g, DType out);
  Tensor Conv2dBackwardData(const Tensor& dy, const Tensor& w, const std::vector<int64_t>& x_shape,
                            const backend::Conv2dGeometry& g, DType out);
  backend::Conv2dWeightGrads Conv2dBackwardWeight(const Tensor& x, const Tensor& dy,
                                                  const std::vector<int64_t>& w_shape, bool bias,
                                                  const backend::Conv2dGeometry& g, DType out);
  // pooling.cc
  Tensor Pool2d(const Tensor& x, const backend::Pool2dGeometry& g, DType out);
  Tensor Pool2dBackward(const Tensor& x, const Tensor& dy, const backend::Pool2dGeometry& g);
  // batch_norm.cc
  backend::BatchNormResult BatchNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     bool training, double momentum, double eps, DType out);
  backend::BatchNormGrads BatchNormBackward(const Tensor& x, const Tensor& gamma,
                                            const Tensor& mean, const Tensor& rstd,
                                            const Tensor& dy, bool training);
  // embedding.cc
  Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids);
  Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids, int64_t num_rows);

  // ---- device AMP and optimizers (device_amp.cc)

  engine::backend::NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads,
                                                  float inv_scale) override;
  double SumOfSquares(const std::vector<Tensor>& tensors) override;
  void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
               const SgdHyper& h, bool first) override;
  void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamWHyper& h) override;
  void UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads,
                               const engine::backend::DeviceAmpState& amp) override;
  void MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                const Tensor& found_inf) override;
  void UpdateScaleOnDevice(const engine::backend::DeviceAmpState& amp,
                           const engine::backend::ScaleUpdateOptions& o) override;
  void SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out) override;
  void ClipOnDevice(const std::vector<Tensor>& grads, const Tensor& sum_sq, double max_norm,
                    const Tensor& found_inf) override;
  void SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                    const SgdHyper& h, bool first, const FusedStepArgs& args) override;
  void AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const AdamWHyper& h,
                      const FusedStepArgs& args) override;
  void AdamWStepFusedList(const std::vector<AdamWParam>& params, const AdamWHyper& h,
                          const Tensor& found_inf, const Tensor& step) override;
  // optimizers8bit.cc (fused: skip, device step and model copy as above)
  void AdamW8bitStep(const Tensor& param, const Tensor& grad, const Tensor& m_codes,
                     const Tensor& m_absmax, const Tensor& v_codes, const Tensor& v_absmax,
                     const AdamWHyper& h, const FusedStepArgs& args);
  void AdamW8bitStepList(const std::vector<backend::AdamW8bitParam>& params, const AdamWHyper& h,
                         const Tensor& found_inf, const Tensor& step);
  void Sgd8bitStep(const Tensor& param, const Tensor& grad, const Tensor& codes,
                   const Tensor& absmax, const SgdHyper& h, bool first, const FusedStepArgs& args);
  void Sgd8bitStepList(const std::vector<backend::Sgd8bitParam>& params, const SgdHyper& h,
                       bool first, const Tensor& found_inf);
  // fp8.cc
  Tensor Fp8Cast(const Tensor& x, core::Fp8Format format, const Tensor& scales,
                 const Tensor& amax_history, int64_t index, const Tensor& saturated);
  Tensor Fp8Decode(const Tensor& codes, core::Fp8Format format, const Tensor& scale_invs,
                   int64_t index, DType dtype);
  void Fp8UpdateScaling(const Tensor& amax_history, const Tensor& scales, const Tensor& scale_invs,
                        const Tensor& scaled_max, core::AmaxAlgo algo);
  Tensor Fp8Matmul(const Tensor& a, core::Fp8Format a_format, const Tensor& b,
                   core::Fp8Format b_format, const Tensor& scale_invs, int64_t a_index,
                   int64_t b_index, const Tensor& bias, DType out);
  engine::backend::Fp8CastTransposeResult Fp8CastTranspose(const Tensor& x, core::Fp8Format format,
                                                           const Tensor& scales,
                                                           const Tensor& amax_history,
                                                           int64_t index, const Tensor& saturated);

 private:
  static ThreadContext& RawCtx() {
    static thread_local ThreadContext ctx;
    return ctx;
  }

  ThreadContext& Ctx();
  Stream S() { return Ctx().stream; }
  double* Scratch() { return Ctx().scratch; }
  bool Ok() { return Ctx().error.ok(); }

  void Fail(const absl::Status& s) {
    ThreadContext& c = Ctx();
    if (c.error.ok()) c.error = s;
  }
  // Keeps the first error; "" means success.
  void Record(const std::string& error) {
    if (!error.empty()) Fail(absl::InternalError(absl::StrCat("CUDA: ", error)));
  }

  bool EnsureReadback(size_t bytes);
  void Upload(void* dst, const void* src, size_t bytes);
  void Download(void* dst, const void* src, size_t bytes);
  // Ids as a device tensor of int32 (f32-sized elements), uploaded each call.
  Tensor UploadIds(const std::vector<int32_t>& ids);
  // The same, cached for the loss's labels: a step's loss and its backward
  // ask for the same ones (one entry; the embedding's ids go around it).
  Tensor UploadLabels(const std::vector<int32_t>& labels);
  const float* QuantMaps();  // device, 512 f32 (null after an error)
  // The defined tensors, kMaxTensorsPerLaunch to a list (none: no list).
  static std::vector<TensorList> Lists(const std::vector<Tensor>& tensors);
  void SumOfSquaresInto(const std::vector<Tensor>& tensors, const Tensor& out);
  static bool NativeOutput(DType in, DType out);
  Tensor Gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out,
              const Tensor& bias);
  // op(a) @ op(b) into c (c's shape and dtype give the output's).
  GemmArgs GemmOf(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& c);

  CachingAllocator allocator_;
  std::once_flag probe_once_;
  absl::Status probe_;
};

// Registers a CudaBackend member function as the CUDA kernel K.
#define AMPD_CUDA_KERNEL(K, method) \
  AMPD_REGISTER_KERNEL(backend::K, engine::Device::kCuda, KernelMethod<&CudaBackend::method>::Call)

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_CUDA_BACKEND_IMPL_H_
