#ifndef AMPD_ENGINE_OPS_ELEMENTWISE_H_
#define AMPD_ENGINE_OPS_ELEMENTWISE_H_

// Elementwise ops: the binary family (add, sub, mul, broadcasting like
// torch), the unary family (relu, gelu, exp, log, pow), scaling, and the
// in-place add.

#include "engine/core/tensor.h"

namespace ampd::engine::ops {

// b has a's shape, is a row vector over a's last dim, or a scalar.
Tensor Add(Tensor a, Tensor b);
Tensor Sub(Tensor a, Tensor b);
Tensor Mul(Tensor a, Tensor b);
Tensor Relu(Tensor x);
Tensor Gelu(Tensor x);
// GELU's tanh approximation (GPT-2's; torch's gelu(x, approximate="tanh")).
Tensor GeluTanh(Tensor x);
Tensor Exp(Tensor x);
Tensor Log(Tensor x);
Tensor Square(Tensor x);  // pow(x, 2)
Tensor MulScalar(Tensor x, double factor);
// In place, never autocast and never recorded (like torch's x.add_()).
void AddInPlace(const Tensor& x, const Tensor& y, double alpha = 1.0);

}  // namespace ampd::engine::ops

#endif  // AMPD_ENGINE_OPS_ELEMENTWISE_H_
