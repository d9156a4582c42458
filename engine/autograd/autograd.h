#ifndef AMPD_ENGINE_AUTOGRAD_AUTOGRAD_H_
#define AMPD_ENGINE_AUTOGRAD_AUTOGRAD_H_

// Reverse-mode autograd. Each recorded op leaves a Node on its output: the
// inputs it differentiates with respect to and a backward function. Backward()
// walks the recorded graph in reverse topological order (the tape, replayed
// backwards) and accumulates into leaves' .grad.

#include <functional>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/op_list.h"

namespace ampd::engine::autograd {

// Gradients with respect to each input, in input order (undefined = none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Node {
  OpId op;
  std::vector<Tensor> inputs;
  BackwardFn backward;
};

bool GradEnabled();

// Disables recording in its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Attaches a node to `output` when recording is on and an input requires grad.
Tensor Record(Tensor output, OpId op, std::vector<Tensor> inputs, BackwardFn backward);

// Backpropagates from `root` (a scalar unless `grad` is given). Leaf tensors
// with requires_grad accumulate their gradient, in their own dtype.
void Backward(const Tensor& root, const Tensor& grad = Tensor());

// The same, calling on_leaf(leaf) as soon as a leaf's gradient is final for
// this backward (every contribution accumulated: the reverse topological
// order reaches a leaf after all its uses), while the rest of the backward
// is still to run. Data-parallel training starts its all-reduces from here.
using LeafGradHook = std::function<void(const Tensor& leaf)>;
void Backward(const Tensor& root, const Tensor& grad, const LeafGradHook& on_leaf);

// Called by a node's backward function with input `input`'s gradient before
// it computes the others (a layer's weight gradient before its input
// gradient): the engine takes it now, and if that was the last use of a
// weight, finalizes the weight's gradient and calls on_leaf at once, so its
// all-reduce overlaps the rest of this node's backward. Returns true when
// taken: the function then returns an undefined tensor at that index. False
// outside a Backward() run (a test calling the function directly): return
// it as usual. The same arithmetic either way; only the order changes.
bool InputGradReady(size_t input, const Tensor& grad);

}  // namespace ampd::engine::autograd

#endif  // AMPD_ENGINE_AUTOGRAD_AUTOGRAD_H_
