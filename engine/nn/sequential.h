#ifndef AMPD_ENGINE_NN_SEQUENTIAL_H_
#define AMPD_ENGINE_NN_SEQUENTIAL_H_

// A stack of layers run in order (torch.nn.Sequential), for convnets and
// more: conv2d, pooling, batch norm, layer norm, activations, dropout,
// flatten, linear, and residual blocks that add a sub-stack's output to
// their input (through an optional 1x1 projection). Shapes are inferred
// from the example shape and checked layer by layer when the spec is
// validated: an impossible stack is INVALID_ARGUMENT naming the layer and
// both shapes. Parameters and buffers are named as PyTorch's nn.Sequential
// names them ("0.weight", "1.running_mean", "4.body.0.weight",
// "4.shortcut.0.weight"), in NCHW/OIHW layouts.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/amp/precision.h"
#include "engine/nn/mlp.h"

namespace ampd::engine::nn {

enum class LayerKind {
  kConv2d,
  kMaxPool2d,
  kAvgPool2d,
  kAdaptiveAvgPool2d,
  kBatchNorm2d,
  kLayerNorm,
  kActivation,
  kDropout,
  kFlatten,
  kLinear,
  kResidual,
};
const char* LayerKindName(LayerKind kind);  // "conv2d", ... (the spec's field names)

struct LayerSpec {
  LayerKind kind = LayerKind::kFlatten;
  // conv2d: in_channels (0: the input's), out_channels; linear: in_features
  // (0: the input's), out_features; batch_norm2d: num_features (0: the input's).
  int64_t in = 0, out = 0;
  // conv2d and pooling, per dim (height, width). stride 0: 1 for conv2d, the
  // kernel for pooling (PyTorch's defaults).
  int64_t kernel[2] = {0, 0}, stride[2] = {0, 0}, padding[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
  bool bias = true;
  bool count_include_pad = true;      // avg_pool2d
  int64_t output[2] = {1, 1};         // adaptive_avg_pool2d
  double momentum = 0.1, eps = 1e-5;  // batch_norm2d (eps also layer_norm)
  Activation activation = Activation::kRelu;
  double p = 0.5;  // dropout
  // residual: out = after(body(x) + shortcut(x)).
  std::vector<LayerSpec> body;
  enum class Shortcut { kIdentity, kConv1x1, kConv1x1BatchNorm } shortcut = Shortcut::kIdentity;
  bool activation_after = false;  // apply `activation` after the sum (ResNet's ReLU)
};

struct SequentialSpec {
  // One example's shape: [channels, height, width] for images, [features]
  // for vectors. Empty: the data set's.
  std::vector<int64_t> input_shape;
  std::vector<LayerSpec> layers;
  int64_t num_classes = 0;  // 0: the data set's; the last layer must produce [num_classes]
};

struct ModelShape;
class Model;

// INVALID_ARGUMENT naming the field ("model.sequential.layers[3].conv2d"):
// the layer's index, what it needs and the shape it got.
absl::Status ValidateSequential(const SequentialSpec& spec);
ModelShape DescribeSequential(const SequentialSpec& spec);
std::unique_ptr<Model> BuildSequential(const SequentialSpec& spec,
                                       const amp::PrecisionConfig& precision, uint64_t seed);
int64_t SequentialInputDim(const SequentialSpec& spec);  // product of input_shape

}  // namespace ampd::engine::nn

#endif  // AMPD_ENGINE_NN_SEQUENTIAL_H_
