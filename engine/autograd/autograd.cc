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
  std::unordered_map<TensorImpl*, Tensor> grads;
  grads.emplace(root.impl(), grad.defined()
                                 ? grad
                                 : Tensor::Full(root.shape(), root.dtype(), 1.0, root.device()));
  NoGradGuard no_grad;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Tensor& t = *it;
    auto g = grads.find(t.impl());
    if (g == grads.end()) continue;
    Tensor gout = g->second;
    grads.erase(g);
    if (const auto& node = t.grad_fn()) {
      std::vector<Tensor> gin = node->backward(gout);
      for (size_t i = 0; i < node->inputs.size() && i < gin.size(); ++i) {
        if (gin[i].defined() && node->inputs[i].defined())
          Accumulate(grads, node->inputs[i], gin[i]);
      }
    } else if (t.requires_grad()) {
      Tensor leaf_grad =
          gout.dtype() == t.dtype() ? gout : Kernel<CastKernel>(gout.device())(gout, t.dtype());
      if (!t.grad().defined()) {
        t.set_grad(leaf_grad.grad_fn() ? leaf_grad.Detach() : leaf_grad);
      } else {
        Kernel<AddInPlaceKernel>(t.device())(t.grad(), leaf_grad, 1.0);
      }
      if (on_leaf) on_leaf(t);
    }
  }
}

}  // namespace ampd::engine::autograd
