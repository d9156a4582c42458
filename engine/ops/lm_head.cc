#include "engine/ops/lm_head.h"

#include <algorithm>
#include <cmath>

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/cross_entropy.h"
#include "engine/backend/kernels/elementwise.h"
#include "engine/backend/kernels/matmul.h"
#include "engine/core/device_memory.h"
#include "engine/ops/autocast.h"
#include "engine/ops/grad_util.h"
#include "engine/ops/op_def.h"

namespace ampd::engine::ops {

using backend::AddInPlaceKernel;
using backend::CastKernel;
using backend::CrossEntropyBackwardKernel;
using backend::CrossEntropyKernel;
using backend::CrossEntropyResult;
using backend::Kernel;
using backend::LinearKernel;
using backend::MatmulKernel;
using backend::ScaleKernel;
using internal::AsDType;

namespace {

DType StatDType(const Tensor& x) { return x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32; }

std::vector<int32_t> Slice(const std::vector<int32_t>& v, int64_t begin, int64_t end) {
  return std::vector<int32_t>(v.begin() + begin, v.begin() + end);
}

// GEMM libraries' fast kernels want every row of every operand to start on
// a 16-byte boundary, and a vocabulary like GPT-2's 50257 puts the logits'
// rows on 2- and 4-byte ones: cuBLASLt's GEMMs of the head ran at 90-130
// TFLOP/s on an H200 against 600+ for aligned shapes. So the head computes
// over the vocabulary padded to a multiple of 64 (nanoGPT's 50304): the
// weight gains zero rows, and a bias of 0 over the real columns and -inf over
// the padding makes the padded logits -inf, which the softmax gives
// probability 0 exactly. The loss, the logsumexp and the real columns'
// gradients are those of the unpadded head; the padding's gradients are 0.
// The forward keeps the padded head for the backward (its record's last two
// tensors), so a step pads and uploads once: the same memory a padded
// parameter would hold (nanoGPT's), for as long as the step's records live.
constexpr int64_t kVocabMultiple = 64;

struct PaddedHead {
  Tensor w;     // [Vp, C]: w, then zero rows
  Tensor bias;  // [Vp] in the logits' dtype; undefined when nothing is padded
};

PaddedHead PadHead(const Tensor& w, DType logits) {
  const int64_t v = w.dim(0), vp = (v + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
  if (vp == v) return {w, Tensor()};
  const Device dev = w.device();
  PaddedHead p{Tensor::Zeros({vp, w.dim(1)}, w.dtype(), dev), Tensor()};
  core::DeviceMemoryFor(dev).CopyInto(p.w.Rows(0, v), w);
  std::vector<double> bias(vp, 0.0);
  for (int64_t i = v; i < vp; ++i) bias[i] = -INFINITY;
  p.bias = Tensor::FromDoubles(bias, {vp}, logits).To(dev);
  return p;
}

Tensor Logits(const PaddedHead& head, const Tensor& x, DType stat) {
  const Device dev = x.device();
  if (!head.bias.defined()) return Kernel<MatmulKernel>(dev)(x, head.w, false, true, stat);
  return Kernel<LinearKernel>(dev)(x, head.w, head.bias, stat);
}

}  // namespace

Tensor LmHeadCrossEntropy(Tensor x, Tensor w, const std::vector<int32_t>& targets,
                          int64_t chunk_rows) {
  OpDispatch d(OpId::kLmHeadCrossEntropy, {&x, &w});
  const Device dev = x.device();
  const DType stat = StatDType(x);
  const int64_t n = x.dim(0);
  chunk_rows = std::max<int64_t>(1, chunk_rows);
  // The per-chunk means, weighted by their rows, summed in f64.
  Tensor total = Tensor::Zeros({}, DType::kF64, dev);
  std::vector<Tensor> saved;  // each chunk's logsumexp rows, then the padded head
  const PaddedHead head = PadHead(w, stat);
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows) {
    const int64_t r1 = std::min(n, r0 + chunk_rows);
    const Tensor logits = Logits(head, x.Rows(r0, r1), stat);
    const CrossEntropyResult r = Kernel<CrossEntropyKernel>(dev)(logits, Slice(targets, r0, r1));
    saved.push_back(r.row_logsumexp);
    Kernel<AddInPlaceKernel>(dev)(total, r.loss, static_cast<double>(r1 - r0) / n);
  }
  Tensor loss = Kernel<CastKernel>(dev)(total, stat);
  d.Finish(loss);
  if (head.bias.defined()) {  // padded: kept for the backward
    saved.push_back(head.w);
    saved.push_back(head.bias);
  }
  return RecordOp(
      loss, OpId::kLmHeadCrossEntropy,
      {.inputs = {x, w}, .tensors = std::move(saved), .ids = targets, .count = chunk_rows});
}

// Chunk by chunk: the logits again, (softmax - onehot) * g * rows / N, then
// dx = dlogits @ w into the chunk's rows and dw += dlogits^T @ x_chunk (f32).
std::vector<Tensor> LmHeadCrossEntropyGradient(const SavedForBackward& s, const Tensor& g) {
  const Tensor &x = s.inputs[0], &w = s.inputs[1];
  const Device dev = x.device();
  const DType stat = StatDType(x);
  const int64_t n = x.dim(0), chunk_rows = s.count;
  auto matmul = Kernel<MatmulKernel>(dev);
  // The forward's padded head when it padded (after one logsumexp a chunk).
  const size_t chunks = static_cast<size_t>((n + chunk_rows - 1) / chunk_rows);
  const PaddedHead head = s.tensors.size() == chunks + 2
                              ? PaddedHead{s.tensors[chunks], s.tensors[chunks + 1]}
                              : PaddedHead{w, Tensor()};
  Tensor dx = Tensor::Zeros(x.shape(), x.dtype(), dev);
  Tensor dw = Tensor::Zeros(head.w.shape(), stat, dev);
  size_t chunk = 0;
  for (int64_t r0 = 0; r0 < n; r0 += chunk_rows, ++chunk) {
    const int64_t r1 = std::min(n, r0 + chunk_rows);
    const Tensor xc = x.Rows(r0, r1);
    const Tensor logits = Logits(head, xc, stat);
    // The upstream gradient stays where it is (on a device, no host read).
    const Tensor dloss = Kernel<ScaleKernel>(dev)(g, static_cast<double>(r1 - r0) / n, stat);
    const Tensor dlogits = AsDType(Kernel<CrossEntropyBackwardKernel>(dev)(
                                       logits, Slice(s.ids, r0, r1), s.tensors[chunk], dloss),
                                   x.dtype());
    core::DeviceMemoryFor(dev).CopyInto(dx.Rows(r0, r1),
                                        matmul(dlogits, head.w, false, false, x.dtype()));
    Kernel<AddInPlaceKernel>(dev)(dw, matmul(dlogits, xc, true, false, stat), 1.0);
  }
  if (dw.dim(0) != w.dim(0)) {  // the padding's rows (zeros) dropped
    Tensor real = Tensor::Zeros(w.shape(), stat, dev);
    core::DeviceMemoryFor(dev).CopyInto(real, dw.Rows(0, w.dim(0)));
    dw = real;
  }
  return {dx, AsDType(dw, w.dtype())};
}

}  // namespace ampd::engine::ops
