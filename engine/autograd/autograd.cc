#include "engine/autograd/autograd.h"

#include <unordered_map>
#include <unordered_set>

#include "engine/backend/kernels/cast.h"
#include "engine/backend/kernels/elementwise.h"

namespace ampd::engine::autograd {

using backend::AddInPlaceKernel;
using backend::BinaryKernel;
using backend::CastKernel;
using backend::Kernel;

namespace {

thread_local bool grad_enabled = true;

void TopoSort(const Tensor& t, std::unordered_set<TensorImpl*>& seen, std::vector<Tensor>& order) {
  // Iterative DFS: deep graphs (long sequences) must not overflow the stack.
  struct Frame {
    Tensor tensor;
    size_t next_input;
  };
  std::vector<Frame> stack;
  if (!seen.insert(t.impl()).second) return;
  stack.push_back({t, 0});
  while (!stack.empty()) {
    Frame& f = stack.back();
    const auto& node = f.tensor.grad_fn();
    if (node && f.next_input < node->inputs.size()) {
      const Tensor& in = node->inputs[f.next_input++];
      if (in.defined() && (in.requires_grad() || in.grad_fn()) && seen.insert(in.impl()).second) {
        stack.push_back({in, 0});
      }
      continue;
    }
    order.push_back(f.tensor);
    stack.pop_back();
  }
}

void Accumulate(std::unordered_map<TensorImpl*, Tensor>& grads, const Tensor& target,
                const Tensor& grad) {
  auto it = grads.find(target.impl());
  if (it == grads.end()) {
    grads.emplace(target.impl(), grad);
  } else {
    it->second =
        Kernel<BinaryKernel>(it->second.device())(OpId::kAdd, it->second, grad, it->second.dtype());
  }
}

bool Differentiable(const Tensor& t) { return t.defined() && (t.requires_grad() || t.grad_fn()); }

// One Backward() call: the gradients accumulated so far, and how many
// contributions each tensor still waits for (one per use by a node of the
// graph), so that a tensor can be processed as soon as its last use has
// delivered, not only when the reverse order reaches it.
struct Run {
  std::unordered_map<TensorImpl*, Tensor> grads;
  std::unordered_map<TensorImpl*, int> pending;
  const LeafGradHook* on_leaf = nullptr;

  // Runs t's node backward (or finalizes a leaf) with the gradient
  // accumulated for it, if any. `eager`: its inputs whose last contribution
  // this is are processed at once too (the path from an early weight
  // gradient to its leaf: casts, reshapes).
  void Process(const Tensor& t, bool eager);
  void Deliver(const Tensor& target, const Tensor& grad, bool eager);
};

// The node whose backward function runs now, for InputGradReady.
struct Current {
  Run* run = nullptr;
  const Node* node = nullptr;
  std::vector<char>* early = nullptr;  // inputs already delivered by InputGradReady
};
thread_local Current current;

void Run::Deliver(const Tensor& target, const Tensor& grad, bool eager) {
  if (grad.defined() && target.defined()) Accumulate(grads, target, grad);
  if (!Differentiable(target)) return;
  auto it = pending.find(target.impl());
  if (it == pending.end()) return;
  if (--it->second == 0 && eager) Process(target, true);
}

void Run::Process(const Tensor& t, bool eager) {
  auto g = grads.find(t.impl());
  if (g == grads.end()) return;
  Tensor gout = g->second;
  grads.erase(g);
  if (const auto& node = t.grad_fn()) {
    std::vector<char> early(node->inputs.size(), 0);
    const Current saved = current;
    current = Current{this, node.get(), &early};
    std::vector<Tensor> gin = node->backward(gout);
    current = saved;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      if (early[i]) continue;  // delivered while the backward ran
      Deliver(node->inputs[i], i < gin.size() ? gin[i] : Tensor(), eager);
    }
  } else if (t.requires_grad()) {
    Tensor leaf_grad =
        gout.dtype() == t.dtype() ? gout : Kernel<CastKernel>(gout.device())(gout, t.dtype());
    if (!t.grad().defined()) {
      t.set_grad(leaf_grad.grad_fn() ? leaf_grad.Detach() : leaf_grad);
    } else {
      Kernel<AddInPlaceKernel>(t.device())(t.grad(), leaf_grad, 1.0);
    }
    if (*on_leaf) (*on_leaf)(t);
  }
}

}  // namespace

bool GradEnabled() { return grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

Tensor Record(Tensor output, OpId op, std::vector<Tensor> inputs, BackwardFn backward) {
  if (!grad_enabled) return output;
  bool any = false;
  for (const Tensor& in : inputs) any |= in.defined() && (in.requires_grad() || in.grad_fn());
  if (!any) return output;
  auto node = std::make_shared<Node>();
  node->op = op;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  output.impl()->grad_fn = std::move(node);
  return output;
}

void Backward(const Tensor& root, const Tensor& grad) { Backward(root, grad, LeafGradHook()); }

void Backward(const Tensor& root, const Tensor& grad, const LeafGradHook& on_leaf) {
  std::unordered_set<TensorImpl*> seen;
  std::vector<Tensor> order;
  TopoSort(root, seen, order);
  Run run;
  run.on_leaf = &on_leaf;
  for (const Tensor& t : order) {
    if (const auto& node = t.grad_fn()) {
      for (const Tensor& in : node->inputs) {
        if (Differentiable(in)) ++run.pending[in.impl()];
      }
    }
  }
  run.grads.emplace(
      root.impl(),
      grad.defined() ? grad : Tensor::Full(root.shape(), root.dtype(), 1.0, root.device()));
  NoGradGuard no_grad;
  // Reverse topological order: a tensor comes after every node that uses
  // it. One already processed early (InputGradReady) has no gradient left.
  for (auto it = order.rbegin(); it != order.rend(); ++it) run.Process(*it, false);
}

bool InputGradReady(size_t input, const Tensor& grad) {
  if (current.run == nullptr || input >= current.node->inputs.size() || (*current.early)[input]) {
    return false;
  }
  (*current.early)[input] = 1;
  Run* run = current.run;
  const Current saved = current;
  run->Deliver(current.node->inputs[input], grad, true);
  current = saved;
  return true;
}

}  // namespace ampd::engine::autograd
