#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/backend/kernels/dropout.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/embedding.h"
#include "engine/backend/kernels/layer_norm.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/backend/kernels/reductions.h"
#include "engine/backend/kernels/softmax.h"
#include "engine/cuda/gemm.h"
#include "engine/cuda/kernels.h"
#include "engine/cuda/runtime.h"
#include "engine/core/half.h"

namespace ampd::engine::cuda {
namespace {

using engine::Backend;
using engine::DType;
using engine::Tensor;
using engine::KernelMethod;
using engine::LinearByMatmul;
using engine::OpId;

int Dt(DType d) { return static_cast<int>(d); }
int Dt(const Tensor& t) { return static_cast<int>(t.dtype()); }

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
};

class CudaBackend final : public Backend {
 public:
  CudaBackend()
      : allocator_(CachingAllocator::RawOps{[](void** p, size_t bytes) { return Malloc(p, bytes); },
                                            [](void* p) { Free(p); }}) {}

  static CudaBackend& Instance();
  engine::Device device() const override { return engine::Device::kCuda; }
  std::string name() const override { return "cuda"; }


  absl::Status Ready() override {
    std::call_once(probe_once_, [this] {
      int count = 0;
      std::string e = DeviceCount(&count);
      if (!e.empty()) {
        probe_ = absl::FailedPreconditionError(e);
      } else if (count == 0) {
        probe_ = absl::FailedPreconditionError("no CUDA device present");
      }
    });
    if (!probe_.ok()) return probe_;
    // A new job on this thread starts clean (an out-of-memory error is not
    // sticky; a sticky one will show up again at the first call). Threads that
    // only ask (RPC handlers) get no stream.
    ThreadContext& c = RawCtx();
    if (c.initialised) {
      c.error = absl::OkStatus();
      c.labels.clear();
      c.labels_on_device = Tensor();
    }
    return absl::OkStatus();
  }

  absl::Status Health() override { return Ctx().error; }

  AllocatorStats stats() const { return allocator_.stats(); }

  std::vector<engine::DeviceProperties> Devices() override { return ListCudaDevices(nullptr); }
  engine::DeviceMemoryStats MemoryStats() override {
    const AllocatorStats a = stats();
    return {a.in_use_bytes, a.peak_in_use_bytes, a.cached_bytes, a.device_allocations};
  }
  Stream stream() { return Ctx().stream; }

  // ---- memory

  Tensor Allocate(const std::vector<int64_t>& shape, DType dtype, bool zero) override {
    auto impl = std::make_shared<engine::TensorImpl>();
    impl->shape = shape;
    impl->dtype = dtype;
    impl->device = engine::Device::kCuda;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    impl->numel = numel;
    ThreadContext& c = Ctx();
    const size_t bytes = std::max<int64_t>(1, numel) * engine::DTypeSize(dtype);
    void* p = nullptr;
    if (c.error.ok()) {
      absl::StatusOr<void*> got = allocator_.Allocate(bytes, c.stream);
      if (got.ok()) {
        p = *got;
        if (zero) Record(MemsetAsync(p, 0, bytes, c.stream));
      } else {
        Fail(got.status());
      }
    }
    CachingAllocator* alloc = &allocator_;
    impl->data = std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p),
                                            [alloc](uint8_t* q) { alloc->Free(q); });
    return Tensor(std::move(impl));
  }

  void Fill(const Tensor& t, double value) override {
    if (Ok()) Record(LaunchFill(t.raw(), Dt(t), t.numel(), value, Ctx().stream));
  }

  void CopyInto(const Tensor& dst, const Tensor& src) override {
    const bool dst_dev = dst.device() == engine::Device::kCuda;
    const bool src_dev = src.device() == engine::Device::kCuda;
    if (dst_dev && src_dev) {
      if (Ok()) Record(LaunchConvert(src.raw(), Dt(src), dst.raw(), Dt(dst), dst.numel(), S()));
      return;
    }
    if (dst_dev) {  // host -> device: upload as it is, convert on the device
      if (src.dtype() == dst.dtype()) {
        Upload(dst.raw(), src.raw(), src.nbytes());
      } else {
        Tensor staged = Allocate(src.shape(), src.dtype(), false);
        Upload(staged.raw(), src.raw(), src.nbytes());
        CopyInto(dst, staged);
      }
      return;
    }
    // device -> host: convert on the device, then one read.
    Tensor from = src;
    if (src.dtype() != dst.dtype()) {
      from = Allocate(src.shape(), dst.dtype(), false);
      CopyInto(from, src);
    }
    Download(dst.raw(), from.raw(), from.nbytes());
  }

  std::vector<double> ReadScalars(const std::vector<Tensor>& scalars) override {
    ThreadContext& c = Ctx();
    std::vector<double> out(scalars.size(), 0.0);
    if (!Ok()) return out;
    if (!EnsureReadback(scalars.size() * 8)) return out;
    for (size_t i = 0; i < scalars.size(); ++i) {
      const size_t size = engine::DTypeSize(scalars[i].dtype());
      Record(MemcpyAsync(static_cast<char*>(c.readback) + i * 8, scalars[i].raw(), size,
                         CopyKind::kDeviceToHost, c.stream));
    }
    Record(StreamSynchronize(c.stream));
    if (!Ok()) return out;
    for (size_t i = 0; i < scalars.size(); ++i) {
      const char* p = static_cast<const char*>(c.readback) + i * 8;
      uint16_t h;
      float f;
      switch (scalars[i].dtype()) {
        case DType::kF32:
          std::memcpy(&f, p, 4);
          out[i] = f;
          break;
        case DType::kF64:
          std::memcpy(&out[i], p, 8);
          break;
        case DType::kF16:
          std::memcpy(&h, p, 2);
          out[i] = engine::F16BitsToF32(h);
          break;
        case DType::kBF16:
          std::memcpy(&h, p, 2);
          out[i] = engine::BF16BitsToF32(h);
          break;
      }
    }
    return out;
  }

  // ---- GEMMs

  void SetMatmulOptions(bool allow_tf32) override { Ctx().allow_tf32 = allow_tf32; }

  Tensor Matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out) {
    return Gemm(a, b, trans_a, trans_b, out, Tensor());
  }

  Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b, DType out) {
    // The bias epilogue wants the bias in the output's dtype and a native
    // output type for the inputs (f32 or the inputs' own); f64 GEMMs (a
    // checking mode, not a fast one) are not asked for epilogues.
    if (b.defined() && b.dtype() == out && x.rank() == 2 && x.dtype() != DType::kF64 &&
        NativeOutput(x.dtype(), out)) {
      return Gemm(x, w, false, true, out, b);
    }
    return LinearByMatmul(x, w, b, out);
  }

  Tensor Cast(const Tensor& x, DType dtype) {
    Tensor y = Allocate(x.shape(), dtype, false);
    CopyInto(y, x);
    return y;
  }

  // ---- elementwise

  Tensor Unary(OpId op, const Tensor& x) {
    Tensor y = Allocate(x.shape(), x.dtype(), false);
    if (Ok()) {
      Record(LaunchUnary(op, x.raw(), Dt(x), y.raw(), Dt(y), x.numel(), S()));
    }
    return y;
  }

  Tensor UnaryBackward(OpId op, const Tensor& x, const Tensor& dy) {
    Tensor dx = Allocate(x.shape(), dy.dtype(), false);
    if (Ok()) {
      Record(LaunchUnaryBackward(op, x.raw(), Dt(x), dy.raw(), Dt(dy), dx.raw(),
                                 x.numel(), S()));
    }
    return dx;
  }

  Tensor Binary(OpId op, const Tensor& a, const Tensor& b, DType out) {
    Tensor y = Allocate(a.shape(), out, false);
    if (Ok()) {
      Record(LaunchBinary(op, a.raw(), Dt(a), b.raw(), Dt(b), b.numel(), y.raw(),
                          Dt(out), a.numel(), S()));
    }
    return y;
  }

  Tensor Scale(const Tensor& x, double factor, DType out) {
    Tensor y = Allocate(x.shape(), out, false);
    if (Ok()) Record(LaunchScale(x.raw(), Dt(x), factor, y.raw(), Dt(out), x.numel(), S()));
    return y;
  }

  void AddInPlace(const Tensor& x, const Tensor& y, double alpha) {
    if (Ok()) Record(LaunchAddInPlace(x.raw(), Dt(x), y.raw(), Dt(y), alpha, x.numel(), S()));
  }

  Tensor Dropout(const Tensor& x, double p, uint64_t seed) {  // DropoutKernel
    Tensor y = Allocate(x.shape(), x.dtype(), false);
    if (Ok()) Record(LaunchDropout(x.raw(), Dt(x), p, seed, y.raw(), x.numel(), S()));
    return y;
  }

  // ---- reductions and rows

  Tensor SumAll(const Tensor& x, DType out) {
    Tensor y = Allocate({}, out, false);
    if (Ok()) Record(LaunchSumAll(x.raw(), Dt(x), x.numel(), Scratch(), y.raw(), Dt(out), S()));
    return y;
  }

  Tensor SumRows(const Tensor& x, DType out) {
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    Tensor y = Allocate({cols}, out, false);
    if (Ok()) Record(LaunchSumRows(x.raw(), Dt(x), rows, cols, y.raw(), Dt(out), S()));
    return y;
  }

  Tensor Softmax(const Tensor& x, bool log, DType out) {
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    Tensor y = Allocate(x.shape(), out, false);
    if (Ok()) Record(LaunchSoftmax(x.raw(), Dt(x), rows, cols, log, y.raw(), Dt(out), S()));
    return y;
  }

  Tensor SoftmaxBackward(const Tensor& y, const Tensor& dy, bool log, DType out) {
    const int64_t cols = y.dim(-1), rows = y.numel() / cols;
    Tensor dx = Allocate(y.shape(), out, false);
    if (Ok()) {
      Record(LaunchSoftmaxBackward(y.raw(), Dt(y), dy.raw(), Dt(dy), rows, cols, log, dx.raw(),
                                   Dt(out), S()));
    }
    return dx;
  }

  engine::LayerNormResult LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    double eps, DType out) {
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    const DType stat = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    engine::LayerNormResult r{Allocate(x.shape(), out, false), Allocate({rows}, stat, false),
                              Allocate({rows}, stat, false)};
    if (Ok()) {
      Record(LaunchLayerNorm(x.raw(), Dt(x), gamma.raw(), Dt(gamma), beta.raw(), rows, cols, eps,
                             r.y.raw(), Dt(out), r.mean.raw(), r.rstd.raw(), Dt(stat), S()));
    }
    return r;
  }

  engine::LayerNormGrads LayerNormBackward(const Tensor& x, const Tensor& gamma,
                                           const engine::LayerNormResult& fwd,
                                           const Tensor& dy) {
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    engine::LayerNormGrads g{Allocate(x.shape(), x.dtype(), false),
                             Allocate({cols}, gamma.dtype(), false),
                             Allocate({cols}, gamma.dtype(), false)};
    if (Ok()) {
      Record(LaunchLayerNormBackward(x.raw(), Dt(x), gamma.raw(), Dt(gamma), fwd.mean.raw(),
                                     fwd.rstd.raw(), Dt(fwd.mean), dy.raw(), Dt(dy), rows, cols,
                                     g.dx.raw(), g.dgamma.raw(), g.dbeta.raw(), S()));
    }
    return g;
  }

  Tensor SoftmaxCrossEntropy(const Tensor& logits, const std::vector<int32_t>& labels,
                             Tensor* row_logsumexp) {
    const int64_t cols = logits.dim(-1), rows = logits.numel() / cols;
    const DType stat = logits.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    Tensor lse = Allocate({rows}, stat, false);
    Tensor row_loss = Allocate({rows}, DType::kF64, false);
    Tensor loss = Allocate({}, stat, false);
    Tensor ids = UploadLabels(labels);
    if (Ok()) {
      Record(LaunchSoftmaxCrossEntropy(logits.raw(), Dt(logits), ids.data<int32_t>(), rows, cols,
                                       lse.raw(), Dt(stat), row_loss.data<double>(), Scratch(),
                                       loss.raw(), Dt(stat), S()));
    }
    if (row_logsumexp) *row_logsumexp = lse;
    return loss;
  }

  Tensor SoftmaxCrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                                     const Tensor& row_logsumexp, float dloss) {
    Tensor on_device = Allocate({1}, DType::kF32, false);
    Fill(on_device, dloss);
    return SoftmaxCrossEntropyBackwardOnDevice(logits, labels, row_logsumexp, on_device);
  }

  // The upstream gradient (the loss scale times 1/accumulation, on the
  // device) is read by the kernel: no host wait in the middle of backward.
  Tensor SoftmaxCrossEntropyBackwardOnDevice(const Tensor& logits,
                                             const std::vector<int32_t>& labels,
                                             const Tensor& row_logsumexp,
                                             const Tensor& dloss) {
    if (dloss.device() != engine::Device::kCuda) {
      return SoftmaxCrossEntropyBackward(logits, labels, row_logsumexp, dloss.Item());
    }
    const int64_t cols = logits.dim(-1), rows = logits.numel() / cols;
    Tensor dx = Allocate(logits.shape(), logits.dtype(), false);
    Tensor ids = UploadLabels(labels);
    if (Ok()) {
      Record(LaunchSoftmaxCrossEntropyBackward(logits.raw(), Dt(logits), ids.data<int32_t>(),
                                               row_logsumexp.raw(), Dt(row_logsumexp), rows, cols,
                                               dloss.raw(), Dt(dloss), dx.raw(), S()));
    }
    return dx;
  }

  engine::CrossEntropyResult CrossEntropy(const Tensor& logits,
                                          const std::vector<int32_t>& labels) {
    engine::CrossEntropyResult r;
    r.loss = SoftmaxCrossEntropy(logits, labels, &r.row_logsumexp);
    return r;
  }
  Tensor CrossEntropyBackward(const Tensor& logits, const std::vector<int32_t>& labels,
                              const Tensor& row_logsumexp, const Tensor& dloss) {
    return SoftmaxCrossEntropyBackwardOnDevice(logits, labels, row_logsumexp, dloss);
  }

  Tensor Embedding(const Tensor& table, const std::vector<int32_t>& ids) {
    const int64_t dim = table.dim(1), n = static_cast<int64_t>(ids.size());
    Tensor y = Allocate({n, dim}, table.dtype(), false);
    Tensor d_ids = UploadLabels(ids);
    if (Ok()) {
      Record(LaunchEmbedding(table.raw(), Dt(table), d_ids.data<int32_t>(), n, dim, y.raw(), S()));
    }
    return y;
  }

  Tensor EmbeddingBackward(const Tensor& dy, const std::vector<int32_t>& ids,
                           int64_t num_rows) {
    const int64_t dim = dy.dim(-1), n = static_cast<int64_t>(ids.size());
    Tensor out = Allocate({num_rows, dim}, dy.dtype(), false);
    Tensor acc = Allocate({num_rows, dim}, DType::kF64, false);
    Tensor d_ids = UploadLabels(ids);
    if (Ok()) {
      Record(LaunchEmbeddingBackward(dy.raw(), Dt(dy), d_ids.data<int32_t>(), n, dim, num_rows,
                                     acc.data<double>(), out.raw(), S()));
    }
    return out;
  }

  // ---- AMP and optimizers

  engine::NonFiniteCheck UnscaleAndCheck(const std::vector<Tensor>& grads,
                                         float inv_scale) override {
    engine::NonFiniteCheck check;
    Tensor found = Allocate({1}, DType::kF32, true);
    for (const TensorList& list : Lists(grads)) {
      if (Ok()) Record(LaunchMultiplyAndCheck(list, inv_scale, found.data<float>(), S()));
    }
    if (ReadScalars({found})[0] == 0) return check;
    check.found_inf = true;
    // Which tensor: each is checked on its own (a rare path; it reads back).
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      Tensor one = Allocate({1}, DType::kF32, true);
      if (Ok()) Record(LaunchMultiplyAndCheck(Lists({grads[i]})[0], 1.0f, one.data<float>(), S()));
      if (ReadScalars({one})[0] != 0) {
        check.first_index = static_cast<int>(i);
        break;
      }
    }
    return check;
  }

  double SumOfSquares(const std::vector<Tensor>& tensors) override {
    Tensor out = Allocate({1}, DType::kF64, false);
    SumOfSquaresInto(tensors, out);
    return ReadScalars({out})[0];
  }

  void SgdStep(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
               const SgdHyper& h, bool first) override {
    SgdStepFused(param, grad, momentum_buf, h, first, FusedStepArgs{});
  }

  void AdamWStep(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, const AdamWHyper& h) override {
    // No flag, no model copy, no device step: the step is h.step.
    AdamWStepFused(param, grad, exp_avg, exp_avg_sq, h, FusedStepArgs{});
  }

  void UnscaleAndCheckOnDevice(const std::vector<Tensor>& grads,
                               const engine::DeviceAmpState& amp) override {
    for (const TensorList& list : Lists(grads)) {
      if (Ok()) {
        Record(
            LaunchUnscaleAndCheck(list, amp.scale.data<float>(), amp.found_inf.data<float>(), S()));
      }
    }
  }

  void MultiplyAndCheckOnDevice(const std::vector<Tensor>& grads, float factor,
                                const Tensor& found_inf) override {
    for (const TensorList& list : Lists(grads)) {
      if (Ok()) Record(LaunchMultiplyAndCheck(list, factor, found_inf.data<float>(), S()));
    }
  }

  void UpdateScaleOnDevice(const engine::DeviceAmpState& amp,
                           const engine::ScaleUpdateOptions& o) override {
    if (!o.dynamic || !Ok()) return;
    Record(LaunchUpdateScale(amp.scale.data<float>(), amp.growth_tracker.data<float>(),
                             amp.found_inf.data<float>(), o.growth_factor, o.backoff_factor,
                             o.growth_interval, o.min_scale, o.max_scale, S()));
  }

  void SumOfSquaresOnDevice(const std::vector<Tensor>& tensors, const Tensor& out) override {
    SumOfSquaresInto(tensors, out);
  }

  void SgdStepFused(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                    const SgdHyper& h, bool first, const FusedStepArgs& args) override {
    SgdArgs a{h.lr, h.momentum, h.weight_decay, h.nesterov, first};
    if (!Ok()) return;
    Record(LaunchSgdStep(param.raw(), Dt(param), grad.raw(), Dt(grad),
                         h.momentum != 0 ? momentum_buf.data<float>() : nullptr, param.numel(), a,
                         args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
                         args.model_copy.defined() ? args.model_copy.raw() : nullptr,
                         args.model_copy.defined() ? Dt(args.model_copy) : 0, S()));
  }

  void AdamWStepFused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                      const Tensor& exp_avg_sq, const AdamWHyper& h,
                      const FusedStepArgs& args) override {
    AdamWArgs a{h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step};
    if (!Ok()) return;
    Record(LaunchAdamWStep(param.raw(), Dt(param), grad.raw(), Dt(grad), exp_avg.data<float>(),
                           exp_avg_sq.data<float>(), param.numel(), a,
                           args.step.defined() ? args.step.data<float>() : nullptr,
                           args.found_inf.defined() ? args.found_inf.data<float>() : nullptr,
                           args.model_copy.defined() ? args.model_copy.raw() : nullptr,
                           args.model_copy.defined() ? Dt(args.model_copy) : 0, S()));
  }

 private:
  static ThreadContext& RawCtx() {
    static thread_local ThreadContext ctx;
    return ctx;
  }

  ThreadContext& Ctx() {
    ThreadContext& ctx = RawCtx();
    if (!ctx.initialised) {
      ctx.initialised = true;
      std::string e = SetDevice(0);
      if (e.empty()) e = StreamCreate(&ctx.stream);
      for (auto& s : ctx.staging) {
        if (e.empty()) e = EventCreate(&s.done);
      }
      if (e.empty()) {
        absl::StatusOr<void*> scratch =
            allocator_.Allocate((kMaxReduceBlocks + 1) * sizeof(double), ctx.stream);
        if (scratch.ok()) {
          ctx.scratch = static_cast<double*>(*scratch);
        } else {
          e = std::string(scratch.status().message());
        }
      }
      if (!e.empty()) ctx.error = absl::InternalError("CUDA setup: " + e);
    }
    return ctx;
  }

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

  bool EnsureReadback(size_t bytes) {
    ThreadContext& c = Ctx();
    if (c.readback_bytes >= bytes) return true;
    if (c.readback) Record(FreeHost(c.readback));
    c.readback = nullptr;
    c.readback_bytes = 0;
    const size_t want = std::max<size_t>(bytes, 4096);
    std::string e = MallocHost(&c.readback, want);
    if (!e.empty()) {
      Record(e);
      return false;
    }
    c.readback_bytes = want;
    return true;
  }

  void Upload(void* dst, const void* src, size_t bytes) {
    ThreadContext& c = Ctx();
    if (!Ok() || bytes == 0) return;
    ThreadContext::Staging& s = c.staging[c.next_staging];
    c.next_staging = (c.next_staging + 1) % 4;
    // The copy last queued from this buffer must have run before it is reused.
    Record(EventSynchronize(s.done));
    if (s.bytes < bytes) {
      if (s.host) Record(FreeHost(s.host));
      s.host = nullptr;
      s.bytes = 0;
      const size_t want = std::max<size_t>(bytes, 1 << 16);
      std::string e = MallocHost(&s.host, want);
      if (!e.empty()) return Record(e);
      s.bytes = want;
    }
    std::memcpy(s.host, src, bytes);
    Record(MemcpyAsync(dst, s.host, bytes, CopyKind::kHostToDevice, c.stream));
    Record(EventRecord(s.done, c.stream));
  }

  void Download(void* dst, const void* src, size_t bytes) {
    ThreadContext& c = Ctx();
    if (!Ok() || bytes == 0) return;
    if (!EnsureReadback(bytes)) return;
    Record(MemcpyAsync(c.readback, src, bytes, CopyKind::kDeviceToHost, c.stream));
    Record(StreamSynchronize(c.stream));
    if (Ok()) std::memcpy(dst, c.readback, bytes);
  }

  Tensor UploadLabels(const std::vector<int32_t>& labels) {
    ThreadContext& c = Ctx();
    if (c.labels_on_device.defined() && c.labels == labels) return c.labels_on_device;
    // Stored as f32-sized elements: an int32 tensor type is not needed elsewhere.
    Tensor t = Allocate({static_cast<int64_t>(labels.size())}, DType::kF32, false);
    Upload(t.raw(), labels.data(), labels.size() * sizeof(int32_t));
    if (Ok()) {
      c.labels = labels;
      c.labels_on_device = t;  // read-only to every kernel, so safe to share
    }
    return t;
  }

  // The defined tensors, kMaxTensorsPerLaunch to a list (none: no list).
  static std::vector<TensorList> Lists(const std::vector<Tensor>& tensors) {
    std::vector<TensorList> lists;
    for (const Tensor& t : tensors) {
      if (!t.defined()) continue;
      if (lists.empty() || lists.back().count == kMaxTensorsPerLaunch) lists.emplace_back();
      TensorList& list = lists.back();
      list.ptr[list.count] = t.raw();
      list.numel[list.count] = t.numel();
      list.dt[list.count] = Dt(t);
      ++list.count;
    }
    return lists;
  }

  void SumOfSquaresInto(const std::vector<Tensor>& tensors, const Tensor& out) {
    std::vector<TensorList> lists = Lists(tensors);
    if (lists.empty()) lists.emplace_back();  // still writes the (zero) sum
    bool accumulate = false;
    for (const TensorList& list : lists) {
      if (Ok()) {
        Record(LaunchSumOfSquares(list, Scratch(), accumulate, out.raw(), Dt(out), S()));
      }
      accumulate = true;
    }
  }

  static bool NativeOutput(DType in, DType out) {
    if (in == DType::kF64) return out == DType::kF64;
    return out == in || out == DType::kF32;
  }

  Tensor Gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, DType out,
              const Tensor& bias) {
    const int64_t m = trans_a ? a.dim(1) : a.dim(0);
    const int64_t k = trans_a ? a.dim(0) : a.dim(1);
    const int64_t n = trans_b ? b.dim(0) : b.dim(1);
    // cuBLASLt writes f32 or the inputs' type; anything else is converted after.
    const DType native = NativeOutput(a.dtype(), out) ? out : a.dtype();
    Tensor c = Allocate({m, n}, native, false);
    if (Ok()) {
      GemmArgs g;
      g.m = m;
      g.n = n;
      g.k = k;
      g.trans_a = trans_a;
      g.trans_b = trans_b;
      g.a = a.raw();
      g.b = b.raw();
      g.c = c.raw();
      g.ab_dtype = Dt(a);
      g.c_dtype = Dt(native);
      g.allow_tf32 = Ctx().allow_tf32;
      GemmRunner& runner = GemmRunner::ForThisThread();
      if (bias.defined()) {
        g.epilogue = Epilogue::kBias;
        g.bias = bias.raw();
        // Where cuBLASLt has no algorithm with the bias epilogue (its support
        // depends on the GPU, types and shape), the bias is added after.
        if (!runner.HasAlgorithm(g)) {
          g.epilogue = Epilogue::kNone;
          g.bias = nullptr;
        }
      }
      Record(runner.Run(g, S()));
      if (bias.defined() && g.epilogue == Epilogue::kNone && Ok()) {
        Record(LaunchBinary(OpId::kAdd, c.raw(), Dt(c), bias.raw(), Dt(bias),
                            n, c.raw(), Dt(c), m * n, S()));
      }
    }
    return native == out ? c : Cast(c, out);
  }

  CachingAllocator allocator_;
  std::once_flag probe_once_;
  absl::Status probe_;
};

CudaBackend& CudaBackend::Instance() {
  static CudaBackend* backend = new CudaBackend();
  return *backend;
}
CudaBackend* Instance() { return &CudaBackend::Instance(); }

#define AMPD_CUDA_KERNEL(K, method) \
  AMPD_REGISTER_KERNEL(engine::K, engine::Device::kCuda, KernelMethod<&CudaBackend::method>::Call)
AMPD_CUDA_KERNEL(MatmulKernel, Matmul);
AMPD_CUDA_KERNEL(LinearKernel, Linear);
AMPD_CUDA_KERNEL(CastKernel, Cast);
AMPD_CUDA_KERNEL(UnaryKernel, Unary);
AMPD_CUDA_KERNEL(UnaryBackwardKernel, UnaryBackward);
AMPD_CUDA_KERNEL(BinaryKernel, Binary);
AMPD_CUDA_KERNEL(ScaleKernel, Scale);
AMPD_CUDA_KERNEL(AddInPlaceKernel, AddInPlace);
AMPD_CUDA_KERNEL(DropoutKernel, Dropout);
AMPD_CUDA_KERNEL(SumAllKernel, SumAll);
AMPD_CUDA_KERNEL(SumRowsKernel, SumRows);
AMPD_CUDA_KERNEL(SoftmaxKernel, Softmax);
AMPD_CUDA_KERNEL(SoftmaxBackwardKernel, SoftmaxBackward);
AMPD_CUDA_KERNEL(LayerNormKernel, LayerNorm);
AMPD_CUDA_KERNEL(LayerNormBackwardKernel, LayerNormBackward);
AMPD_CUDA_KERNEL(CrossEntropyKernel, CrossEntropy);
AMPD_CUDA_KERNEL(CrossEntropyBackwardKernel, CrossEntropyBackward);
AMPD_CUDA_KERNEL(EmbeddingKernel, Embedding);
AMPD_CUDA_KERNEL(EmbeddingBackwardKernel, EmbeddingBackward);

// Registered like every backend, when linked in (the target is alwayslink).
// Safe without a GPU: nothing touches the device until a job asks, and jobs
// that ask for CUDA then get FAILED_PRECONDITION with the probe's reason.
[[maybe_unused]] const bool kRegistered =
    (engine::RegisterBackend(engine::Device::kCuda, Instance()), true);

}  // namespace

std::vector<CudaDeviceInfo> ListCudaDevices(std::string* why_none) {
  std::vector<CudaDeviceInfo> out;
  int count = 0;
  std::string e = DeviceCount(&count);
  if (!e.empty() || count == 0) {
    if (why_none) *why_none = e.empty() ? "no CUDA device present" : e;
    return out;
  }
  for (int i = 0; i < count; ++i) {
    DeviceProperties p;
    if (!GetDeviceProperties(i, &p).empty()) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.memory_bytes = p.total_memory;
    d.multiprocessors = p.multiprocessors;
    d.bf16 = p.major >= 8;
    d.f16 = p.major >= 7;
    d.fp8 = p.major > 8 || (p.major == 8 && p.minor >= 9);
    out.push_back(d);
  }
  return out;
}

AllocatorStats CudaMemoryStats() { return Instance()->stats(); }

void* CudaStreamForThisThread() { return Instance()->stream(); }

std::string SynchronizeThisThread() { return StreamSynchronize(Instance()->stream()); }

}  // namespace ampd::engine::cuda
