#ifndef AMPD_ENGINE_BACKEND_BACKEND_H_
#define AMPD_ENGINE_BACKEND_BACKEND_H_

// The kernel boundary. Everything above it (autograd, autocast, optimizers,
// the trainer) is device-neutral; each device implements this interface (the
// CPU with oneDNN and plain loops, CUDA with cuBLASLt and its own kernels).
// Kernels accumulate in fp32 (fp64 for fp64 inputs) whatever the storage type,
// and round once when they store.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/device_memory.h"
#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine {


struct LayerNormResult {
  Tensor y;
  Tensor mean;  // f32 (f64 for f64 input), one per row
  Tensor rstd;
};

struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};

struct NonFiniteCheck {
  bool found_inf = false;
  int first_index = -1;  // index into the tensor list of the first non-finite one
};

// The device-side AMP state (torch.amp.GradScaler's _scale, _growth_tracker
// and found_inf tensors): f32 [1] tensors on the backend's device, so a step
// can unscale, decide to skip and update the scale without the host reading
// anything. The host reads them (ReadScalars) only when it reports metrics.
struct DeviceAmpState {
  Tensor scale;           // the loss scale
  Tensor growth_tracker;  // consecutive good steps (integer-valued)
  Tensor found_inf;       // 1 when this step saw inf/NaN, else 0
};

struct ScaleUpdateOptions {
  bool dynamic = true;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0;  // 0: no bound
  double max_scale = 0;  // 0: no bound
};

// One physical device behind a backend, as GetCapabilities describes it.
struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability (CUDA)
  int64_t memory_bytes = 0;
  int multiprocessors = 0;
  bool bf16 = false;  // native bf16 matmul units
  bool f16 = false;
  bool fp8 = false;
};

// A backend's device memory counters (zeros for the host).
struct DeviceMemoryStats {
  int64_t in_use_bytes = 0;
  int64_t peak_in_use_bytes = 0;
  int64_t cached_bytes = 0;
  int64_t device_allocations = 0;
};

class Backend : public DeviceMemory {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Whether this backend has a kernel for `op` (forward and gradient): every
  // op that is a method below (each backend implements them all), and the
  // registry's ops registered for its device (kernel_registry.h). A job whose
  // model needs an op its device lacks is refused when it is created
  // (CheckKernels in engine/train), never run on something else.
  virtual bool HasKernel(OpId op) const;

  // Memory (Allocate, Fill, CopyInto, ReadScalars) is the DeviceMemory
  // interface of engine/core: the CPU versions are plain host tensors; a
  // device backend allocates from its caching allocator.

  // A failed device call makes the backend unusable for the job that hit it;
  // kernels cannot return errors through Tensor results, so they record the
  // first one here (with the call site) and the trainer checks after each step.
  virtual absl::Status Health() { return absl::OkStatus(); }
  // Why this backend cannot run jobs now (no device): checked by BackendFor.
  virtual absl::Status Ready() { return absl::OkStatus(); }
  // The devices it drives (empty for the CPU, which engine/cpu/capabilities
  // describes), and its memory counters: what the server reports, so that it
  // never calls a device library itself.
  virtual std::vector<DeviceProperties> Devices() { return {}; }
  virtual DeviceMemoryStats MemoryStats() { return {}; }

  // op(a) @ op(b) for 2-D a, b of the same dtype; fp32 accumulation.
  virtual Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                        DType out) = 0;
  // x @ w^T + b (b may be undefined): a Linear's forward. Device backends fuse
  // the bias into the GEMM's epilogue (one rounding instead of two).
  virtual Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
    Tensor y = Matmul(x, w, false, true, out);
    return b.defined() ? Binary(OpId::kAdd, y, b, out) : y;
  }
  // For the calling thread's following GEMMs: may f32 GEMMs use TF32?
  virtual void SetMatmulOptions(bool allow_tf32) {}
  // Always a new tensor, even when dtype is x's.
  virtual Tensor Cast(const Tensor& x, DType dtype) = 0;
  // op: one of the unary family (IsUnaryOp in op_list.h).
  virtual Tensor Unary(OpId op, const Tensor& x) = 0;
  // d(op(x))/dx * dy, stored in the dtype of dy.
  virtual Tensor UnaryBackward(OpId op, const Tensor& x, const Tensor& dy) = 0;
  // op: one of the binary family (IsBinaryOp). a (op) b where b has a's shape, or b is a row vector broadcast over the
  // last dim of a, or b is a scalar (numel 1).
  virtual Tensor Binary(OpId op, const Tensor& a, const Tensor& b, DType out) = 0;
  virtual Tensor Scale(const Tensor& x, double factor, DType out) = 0;
  virtual Tensor SumAll(const Tensor& x, DType out) = 0;
  // Sum over rows of a [M, N] view: -> [N]. Bias gradients.
  virtual Tensor SumRows(const Tensor& x, DType out) = 0;
  // Along the last dim.
  virtual Tensor Softmax(const Tensor& x, bool log, DType out) = 0;
  virtual Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) = 0;
  virtual LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    double eps, DType out) = 0;
  virtual LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                           const LayerNormResult& fwd, const Tensor& dy) = 0;
  // Mean over rows of -log softmax(logits)[label]. Keeps per-row logsumexp
  // (fp32) for the backward instead of the probabilities.
  virtual Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                                     Tensor* row_logsumexp) = 0;
  virtual Tensor SoftmaxCrossEntropyBackward(const Tensor& logits,
                                             const std::vector<int32_t>& labels,
                                             const Tensor& row_logsumexp, float dloss) = 0;
  // The same with the upstream gradient as a one-element tensor where the
  // logits are, so that a device backend need not wait to read it (a loss
  // scaled by a scale kept on the device). The default reads it on the host.
  virtual Tensor SoftmaxCrossEntropyBackwardOnDevice(const Tensor& logits,
                                                     const std::vector<int32_t>& labels,
                                                     const Tensor& row_logsumexp,
                                                     const Tensor& dloss) {
    return SoftmaxCrossEntropyBackward(logits, labels, row_logsumexp, dloss.Item());
  }
  virtual Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids) = 0;
  virtual Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                                   int64_t num_rows) = 0;

  // In place: x += alpha * y (same shape). Not autocast, never recorded.
  virtual void AddInPlace(const Tensor& x, const Tensor& y, double alpha) = 0;
  // In place: multiplies every tensor by inv_scale and reports non-finite values
  // (PyTorch's _amp_foreach_non_finite_check_and_unscale_).
  virtual NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads, float inv_scale) = 0;
  // Sum of squares of all elements of all tensors, in fp64 (gradient clipping).
  virtual double SumOfSquares(const std::vector<Tensor>& tensors) = 0;

  // Optimizer updates, in place, with torch.optim semantics; math in f32
  // whatever the param dtype (a low-precision param is rounded once).
  struct SgdHyper {
    float lr = 0, momentum = 0, weight_decay = 0;
    bool nesterov = false;
  };
  // `momentum_buf` (f32) is used when momentum != 0; `first` initialises it.
  virtual void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                       const SgdHyper& h, bool first) = 0;
  struct AdamWHyper {
    float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
    int64_t step = 1;  // 1-based, for bias correction
  };
  virtual void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, const AdamWHyper& h) = 0;

  // --- AMP without host synchronisation (the device path of the trainer).
  // Every gradient *= 1/scale (the reciprocal taken in f64 and rounded to f32,
  // as PyTorch); amp.found_inf becomes 1 if any result is inf/NaN. One launch
  // for all tensors on a device backend.
  virtual void UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads, const DeviceAmpState& amp);
  // Every gradient *= factor (gradient clipping); found_inf (f32 [1]) becomes
  // 1 if any result is inf/NaN. No host read.
  virtual void MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                        const Tensor& found_inf);
  // torch._amp_update_scale_ on the device state, then the optional bounds.
  virtual void UpdateScaleOnDevice(const DeviceAmpState& amp, const ScaleUpdateOptions& o);
  // Sum of squares of all elements into `out` (f32 [1]) without a host read.
  virtual void SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out);
  // The fused optimizer step: does nothing when found_inf (if defined) is
  // non-zero; otherwise updates the f32 master `param` and, when `model_copy`
  // is defined, writes it rounded to the model's dtype in the same pass.
  // AdamW's bias correction uses step + 1, `step` (f32 [1], on the device)
  // holding the steps applied before this one.
  struct FusedStepArgs {
    Tensor found_inf;   // optional
    Tensor model_copy;  // optional
    Tensor step;        // AdamW: required
  };
  virtual void SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                            const SgdHyper& h, bool first, const FusedStepArgs& args);
  virtual void AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const AdamWHyper& h,
                              const FusedStepArgs& args);
};

// The registry: each backend registers itself when linked in (its target is
// alwayslink): engine/cpu for the CPU, engine/cuda for CUDA. Registering also
// makes the backend the device's DeviceMemory (engine/core). nullptr
// unregisters (tests).
void RegisterBackend(Device device, Backend* backend);
// The backend for `device`: FAILED_PRECONDITION when none is linked in or its
// Ready() says it cannot run jobs here.
absl::StatusOr<Backend*> BackendFor(Device device);
// The backend that holds `t` (tensors only exist on registered devices).
Backend& BackendOf(const Tensor& t);

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_BACKEND_BACKEND_H_
