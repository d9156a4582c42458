#ifndef AMPD_ENGINE_OPS_OPS_H_
#define AMPD_ENGINE_OPS_OPS_H_

// Differentiable ops. Each goes through autocast (see autocast.h), computes on
// its inputs' backend, and records its backward for autograd.

// One file pair per op (or per family of ops that share a kernel): this
// header includes them all.

#include "engine/ops/attention.h"
#include "engine/ops/batch_norm.h"
#include "engine/ops/cast.h"
#include "engine/ops/conv.h"
#include "engine/ops/cross_entropy.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/fp8_linear.h"
#include "engine/ops/gelu_mlp.h"
#include "engine/ops/layer_norm.h"
#include "engine/ops/linear.h"
#include "engine/ops/lm_head.h"
#include "engine/ops/pooling.h"
#include "engine/ops/reductions.h"
#include "engine/ops/shape.h"
#include "engine/ops/softmax.h"

#endif  // AMPD_ENGINE_OPS_OPS_H_
