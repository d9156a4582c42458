#include "engine/nn/sequential.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/backend/kernels/conv.h"
#include "engine/core/error_subject.h"
#include "engine/nn/model.h"
#include "engine/nn/module.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"

namespace ampd::engine::nn {

using amp::PrecisionConfig;
using backend::Conv2dGeometry;
using backend::ConvOutputSize;
using core::FieldError;
using ops::LayerScope;
using ops::Pool2dGeometry;

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kConv2d:
      return "conv2d";
    case LayerKind::kMaxPool2d:
      return "max_pool2d";
    case LayerKind::kAvgPool2d:
      return "avg_pool2d";
    case LayerKind::kAdaptiveAvgPool2d:
      return "adaptive_avg_pool2d";
    case LayerKind::kBatchNorm2d:
      return "batch_norm2d";
    case LayerKind::kLayerNorm:
      return "layer_norm";
    case LayerKind::kActivation:
      return "activation";
    case LayerKind::kDropout:
      return "dropout";
    case LayerKind::kFlatten:
      return "flatten";
    case LayerKind::kLinear:
      return "linear";
    case LayerKind::kResidual:
      return "residual";
  }
  return "?";
}

namespace {

using Shape = std::vector<int64_t>;

std::string Str(const Shape& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// What walking a stack produces besides its output shape: the parameters
// and buffers in order (PyTorch's names), the ops, the forward's
// multiply-adds and the activations kept, per example.
struct Walk {
  ModelShape* shape = nullptr;
  std::set<OpId> ops;
  double macs = 0;
  int64_t activations = 0;

  void Param(const std::string& layer, const std::string& what, Shape s, bool norm,
             ParameterShape::Init init, int64_t fan_in) {
    shape->parameters.push_back({layer + "." + what, layer, std::move(s), norm, init, fan_in});
  }
  void Buffer(const std::string& layer, const std::string& what, int64_t n,
              ParameterShape::Init init) {
    shape->buffers.push_back({layer + "." + what, layer, {n}, true, init, 0});
  }
};

absl::Status WalkLayers(std::vector<LayerSpec>* layers, Shape in, const std::string& field,
                        const std::string& name, Walk* w, Shape* out);

// Resolves the layer's defaults (inferred sizes, default strides) in place
// and computes its output shape from `in`. `field` is the layer's spec path,
// `name` its PyTorch name (the index path).
absl::Status WalkLayer(LayerSpec* l, const Shape& in, const std::string& field,
                       const std::string& name, Walk* w, Shape* out) {
  using Init = ParameterShape::Init;
  const std::string kind = LayerKindName(l->kind);
  const std::string f = absl::StrCat(field, ".", kind);
  auto need_image = [&]() -> absl::Status {
    if (in.size() == 3) return absl::OkStatus();
    return FieldError(f, absl::StrCat(kind, " needs an image input [channels, height, width]; ",
                                      "its input is ", Str(in)));
  };
  auto pair_ok = [&](const int64_t v[2], int64_t min, const char* what) -> absl::Status {
    if (v[0] >= min && v[1] >= min) return absl::OkStatus();
    return FieldError(absl::StrCat(f, ".", what),
                      absl::StrCat("must be >= ", min, ", got [", v[0], ", ", v[1], "]"));
  };
  switch (l->kind) {
    case LayerKind::kConv2d: {
      if (absl::Status s = need_image(); !s.ok()) return s;
      const int64_t c = in[0];
      if (l->in == 0) l->in = c;
      if (l->in != c) {
        return FieldError(f + ".in_channels", absl::StrCat("is ", l->in, " but its input is ",
                                                           Str(in), " (", c, " channels)"));
      }
      if (l->out <= 0) {
        return FieldError(f + ".out_channels", absl::StrCat("must be > 0, got ", l->out));
      }
      for (int d = 0; d < 2; ++d) {
        if (l->stride[d] == 0) l->stride[d] = 1;
      }
      if (absl::Status s = pair_ok(l->kernel, 1, "kernel_size"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->stride, 1, "stride"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->padding, 0, "padding"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->dilation, 1, "dilation"); !s.ok()) return s;
      if (l->groups < 1 || c % l->groups != 0 || l->out % l->groups != 0) {
        return FieldError(f + ".groups",
                          absl::StrCat("must divide both the input's ", c, " channels and the ",
                                       l->out, " output channels, got ", l->groups));
      }
      Shape o = {l->out, 0, 0};
      for (int d = 0; d < 2; ++d) {
        o[1 + d] =
            ConvOutputSize(in[1 + d], l->kernel[d], l->stride[d], l->padding[d], l->dilation[d]);
      }
      if (o[1] <= 0 || o[2] <= 0) {
        return FieldError(
            f, absl::StrCat("kernel ", l->kernel[0], "x", l->kernel[1], " (dilation ",
                            l->dilation[0], "x", l->dilation[1], ") does not fit its input ",
                            Str(in), " padded by ", l->padding[0], "x", l->padding[1]));
      }
      const int64_t fan_in = c / l->groups * l->kernel[0] * l->kernel[1];
      if (w->shape != nullptr) {
        w->Param(name, "weight", {l->out, c / l->groups, l->kernel[0], l->kernel[1]}, false,
                 Init::kUniformFanIn, fan_in);
        if (l->bias) w->Param(name, "bias", {l->out}, false, Init::kUniformFanIn, fan_in);
      }
      w->ops.insert(OpId::kConv2d);
      w->macs += static_cast<double>(Numel(o)) * fan_in;
      *out = o;
      break;
    }
    case LayerKind::kMaxPool2d:
    case LayerKind::kAvgPool2d: {
      if (absl::Status s = need_image(); !s.ok()) return s;
      const bool max = l->kind == LayerKind::kMaxPool2d;
      for (int d = 0; d < 2; ++d) {
        if (l->stride[d] == 0) l->stride[d] = l->kernel[d];
        if (!max) l->dilation[d] = 1;
      }
      if (absl::Status s = pair_ok(l->kernel, 1, "kernel_size"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->stride, 1, "stride"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->padding, 0, "padding"); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->dilation, 1, "dilation"); !s.ok()) return s;
      for (int d = 0; d < 2; ++d) {
        // PyTorch: "pad should be at most half of effective kernel size".
        if (2 * l->padding[d] > l->dilation[d] * (l->kernel[d] - 1) + 1) {
          return FieldError(
              f + ".padding",
              absl::StrCat("must be at most half the kernel (", l->kernel[0], "x", l->kernel[1],
                           "), got [", l->padding[0], ", ", l->padding[1], "]"));
        }
      }
      Pool2dGeometry g;
      g.op = max ? OpId::kMaxPool2d : OpId::kAvgPool2d;
      for (int d = 0; d < 2; ++d) {
        g.kernel[d] = l->kernel[d], g.stride[d] = l->stride[d], g.padding[d] = l->padding[d];
        g.dilation[d] = l->dilation[d];
      }
      Shape o = {in[0], ops::PoolOutputSize(g, 0, in[1]), ops::PoolOutputSize(g, 1, in[2])};
      if (o[1] <= 0 || o[2] <= 0) {
        return FieldError(f, absl::StrCat("kernel ", l->kernel[0], "x", l->kernel[1],
                                          " is larger than its input ", Str(in), " padded by ",
                                          l->padding[0], "x", l->padding[1]));
      }
      w->ops.insert(g.op);
      *out = o;
      break;
    }
    case LayerKind::kAdaptiveAvgPool2d: {
      if (absl::Status s = need_image(); !s.ok()) return s;
      if (absl::Status s = pair_ok(l->output, 1, "output_size"); !s.ok()) return s;
      w->ops.insert(OpId::kAdaptiveAvgPool2d);
      *out = {in[0], l->output[0], l->output[1]};
      break;
    }
    case LayerKind::kBatchNorm2d: {
      if (absl::Status s = need_image(); !s.ok()) return s;
      if (l->in == 0) l->in = in[0];
      if (l->in != in[0]) {
        return FieldError(f + ".num_features", absl::StrCat("is ", l->in, " but its input is ",
                                                            Str(in), " (", in[0], " channels)"));
      }
      if (!(l->momentum >= 0 && l->momentum <= 1)) {
        return FieldError(f + ".momentum", absl::StrCat("must be in [0, 1], got ", l->momentum));
      }
      if (!(l->eps > 0)) return FieldError(f + ".eps", absl::StrCat("must be > 0, got ", l->eps));
      if (w->shape != nullptr) {
        w->Param(name, "weight", {in[0]}, true, Init::kOnes, 0);
        w->Param(name, "bias", {in[0]}, true, Init::kZeros, 0);
        w->Buffer(name, "running_mean", in[0], Init::kZeros);
        w->Buffer(name, "running_var", in[0], Init::kOnes);
      }
      w->ops.insert(OpId::kBatchNorm);
      *out = in;
      break;
    }
    case LayerKind::kLayerNorm: {
      if (in.empty()) return FieldError(f, "needs an input with at least one dim");
      if (!(l->eps > 0)) return FieldError(f + ".eps", absl::StrCat("must be > 0, got ", l->eps));
      if (w->shape != nullptr) {
        w->Param(name, "weight", {in.back()}, true, Init::kOnes, 0);
        w->Param(name, "bias", {in.back()}, true, Init::kZeros, 0);
      }
      w->ops.insert(OpId::kLayerNorm);
      *out = in;
      break;
    }
    case LayerKind::kActivation:
      w->ops.insert(l->activation == Activation::kRelu ? OpId::kRelu : OpId::kGelu);
      *out = in;
      break;
    case LayerKind::kDropout:
      if (!(l->p >= 0 && l->p < 1)) {
        return FieldError(f, absl::StrCat("must be in [0, 1), got ", l->p));
      }
      if (l->p > 0) w->ops.insert(OpId::kDropout);
      *out = in;
      break;
    case LayerKind::kFlatten:
      w->ops.insert(OpId::kReshape);
      *out = {Numel(in)};
      break;
    case LayerKind::kLinear: {
      if (in.size() != 1) {
        return FieldError(f, absl::StrCat("linear needs a flat input [features]; its input is ",
                                          Str(in), " (add a flatten layer before it)"));
      }
      if (l->in == 0) l->in = in[0];
      if (l->in != in[0]) {
        return FieldError(f + ".in_features",
                          absl::StrCat("is ", l->in, " but its input is ", Str(in)));
      }
      if (l->out <= 0) {
        return FieldError(f + ".out_features", absl::StrCat("must be > 0, got ", l->out));
      }
      if (w->shape != nullptr) {
        w->Param(name, "weight", {l->out, l->in}, false, Init::kUniformFanIn, l->in);
        if (l->bias) w->Param(name, "bias", {l->out}, false, Init::kUniformFanIn, l->in);
      }
      w->ops.insert(OpId::kLinear);
      w->macs += static_cast<double>(l->in) * l->out;
      *out = {l->out};
      break;
    }
    case LayerKind::kResidual: {
      if (l->body.empty()) return FieldError(f + ".layers", "must not be empty");
      Shape body_out;
      if (absl::Status s = WalkLayers(&l->body, in, f + ".layers", name + ".body", w, &body_out);
          !s.ok()) {
        return s;
      }
      if (l->shortcut == LayerSpec::Shortcut::kIdentity) {
        if (body_out != in) {
          return FieldError(
              f, absl::StrCat("the block's output ", Str(body_out), " is not its input's shape ",
                              Str(in), ": set its shortcut to a 1x1 projection"));
        }
      } else {
        if (in.size() != 3 || body_out.size() != 3) {
          return FieldError(f + ".shortcut",
                            absl::StrCat("a 1x1 projection maps images; the block maps ", Str(in),
                                         " to ", Str(body_out)));
        }
        // The projection's stride: the one that maps the input's size to the body's.
        for (int d = 0; d < 2; ++d) {
          l->stride[d] = 0;
          for (int64_t s = 1; s <= in[1 + d]; ++s) {
            if ((in[1 + d] - 1) / s + 1 == body_out[1 + d]) {
              l->stride[d] = s;
              break;
            }
          }
          if (l->stride[d] == 0) {
            return FieldError(f + ".shortcut",
                              absl::StrCat("no 1x1 strided projection maps the input ", Str(in),
                                           " to the block's output ", Str(body_out)));
          }
        }
        const bool bn = l->shortcut == LayerSpec::Shortcut::kConv1x1BatchNorm;
        const std::string sc = name + ".shortcut";
        if (w->shape != nullptr) {
          w->Param(sc + ".0", "weight", {body_out[0], in[0], 1, 1}, false, Init::kUniformFanIn,
                   in[0]);
          if (!bn) {
            w->Param(sc + ".0", "bias", {body_out[0]}, false, Init::kUniformFanIn, in[0]);
          } else {
            w->Param(sc + ".1", "weight", {body_out[0]}, true, Init::kOnes, 0);
            w->Param(sc + ".1", "bias", {body_out[0]}, true, Init::kZeros, 0);
            w->Buffer(sc + ".1", "running_mean", body_out[0], Init::kZeros);
            w->Buffer(sc + ".1", "running_var", body_out[0], Init::kOnes);
          }
        }
        w->ops.insert(OpId::kConv2d);
        if (bn) w->ops.insert(OpId::kBatchNorm);
        w->macs += static_cast<double>(Numel(body_out)) * in[0];
      }
      w->ops.insert(OpId::kAdd);
      if (l->activation_after) {
        w->ops.insert(l->activation == Activation::kRelu ? OpId::kRelu : OpId::kGelu);
      }
      *out = body_out;
      break;
    }
  }
  w->activations += Numel(*out);
  return absl::OkStatus();
}

absl::Status WalkLayers(std::vector<LayerSpec>* layers, Shape in, const std::string& field,
                        const std::string& name, Walk* w, Shape* out) {
  for (size_t i = 0; i < layers->size(); ++i) {
    Shape next;
    const std::string n = name.empty() ? absl::StrCat(i) : absl::StrCat(name, ".", i);
    if (absl::Status s =
            WalkLayer(&(*layers)[i], in, absl::StrCat(field, "[", i, "]"), n, w, &next);
        !s.ok()) {
      return s;
    }
    in = next;
  }
  *out = in;
  return absl::OkStatus();
}

// The spec with every default resolved, or why it cannot be built.
absl::Status Resolve(SequentialSpec* spec, Walk* w) {
  const std::string f = "model.sequential";
  if (spec->input_shape.empty() || spec->input_shape.size() > 3) {
    return FieldError(f + ".input_shape",
                      absl::StrCat("must be [features] or [channels, height, width], got ",
                                   Str(spec->input_shape)));
  }
  for (int64_t d : spec->input_shape) {
    if (d <= 0) {
      return FieldError(f + ".input_shape",
                        absl::StrCat("must be positive, got ", Str(spec->input_shape)));
    }
  }
  if (spec->num_classes < 2) {
    return FieldError(f + ".num_classes", absl::StrCat("must be >= 2, got ", spec->num_classes));
  }
  if (spec->layers.empty()) return FieldError(f + ".layers", "must not be empty");
  Shape out;
  if (absl::Status s = WalkLayers(&spec->layers, spec->input_shape, f + ".layers", "", w, &out);
      !s.ok()) {
    return s;
  }
  if (out != Shape{spec->num_classes}) {
    return FieldError(
        f + ".layers",
        absl::StrCat("the last layer's output is ", Str(out), ", not the ", spec->num_classes,
                     " class logits [", spec->num_classes, "] (end with flatten and linear)"));
  }
  if (w->shape != nullptr && w->shape->parameters.empty()) {
    return FieldError(f + ".layers", "has no parameters to train");
  }
  return absl::OkStatus();
}

class Sequential final : public Classifier {
 public:
  Sequential(const SequentialSpec& spec, const PrecisionConfig& precision, uint64_t seed)
      : spec_(spec) {
    Walk w;
    w.shape = &shape_;
    (void)Resolve(&spec_, &w);  // validated before it is built
    params_ = InitParameters(shape_.parameters, precision, seed);
    // Running statistics are f32 in every precision (never f16).
    for (const ParameterShape& b : shape_.buffers) {
      const double v = b.init == ParameterShape::Init::kOnes ? 1.0 : 0.0;
      Tensor value = Tensor::Full(b.shape, DType::kF32, v);
      value.set_name(b.name);
      buffers().push_back({b.name, b.layer, true, std::move(value)});
    }
  }

  Tensor Forward(const Tensor& x_in, bool training, uint64_t dropout_seed) override {
    Tensor x = ops::Cast(x_in, params_[0].value.dtype());
    std::vector<int64_t> shape = {x.dim(0)};
    shape.insert(shape.end(), spec_.input_shape.begin(), spec_.input_shape.end());
    x = ops::Reshape(x, shape);
    Cursor c{0, 0, 0};
    return RunLayers(spec_.layers, x, "", &c, training, dropout_seed);
  }

  std::vector<Parameter>& parameters() override { return params_; }
  int64_t input_dim() const override { return Numel(spec_.input_shape); }
  int64_t num_classes() const override { return spec_.num_classes; }
  int64_t activation_elements_per_example() const override {
    return shape_.activation_elements_per_example;
  }

 private:
  struct Cursor {
    size_t param, buffer;
    uint64_t dropout;
  };
  const Tensor& P(Cursor* c) { return params_[c->param++].value; }
  const Tensor& B(Cursor* c) { return buffers()[c->buffer++].value; }

  Tensor Act(Activation a, const Tensor& x) {
    return a == Activation::kRelu ? ops::Relu(x) : ops::Gelu(x);
  }

  Tensor RunLayers(const std::vector<LayerSpec>& layers, Tensor x, const std::string& name,
                   Cursor* c, bool training, uint64_t seed) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string n = name.empty() ? absl::StrCat(i) : absl::StrCat(name, ".", i);
      x = RunLayer(layers[i], x, n, c, training, seed);
    }
    return x;
  }

  Tensor BatchNorm(const Tensor& x, Cursor* c, bool training, double momentum, double eps) {
    const Tensor& g = P(c);
    const Tensor& b = P(c);
    const Tensor& rm = B(c);
    const Tensor& rv = B(c);
    return ops::BatchNorm(x, g, b, rm, rv, training, momentum, eps);
  }

  Tensor RunLayer(const LayerSpec& l, const Tensor& x, const std::string& name, Cursor* c,
                  bool training, uint64_t seed) {
    LayerScope scope(name);
    switch (l.kind) {
      case LayerKind::kConv2d: {
        Conv2dGeometry g;
        for (int d = 0; d < 2; ++d) {
          g.stride[d] = l.stride[d], g.padding[d] = l.padding[d], g.dilation[d] = l.dilation[d];
        }
        g.groups = l.groups;
        const Tensor& w = P(c);
        const Tensor b = l.bias ? P(c) : Tensor();
        return ops::Conv2d(x, w, b, g);
      }
      case LayerKind::kMaxPool2d:
      case LayerKind::kAvgPool2d: {
        Pool2dGeometry g;
        g.op = l.kind == LayerKind::kMaxPool2d ? OpId::kMaxPool2d : OpId::kAvgPool2d;
        for (int d = 0; d < 2; ++d) {
          g.kernel[d] = l.kernel[d], g.stride[d] = l.stride[d], g.padding[d] = l.padding[d];
          g.dilation[d] = l.dilation[d];
        }
        g.count_include_pad = l.count_include_pad;
        return ops::Pool2d(x, g);
      }
      case LayerKind::kAdaptiveAvgPool2d:
        return ops::AdaptiveAvgPool2d(x, l.output[0], l.output[1]);
      case LayerKind::kBatchNorm2d:
        return BatchNorm(x, c, training, l.momentum, l.eps);
      case LayerKind::kLayerNorm: {
        const Tensor& g = P(c);
        const Tensor& b = P(c);
        return ops::LayerNorm(x, g, b, l.eps);
      }
      case LayerKind::kActivation:
        return Act(l.activation, x);
      case LayerKind::kDropout:
        return ops::Dropout(x, l.p, seed * 1000003 + c->dropout++, training);
      case LayerKind::kFlatten:
        return ops::Flatten(x);
      case LayerKind::kLinear: {
        const Tensor& w = P(c);
        const Tensor b = l.bias ? P(c) : Tensor();
        return ops::Linear(x, w, b);
      }
      case LayerKind::kResidual: {
        Tensor y = RunLayers(l.body, x, name + ".body", c, training, seed);
        Tensor s = x;
        if (l.shortcut != LayerSpec::Shortcut::kIdentity) {
          LayerScope sc(name + ".shortcut");
          Conv2dGeometry g;
          g.stride[0] = l.stride[0], g.stride[1] = l.stride[1];
          const bool bn = l.shortcut == LayerSpec::Shortcut::kConv1x1BatchNorm;
          const Tensor& w = P(c);
          const Tensor b = bn ? Tensor() : P(c);
          s = ops::Conv2d(x, w, b, g);
          if (bn) s = BatchNorm(s, c, training, 0.1, 1e-5);
        }
        Tensor sum = ops::Add(y, s);
        return l.activation_after ? Act(l.activation, sum) : sum;
      }
    }
    return x;
  }

  SequentialSpec spec_;
  ModelShape shape_;
  std::vector<Parameter> params_;
};

}  // namespace

absl::Status ValidateSequential(const SequentialSpec& spec) {
  SequentialSpec copy = spec;
  ModelShape shape;
  Walk w;
  w.shape = &shape;
  return Resolve(&copy, &w);
}

ModelShape DescribeSequential(const SequentialSpec& spec) {
  SequentialSpec copy = spec;
  ModelShape s;
  Walk w;
  w.shape = &s;
  (void)Resolve(&copy, &w);
  s.ops.assign(w.ops.begin(), w.ops.end());
  s.ops.push_back(OpId::kCast);
  s.ops.push_back(OpId::kReshape);
  s.activation_elements_per_example = Numel(copy.input_shape) + w.activations;
  // Forward 2 FLOPs per multiply-add, backward twice the forward.
  s.flops_per_example = 6.0 * w.macs;
  return s;
}

std::unique_ptr<Model> BuildSequential(const SequentialSpec& spec, const PrecisionConfig& precision,
                                       uint64_t seed) {
  return std::make_unique<Sequential>(spec, precision, seed);
}

int64_t SequentialInputDim(const SequentialSpec& spec) { return Numel(spec.input_shape); }

}  // namespace ampd::engine::nn
