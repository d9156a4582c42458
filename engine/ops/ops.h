#ifndef AMPD_ENGINE_OPS_OPS_H_
#define AMPD_ENGINE_OPS_OPS_H_

// Differentiable ops. Each goes through autocast (see autocast.h), computes on
// its inputs' backend, and records its backward for autograd.

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace ampd::engine {

Tensor Cast(const Tensor& x, DType dtype);
// a [M, K] @ b [K, N].
Tensor Matmul(Tensor a, Tensor b);
// x [M, in] @ w[out, in]^T + b[out] (b may be undefined), as torch.nn.functional.linear.
Tensor Linear(Tensor x, Tensor w, Tensor b);
// b has a's shape, is a row vector over a's last dim, or a scalar.
Tensor Add(Tensor a, Tensor b);
Tensor Sub(Tensor a, Tensor b);
Tensor Mul(Tensor a, Tensor b);
Tensor Relu(Tensor x);
Tensor Gelu(Tensor x);
Tensor Exp(Tensor x);
Tensor Log(Tensor x);
Tensor Square(Tensor x);      // pow(x, 2)
Tensor Softmax(Tensor x);     // along the last dim
Tensor LogSoftmax(Tensor x);  // along the last dim
Tensor LayerNorm(Tensor x, Tensor gamma, Tensor beta, double eps = 1e-5);
// Mean cross-entropy of softmax(logits) against labels, computed in f32.
Tensor SoftmaxCrossEntropy(Tensor logits, const std::vector<int32_t>& labels);
Tensor Embedding(Tensor table, const std::vector<int32_t>& ids);
// Inverted dropout; identity when !training or p == 0. Same seed, same mask.
Tensor Dropout(Tensor x, double p, uint64_t seed, bool training);
Tensor Sum(Tensor x);
Tensor Mean(Tensor x);
Tensor MulScalar(Tensor x, double factor);

// In place, never autocast and never recorded (like torch's x.add_()).
void AddInPlace(const Tensor& x, const Tensor& y, double alpha = 1.0);

}  // namespace ampd::engine

#endif  // AMPD_ENGINE_OPS_OPS_H_
