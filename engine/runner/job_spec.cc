#include "engine/runner/job_spec.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/error_subject.h"
#include "engine/data/text_tokens.h"
#include "engine/data/token_shard.h"
#include "engine/io/safetensors.h"
#include "engine/nn/mlp.h"
#include "engine/nn/weights_file.h"
#include "google/protobuf/util/json_util.h"

namespace ampd::engine::runner {

using amp::KnownPrecisionNames;
using amp::PrecisionConfig;
using amp::ResolvePrecision;
using amp::ValidatePrecision;
using core::ErrorSubject;
using core::FieldError;
using core::SubjectsError;
using nn::Activation;
using nn::FillDataDims;
using nn::GptSpec;
using nn::MlpSpec;
using ops::FindOp;
using ops::kOpDescriptors;
using ops::OpDescriptor;
using optim::OptimizerSpec;
using optim::ScheduleSpec;
using train::TrainerConfig;

namespace {

namespace v1 = ::ampd::v1;

void Violate(std::vector<FieldViolation>* v, std::string field, std::string why) {
  v->push_back({std::move(field), std::move(why)});
}

std::optional<DType> FromProtoDType(v1::DType d) {
  switch (d) {
    case v1::DTYPE_F32:
      return DType::kF32;
    case v1::DTYPE_F16:
      return DType::kF16;
    case v1::DTYPE_BF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

std::optional<CastPolicy> FromProtoPolicy(v1::CastPolicy p) {
  switch (p) {
    case v1::CAST_POLICY_LOWER_PRECISION:
      return CastPolicy::kLowerPrecision;
    case v1::CAST_POLICY_FP32:
      return CastPolicy::kFp32;
    case v1::CAST_POLICY_PROMOTE:
      return CastPolicy::kPromote;
    case v1::CAST_POLICY_PASS_THROUGH:
      return CastPolicy::kPassThrough;
    default:
      return std::nullopt;
  }
}

// A path under the data root: relative, no "..", no absolute paths.
bool SafeRelativePath(const std::string& p) {
  if (p.empty() || p[0] == '/') return false;
  std::stringstream ss(p);
  std::string part;
  while (std::getline(ss, part, '/')) {
    if (part == "..") return false;
  }
  return true;
}

// The default vocabulary: bytes, or GPT-2's tokenizer for shards.
constexpr int64_t kGpt2VocabSize = 50257;
constexpr double kDefaultHeldOut = 0.1;
constexpr int64_t kDefaultEvalWindows = 256;

// Whether the data is a language model's, and its token spec ("builtin":
// "fortunes" at the top level is the token corpus).
bool IsTokenData(const v1::DataSpec& d) {
  return d.has_tokens() || (d.has_builtin() && d.builtin() == "fortunes");
}
v1::TokenDataset TokensOf(const v1::DataSpec& d) {
  if (d.has_tokens()) return d.tokens();
  v1::TokenDataset t;
  t.set_builtin(d.builtin());
  return t;
}
bool ByteLevel(const v1::TokenDataset& t) { return !t.has_shards(); }

// The GPT a spec asks for, defaults filled; `data` decides the vocabulary
// when the spec leaves it unset.
GptSpec GptFromProto(const v1::GptSpec& g, const v1::DataSpec& data) {
  GptSpec out;
  out.vocab_size = g.vocab_size() > 0                                ? g.vocab_size()
                   : IsTokenData(data) && !ByteLevel(TokensOf(data)) ? kGpt2VocabSize
                                                                     : data::kByteVocabSize;
  if (g.block_size() > 0) out.block_size = g.block_size();
  if (g.n_layer() > 0) out.n_layer = g.n_layer();
  if (g.n_head() > 0) out.n_head = g.n_head();
  if (g.n_embd() > 0) out.n_embd = g.n_embd();
  out.dropout = g.dropout();
  if (g.has_bias()) out.bias = g.bias();
  if (g.has_tie_embeddings()) out.tie_embeddings = g.tie_embeddings();
  out.activation = g.activation() == v1::ACTIVATION_GELU ? GptSpec::Activation::kGeluErf
                                                         : GptSpec::Activation::kGeluTanh;
  return out;
}

// One or two per-dim sizes ([both] or [height, width]) into out; `def`
// when none. A third value is a violation of `field`.
void PerDim(const google::protobuf::RepeatedField<int64_t>& r, int64_t def, int64_t out[2],
            const std::string& field, std::vector<FieldViolation>* v) {
  if (r.size() > 2) {
    Violate(v, field,
            absl::StrCat("must have 1 or 2 values ([both] or [height, width]), got ", r.size()));
  }
  out[0] = r.empty() ? def : r[0];
  out[1] = r.empty() ? def : r.size() == 1 ? r[0] : r[1];
}

nn::Activation ActivationOf(v1::Activation a, const std::string& field,
                            std::vector<FieldViolation>* v) {
  if (a == v1::ACTIVATION_GELU_TANH) {
    Violate(v, field, "must be ACTIVATION_RELU or ACTIVATION_GELU (GELU_TANH is model.gpt's)");
  }
  return a == v1::ACTIVATION_GELU ? nn::Activation::kGelu : nn::Activation::kRelu;
}

std::vector<nn::LayerSpec> LayersFromProto(
    const google::protobuf::RepeatedPtrField<v1::LayerSpec>& layers, const std::string& field,
    std::vector<FieldViolation>* v);

// The layer's fields as the engine's spec; what only the proto can get wrong
// (a missing required size, three values for a pair) into v. Shapes are
// checked by nn::ValidateSequential once the input shape is known.
nn::LayerSpec LayerFromProto(const v1::LayerSpec& p, const std::string& field,
                             std::vector<FieldViolation>* v) {
  using nn::LayerKind;
  nn::LayerSpec l;
  switch (p.layer_case()) {
    case v1::LayerSpec::kConv2D: {
      const v1::Conv2dLayer& c = p.conv2d();
      const std::string f = field + ".conv2d";
      l.kind = LayerKind::kConv2d;
      l.in = c.in_channels();
      l.out = c.out_channels();
      if (c.kernel_size().empty()) Violate(v, f + ".kernel_size", "is required");
      PerDim(c.kernel_size(), 0, l.kernel, f + ".kernel_size", v);
      PerDim(c.stride(), 1, l.stride, f + ".stride", v);
      PerDim(c.padding(), 0, l.padding, f + ".padding", v);
      PerDim(c.dilation(), 1, l.dilation, f + ".dilation", v);
      l.groups = c.groups() == 0 ? 1 : c.groups();
      l.bias = !c.has_bias() || c.bias();
      if (c.in_channels() < 0) {
        Violate(v, f + ".in_channels",
                absl::StrCat("must be >= 0 (0: the input's), got ", c.in_channels()));
      }
      break;
    }
    case v1::LayerSpec::kMaxPool2D:
    case v1::LayerSpec::kAvgPool2D: {
      const bool max = p.layer_case() == v1::LayerSpec::kMaxPool2D;
      const v1::Pool2dLayer& q = max ? p.max_pool2d() : p.avg_pool2d();
      const std::string f = field + (max ? ".max_pool2d" : ".avg_pool2d");
      l.kind = max ? LayerKind::kMaxPool2d : LayerKind::kAvgPool2d;
      if (q.kernel_size().empty()) Violate(v, f + ".kernel_size", "is required");
      PerDim(q.kernel_size(), 0, l.kernel, f + ".kernel_size", v);
      PerDim(q.stride(), 0, l.stride, f + ".stride", v);
      PerDim(q.padding(), 0, l.padding, f + ".padding", v);
      PerDim(q.dilation(), 1, l.dilation, f + ".dilation", v);
      if (!max && !q.dilation().empty()) {
        Violate(v, f + ".dilation", "is max_pool2d's (avg_pool2d has none)");
      }
      if (max && q.has_count_include_pad()) {
        Violate(v, f + ".count_include_pad", "is avg_pool2d's (max_pool2d has none)");
      }
      l.count_include_pad = !q.has_count_include_pad() || q.count_include_pad();
      break;
    }
    case v1::LayerSpec::kAdaptiveAvgPool2D: {
      const std::string f = field + ".adaptive_avg_pool2d.output_size";
      l.kind = LayerKind::kAdaptiveAvgPool2d;
      if (p.adaptive_avg_pool2d().output_size().empty()) Violate(v, f, "is required");
      PerDim(p.adaptive_avg_pool2d().output_size(), 1, l.output, f, v);
      break;
    }
    case v1::LayerSpec::kBatchNorm2D: {
      const v1::BatchNorm2dLayer& b = p.batch_norm2d();
      l.kind = LayerKind::kBatchNorm2d;
      l.in = b.num_features();
      if (b.num_features() < 0) {
        Violate(v, field + ".batch_norm2d.num_features",
                absl::StrCat("must be >= 0 (0: the input's), got ", b.num_features()));
      }
      if (b.has_momentum()) l.momentum = b.momentum();
      if (b.has_eps()) l.eps = b.eps();
      break;
    }
    case v1::LayerSpec::kLayerNorm:
      l.kind = LayerKind::kLayerNorm;
      if (p.layer_norm().has_eps()) l.eps = p.layer_norm().eps();
      break;
    case v1::LayerSpec::kActivation:
      l.kind = LayerKind::kActivation;
      l.activation = ActivationOf(p.activation(), field + ".activation", v);
      break;
    case v1::LayerSpec::kDropout:
      l.kind = LayerKind::kDropout;
      l.p = p.dropout();
      break;
    case v1::LayerSpec::kFlatten:
      l.kind = LayerKind::kFlatten;
      break;
    case v1::LayerSpec::kLinear: {
      const v1::LinearLayer& q = p.linear();
      l.kind = LayerKind::kLinear;
      l.in = q.in_features();
      l.out = q.out_features();
      l.bias = !q.has_bias() || q.bias();
      if (q.in_features() < 0) {
        Violate(v, field + ".linear.in_features",
                absl::StrCat("must be >= 0 (0: the input's), got ", q.in_features()));
      }
      break;
    }
    case v1::LayerSpec::kResidual: {
      const v1::ResidualBlock& r = p.residual();
      l.kind = LayerKind::kResidual;
      l.body = LayersFromProto(r.layers(), field + ".residual.layers", v);
      switch (r.shortcut()) {
        case v1::ResidualBlock::SHORTCUT_CONV1X1:
          l.shortcut = nn::LayerSpec::Shortcut::kConv1x1;
          break;
        case v1::ResidualBlock::SHORTCUT_CONV1X1_BN:
          l.shortcut = nn::LayerSpec::Shortcut::kConv1x1BatchNorm;
          break;
        default:
          l.shortcut = nn::LayerSpec::Shortcut::kIdentity;
      }
      l.activation_after = r.activation() != v1::ACTIVATION_UNSPECIFIED;
      l.activation = ActivationOf(r.activation(), field + ".residual.activation", v);
      break;
    }
    case v1::LayerSpec::LAYER_NOT_SET:
      Violate(v, field,
              "names no layer: set one of conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, "
              "batch_norm2d, layer_norm, activation, dropout, flatten, linear, residual");
      break;
  }
  return l;
}

std::vector<nn::LayerSpec> LayersFromProto(
    const google::protobuf::RepeatedPtrField<v1::LayerSpec>& layers, const std::string& field,
    std::vector<FieldViolation>* v) {
  std::vector<nn::LayerSpec> out;
  for (int i = 0; i < layers.size(); ++i) {
    out.push_back(LayerFromProto(layers[i], absl::StrCat(field, "[", i, "]"), v));
  }
  return out;
}

nn::SequentialSpec SequentialFromProto(const v1::SequentialSpec& q,
                                       std::vector<FieldViolation>* v) {
  nn::SequentialSpec s;
  s.input_shape.assign(q.input_shape().begin(), q.input_shape().end());
  s.num_classes = q.num_classes();
  s.layers = LayersFromProto(q.layers(), "model.sequential.layers", v);
  return s;
}

// The engine's check of a spec whose shapes are known, as a violation.
void ViolateStatus(const absl::Status& s, std::vector<FieldViolation>* v) {
  if (s.ok()) return;
  const std::string msg(s.message());
  const size_t colon = msg.find(": ");
  Violate(v, msg.substr(0, colon), colon == std::string::npos ? msg : msg.substr(colon + 2));
}

void ValidateGptSpec(const v1::JobSpec& spec, std::vector<FieldViolation>* v) {
  const v1::GptSpec& g = spec.model().gpt();
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", g.vocab_size()},
                                                   {"block_size", g.block_size()},
                                                   {"n_layer", g.n_layer()},
                                                   {"n_head", g.n_head()},
                                                   {"n_embd", g.n_embd()}};
  bool sizes_ok = true;
  for (const auto& [name, value] : sizes) {
    if (value < 0) {
      Violate(v, absl::StrCat("model.gpt.", name),
              absl::StrCat("must be > 0 (or unset for the default), got ", value));
      sizes_ok = false;
    }
  }
  if (g.activation() == v1::ACTIVATION_RELU) {
    Violate(v, "model.gpt.activation", "must be ACTIVATION_GELU_TANH (GPT-2's) or ACTIVATION_GELU");
  }
  if (!IsTokenData(spec.data())) {
    Violate(v, "data",
            "model.gpt trains on token data: set data.tokens (or \"builtin\": \"fortunes\")");
  }
  if (!sizes_ok) return;
  const GptSpec resolved = GptFromProto(g, spec.data());
  if (absl::Status s = nn::ValidateGpt(resolved); !s.ok()) {
    // "model.gpt.n_head: must divide ..." -> its field and reason.
    const std::string msg(s.message());
    const size_t colon = msg.find(": ");
    Violate(v, msg.substr(0, colon), colon == std::string::npos ? msg : msg.substr(colon + 2));
  }
  if (IsTokenData(spec.data()) && ByteLevel(TokensOf(spec.data())) &&
      resolved.vocab_size < data::kByteVocabSize) {
    Violate(v, "model.gpt.vocab_size",
            absl::StrCat("is ", resolved.vocab_size,
                         " but byte-level data (text, builtin) has 256 token values"));
  }
}

void ValidateTokenData(const v1::TokenDataset& t, std::vector<FieldViolation>* v) {
  auto path = [&](const std::string& field, const std::string& value) {
    if (value.empty()) {
      Violate(v, field, "must name a file");
    } else if (!SafeRelativePath(value)) {
      Violate(v, field,
              absl::StrCat("\"", value,
                           "\" must be a relative path under the data root, without \"..\""));
    }
  };
  switch (t.source_case()) {
    case v1::TokenDataset::kBuiltin:
      if (t.builtin() != "fortunes") {
        Violate(v, "data.tokens.builtin",
                absl::StrCat("unknown corpus \"", t.builtin(), "\"; known: fortunes"));
      }
      break;
    case v1::TokenDataset::kText:
      path("data.tokens.text", t.text());
      break;
    case v1::TokenDataset::kShards:
      if (t.shards().train_size() == 0) {
        Violate(v, "data.tokens.shards.train", "needs at least one shard");
      }
      for (int i = 0; i < t.shards().train_size(); ++i) {
        path(absl::StrCat("data.tokens.shards.train[", i, "]"), t.shards().train(i));
      }
      if (!t.shards().val().empty()) path("data.tokens.shards.val", t.shards().val());
      if (t.has_held_out_fraction()) {
        Violate(v, "data.tokens.held_out_fraction",
                "applies to text and builtin data; shards name their validation shard (val)");
      }
      break;
    default:
      Violate(v, "data.tokens", "needs a source: builtin, text or shards");
  }
  if (t.has_held_out_fraction() && !(t.held_out_fraction() > 0 && t.held_out_fraction() < 1)) {
    Violate(v, "data.tokens.held_out_fraction",
            absl::StrCat("must be in (0, 1), got ", t.held_out_fraction()));
  }
  if (t.has_eval_windows() && t.eval_windows() < 0) {
    Violate(v, "data.tokens.eval_windows",
            absl::StrCat("must be >= 0 (0: the whole validation set), got ", t.eval_windows()));
  }
}

}  // namespace

absl::Status ViolationsToStatus(const std::vector<FieldViolation>& violations) {
  if (violations.empty()) return absl::OkStatus();
  std::vector<ErrorSubject> subjects;
  for (const auto& v : violations) subjects.push_back({v.field, v.description});
  return SubjectsError(absl::StatusCode::kInvalidArgument, subjects);
}

absl::StatusOr<v1::JobSpec> ReadJobSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open job spec file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseJobSpecJson(ss.str(), path);
}

namespace {

// precision.fp8 over the base's recipe (FP8 on unless `enabled` is false).
void Fp8FromProto(const v1::Fp8Recipe& f, const std::string& field, PrecisionConfig* c,
                  std::vector<FieldViolation>* violations) {
  using backend::AmaxAlgo;
  using backend::Fp8FormatRecipe;
  using backend::Fp8ScalingKind;
  c->fp8 = !f.has_enabled() || f.enabled();
  backend::Fp8Recipe& r = c->fp8_recipe;
  switch (f.scaling()) {
    case v1::Fp8Recipe::SCALING_UNSPECIFIED:
      break;
    case v1::Fp8Recipe::SCALING_DELAYED:
      // From current scaling's history of one: TE's delayed defaults.
      if (r.kind == Fp8ScalingKind::kCurrent) r = backend::Fp8Recipe{};
      break;
    case v1::Fp8Recipe::SCALING_CURRENT:
      r.kind = Fp8ScalingKind::kCurrent;
      r.amax_history_len = 1;
      r.amax_compute_algo = AmaxAlgo::kMostRecent;
      break;
    default:
      Violate(violations, field + ".scaling", "unknown scaling");
  }
  switch (f.format()) {
    case v1::Fp8Recipe::FORMAT_UNSPECIFIED:
      break;
    case v1::Fp8Recipe::FORMAT_HYBRID:
      r.format = Fp8FormatRecipe::kHybrid;
      break;
    case v1::Fp8Recipe::FORMAT_E4M3:
      r.format = Fp8FormatRecipe::kE4M3;
      break;
    default:
      Violate(violations, field + ".format", "unknown format");
  }
  if (f.has_margin()) r.margin = static_cast<float>(f.margin());
  if (f.has_amax_history_len()) r.amax_history_len = f.amax_history_len();
  switch (f.amax_compute_algo()) {
    case v1::Fp8Recipe::AMAX_ALGO_UNSPECIFIED:
      break;
    case v1::Fp8Recipe::AMAX_ALGO_MAX:
      r.amax_compute_algo = AmaxAlgo::kMax;
      break;
    case v1::Fp8Recipe::AMAX_ALGO_MOST_RECENT:
      r.amax_compute_algo = AmaxAlgo::kMostRecent;
      break;
    default:
      Violate(violations, field + ".amax_compute_algo", "unknown algorithm");
  }
  if (r.kind == Fp8ScalingKind::kCurrent && f.has_amax_history_len() && r.amax_history_len != 1) {
    Violate(violations, field + ".amax_history_len",
            absl::StrCat("current scaling keeps no history (1), got ", r.amax_history_len));
  }
}

}  // namespace

PrecisionConfig PrecisionFromProto(const v1::PrecisionConfig& p, const std::string& field,
                                   std::vector<FieldViolation>* violations) {
  const std::string base = p.base().empty() ? "32-true" : p.base();
  absl::StatusOr<PrecisionConfig> resolved = ResolvePrecision(base);
  if (!resolved.ok()) {
    Violate(violations, field + ".base", std::string(resolved.status().message()));
    return PrecisionConfig();
  }
  PrecisionConfig c = *resolved;
  c.name = "custom(" + base + ")";
  if (p.has_autocast()) c.autocast = p.autocast();
  if (p.autocast_dtype() != v1::DTYPE_UNSPECIFIED) {
    if (auto d = FromProtoDType(p.autocast_dtype())) {
      c.autocast_dtype = *d;
    } else {
      Violate(violations, field + ".autocast_dtype", "unknown dtype");
    }
  }
  if (p.param_dtype() != v1::DTYPE_UNSPECIFIED) {
    if (auto d = FromProtoDType(p.param_dtype())) {
      c.param_dtype = *d;
    } else {
      Violate(violations, field + ".param_dtype", "unknown dtype");
    }
  }
  if (p.has_master_weights()) c.master_weights = p.master_weights();
  if (p.has_keep_norms_fp32()) c.keep_norms_fp32 = p.keep_norms_fp32();
  const v1::LossScaling& ls = p.loss_scaling();
  switch (ls.mode()) {
    case v1::LossScaling::MODE_NONE:
      c.loss_scaling.enabled = false;
      break;
    case v1::LossScaling::MODE_DYNAMIC:
      c.loss_scaling.enabled = true;
      c.loss_scaling.dynamic = true;
      break;
    case v1::LossScaling::MODE_STATIC:
      c.loss_scaling.enabled = true;
      c.loss_scaling.dynamic = false;
      break;
    default:
      break;
  }
  if (ls.has_init_scale()) c.loss_scaling.init_scale = ls.init_scale();
  if (ls.has_growth_factor()) c.loss_scaling.growth_factor = ls.growth_factor();
  if (ls.has_backoff_factor()) c.loss_scaling.backoff_factor = ls.backoff_factor();
  if (ls.has_growth_interval()) c.loss_scaling.growth_interval = ls.growth_interval();
  if (ls.has_min_scale()) c.loss_scaling.min_scale = ls.min_scale();
  if (ls.has_max_scale()) c.loss_scaling.max_scale = ls.max_scale();
  for (const auto& [name, policy] : p.op_policies()) {
    const std::string key = absl::StrCat(field, ".op_policies[", name, "]");
    const std::optional<OpId> op = FindOp(name);
    if (!op) {
      std::vector<std::string> known;
      for (const OpDescriptor& d : kOpDescriptors) known.push_back(d.name);
      Violate(violations, key,
              absl::StrCat("unknown op \"", name, "\" (ops: ", absl::StrJoin(known, ", "), ")"));
    } else if (*op == OpId::kGeluTanhMlp) {
      // Not an op a user sees: it casts as linear and gelu_tanh do.
      Violate(violations, key,
              "gelu_tanh_mlp is GPT-2's MLP run as one op, and it casts as its three ops do: set "
              "the policy of \"linear\" or \"gelu_tanh\" instead");
    } else if (auto pol = FromProtoPolicy(policy)) {
      c.overrides.op_policies[*op] = *pol;
    } else {
      Violate(violations, key, "unspecified policy");
    }
  }
  for (const std::string& layer : p.fp32_layers()) c.overrides.fp32_layers.insert(layer);
  c.allow_tf32 = p.allow_tf32();
  if (p.has_fp8()) Fp8FromProto(p.fp8(), field + ".fp8", &c, violations);
  if (absl::Status s = ValidatePrecision(c); !s.ok()) {
    // "precision.loss_scaling.growth_factor: ..." -> field + rest.
    std::string msg(s.message());
    const std::string prefix = "precision.";
    size_t colon = msg.find(": ");
    std::string sub = msg.substr(0, colon);
    if (sub.rfind(prefix, 0) == 0) sub = sub.substr(prefix.size());
    Violate(violations, field + "." + sub,
            colon == std::string::npos ? msg : msg.substr(colon + 2));
  }
  return c;
}

PrecisionConfig ResolveJobPrecision(const v1::PrecisionSpec& spec, const JobSpecContext& context,
                                    std::vector<FieldViolation>* violations) {
  if (spec.has_custom()) return PrecisionFromProto(spec.custom(), "precision.custom", violations);
  const std::string name = spec.profile().empty() ? "32-true" : spec.profile();
  absl::StatusOr<PrecisionConfig> builtin = ResolvePrecision(name);
  if (builtin.ok()) return *builtin;
  if (context.profiles) {
    if (std::optional<v1::PrecisionConfig> user = context.profiles(name)) {
      PrecisionConfig c = PrecisionFromProto(*user, "precision.profile", violations);
      c.name = name;
      return c;
    }
  }
  if (std::optional<std::string> why = amp::UnsupportedPrecisionReason(name)) {
    Violate(violations, "precision.profile", *why);
    return PrecisionConfig();
  }
  Violate(violations, "precision.profile",
          absl::StrCat("\"", name, "\" is neither a built-in mode (", KnownPrecisionNames(),
                       ") nor a defined profile"));
  return PrecisionConfig();
}

std::vector<FieldViolation> ValidateJobSpec(const v1::JobSpec& spec,
                                            const JobSpecContext& context) {
  std::vector<FieldViolation> v;
  // Model.
  if (spec.model().has_mlp()) {
    const v1::MlpSpec& m = spec.model().mlp();
    if (m.input_dim() < 0)
      Violate(&v, "model.mlp.input_dim",
              absl::StrCat("must be >= 0 (0: from the data), got ", m.input_dim()));
    if (m.num_classes() < 0 || m.num_classes() == 1) {
      Violate(&v, "model.mlp.num_classes",
              absl::StrCat("must be >= 2 (0: from the data), got ", m.num_classes()));
    }
    for (int i = 0; i < m.hidden_size(); ++i) {
      if (m.hidden(i) <= 0) {
        Violate(&v, absl::StrCat("model.mlp.hidden[", i, "]"),
                absl::StrCat("must be > 0, got ", m.hidden(i)));
      } else if (m.hidden(i) > nn::kMaxMlpWidth) {
        Violate(&v, absl::StrCat("model.mlp.hidden[", i, "]"),
                absl::StrCat("must be in [1, ", nn::kMaxMlpWidth, "], got ", m.hidden(i)));
      }
    }
    if (m.input_dim() > nn::kMaxMlpWidth) {
      Violate(&v, "model.mlp.input_dim",
              absl::StrCat("must be <= ", nn::kMaxMlpWidth, ", got ", m.input_dim()));
    }
    if (m.num_classes() > nn::kMaxMlpWidth) {
      Violate(&v, "model.mlp.num_classes",
              absl::StrCat("must be <= ", nn::kMaxMlpWidth, ", got ", m.num_classes()));
    }
    if (!(m.dropout() >= 0 && m.dropout() < 1)) {
      Violate(&v, "model.mlp.dropout", absl::StrCat("must be in [0, 1), got ", m.dropout()));
    }
    if (m.activation() == v1::ACTIVATION_GELU_TANH) {
      Violate(&v, "model.mlp.activation",
              "must be ACTIVATION_RELU or ACTIVATION_GELU (GELU_TANH is model.gpt's)");
    }
  }
  if (spec.model().has_gpt()) ValidateGptSpec(spec, &v);
  if (spec.model().has_sequential()) {
    const v1::SequentialSpec& q = spec.model().sequential();
    (void)SequentialFromProto(q, &v);
    for (int64_t d : q.input_shape()) {
      if (d <= 0 || q.input_shape_size() > 3) {
        Violate(&v, "model.sequential.input_shape",
                "must be [features] or [channels, height, width] of positive sizes (empty: the "
                "data set's)");
        break;
      }
    }
    if (q.num_classes() < 0 || q.num_classes() == 1) {
      Violate(&v, "model.sequential.num_classes",
              absl::StrCat("must be >= 2 (0: from the data), got ", q.num_classes()));
    }
    if (q.layers().empty()) Violate(&v, "model.sequential.layers", "must not be empty");
  }
  if (!spec.model().has_gpt() && IsTokenData(spec.data())) {
    Violate(&v, "model", "token data (data.tokens) trains a language model: set model.gpt");
  }
  // Data.
  const v1::DataSpec& d = spec.data();
  if (d.has_file() && !d.file().example_shape().empty()) {
    const auto& shape = d.file().example_shape();
    const bool positive = std::all_of(shape.begin(), shape.end(), [](int64_t x) { return x > 0; });
    if (d.file().format() != v1::FileDataset::FORMAT_CSV) {
      Violate(&v, "data.file.example_shape", "is for CSV files (IDX files carry their shape)");
    } else if (!positive || (shape.size() != 1 && shape.size() != 3)) {
      Violate(&v, "data.file.example_shape",
              "must be [features] or [channels, height, width] of positive sizes");
    }
  }
  if (d.has_normalize() || d.has_augment()) {
    const bool csv_images = d.has_file() && d.file().format() == v1::FileDataset::FORMAT_CSV &&
                            d.file().example_shape_size() == 3;
    const bool images =
        !d.has_synthetic() && !IsTokenData(d) &&
        (!(d.has_file() && d.file().format() == v1::FileDataset::FORMAT_CSV) || csv_images);
    if (!images) {
      Violate(&v, d.has_augment() ? "data.augment" : "data.normalize",
              "transforms images: fashion-mnist, IDX files, or CSV files with a 3-D "
              "data.file.example_shape (synthetic and token data are not images)");
    }
  }
  if (d.has_normalize()) {
    const v1::Normalize& n = d.normalize();
    if (n.mean().empty() || n.mean_size() != n.std_size()) {
      Violate(&v, "data.normalize",
              absl::StrCat("needs as many std values as mean values (one, or one per channel), "
                           "got ",
                           n.mean_size(), " and ", n.std_size()));
    }
    for (int i = 0; i < n.std_size(); ++i) {
      if (!(n.std(i) > 0)) {
        Violate(&v, absl::StrCat("data.normalize.std[", i, "]"),
                absl::StrCat("must be > 0, got ", n.std(i)));
      }
    }
  }
  if (d.has_augment()) {
    const v1::Augment& a = d.augment();
    if (a.random_crop_padding() < 0) {
      Violate(&v, "data.augment.random_crop_padding",
              absl::StrCat("must be >= 0, got ", a.random_crop_padding()));
    }
    if (!(a.random_erasing() >= 0 && a.random_erasing() <= 1)) {
      Violate(&v, "data.augment.random_erasing",
              absl::StrCat("must be in [0, 1], got ", a.random_erasing()));
    }
  }
  switch (d.source_case()) {
    case v1::DataSpec::kBuiltin:
      if (d.builtin() != "fashion-mnist" && d.builtin() != "fortunes") {
        Violate(&v, "data.builtin",
                absl::StrCat("unknown data set \"", d.builtin(),
                             "\"; known: fashion-mnist, fortunes (token data)"));
      }
      break;
    case v1::DataSpec::kTokens:
      ValidateTokenData(d.tokens(), &v);
      break;
    case v1::DataSpec::kFile: {
      const v1::FileDataset& f = d.file();
      auto path = [&](const std::string& name, const std::string& value, bool required) {
        if (value.empty()) {
          if (required) Violate(&v, "data.file." + name, "required for this format");
          return;
        }
        if (!SafeRelativePath(value)) {
          Violate(&v, "data.file." + name,
                  absl::StrCat("\"", value,
                               "\" must be a relative path under the data root, without \"..\""));
        }
      };
      if (f.format() == v1::FileDataset::FORMAT_IDX) {
        path("train_images", f.train_images(), true);
        path("train_labels", f.train_labels(), true);
        path("test_images", f.test_images(), !f.test_labels().empty());
        path("test_labels", f.test_labels(), !f.test_images().empty());
      } else if (f.format() == v1::FileDataset::FORMAT_CSV) {
        path("train_csv", f.train_csv(), true);
        path("test_csv", f.test_csv(), false);
      } else {
        Violate(&v, "data.file.format", "must be FORMAT_IDX or FORMAT_CSV");
      }
      if (f.num_classes() < 0) Violate(&v, "data.file.num_classes", "must be >= 0");
      break;
    }
    case v1::DataSpec::kSynthetic: {
      const v1::SyntheticDataset& s = d.synthetic();
      if (s.num_examples() < 0)
        Violate(&v, "data.synthetic.num_examples",
                absl::StrCat("must be >= 0, got ", s.num_examples()));
      if (s.feature_dim() < 0)
        Violate(&v, "data.synthetic.feature_dim",
                absl::StrCat("must be >= 0, got ", s.feature_dim()));
      if (s.num_classes() < 0 || s.num_classes() == 1)
        Violate(&v, "data.synthetic.num_classes",
                absl::StrCat("must be >= 2, got ", s.num_classes()));
      if (s.num_test_examples() < 0)
        Violate(&v, "data.synthetic.num_test_examples", "must be >= 0");
      break;
    }
    default:
      break;  // default: fashion-mnist
  }
  // Optimizer.
  const v1::OptimizerSpec& o = spec.optimizer();
  if (o.has_lr() && !(o.lr() > 0 && std::isfinite(o.lr())))
    Violate(&v, "optimizer.lr", absl::StrCat("must be a finite number > 0, got ", o.lr()));
  if (o.weight_decay() < 0)
    Violate(&v, "optimizer.weight_decay", absl::StrCat("must be >= 0, got ", o.weight_decay()));
  auto state_bits = [&](const char* field, int32_t bits) {
    if (bits != 0 && bits != 8 && bits != 32) {
      Violate(&v, field, absl::StrCat("must be 32 or 8 (0: 32), got ", bits));
    }
  };
  state_bits("optimizer.adamw.state_bits", o.adamw().state_bits());
  state_bits("optimizer.sgd.state_bits", o.sgd().state_bits());
  if (o.has_min_8bit_size() && o.min_8bit_size() < 0) {
    Violate(&v, "optimizer.min_8bit_size", absl::StrCat("must be >= 0, got ", o.min_8bit_size()));
  }
  if (o.has_sgd() && o.sgd().state_bits() == 8 && o.sgd().momentum() == 0) {
    Violate(&v, "optimizer.sgd.state_bits",
            "8-bit states need momentum > 0 (SGD has no other state)");
  }
  if (o.has_sgd()) {
    if (!(o.sgd().momentum() >= 0 && o.sgd().momentum() < 1))
      Violate(&v, "optimizer.sgd.momentum",
              absl::StrCat("must be in [0, 1), got ", o.sgd().momentum()));
    if (o.sgd().nesterov() && o.sgd().momentum() == 0)
      Violate(&v, "optimizer.sgd.nesterov", "requires momentum > 0");
  }
  if (o.has_adamw()) {
    const auto& a = o.adamw();
    if (a.has_beta1() && !(a.beta1() >= 0 && a.beta1() < 1))
      Violate(&v, "optimizer.adamw.beta1", "must be in [0, 1)");
    if (a.has_beta2() && !(a.beta2() >= 0 && a.beta2() < 1))
      Violate(&v, "optimizer.adamw.beta2", "must be in [0, 1)");
    if (a.has_eps() && !(a.eps() > 0)) Violate(&v, "optimizer.adamw.eps", "must be > 0");
  }
  if (spec.schedule().warmup_steps() < 0) Violate(&v, "schedule.warmup_steps", "must be >= 0");
  if (!(spec.schedule().min_lr_ratio() >= 0 && spec.schedule().min_lr_ratio() <= 1))
    Violate(&v, "schedule.min_lr_ratio", "must be in [0, 1]");
  // Training.
  const v1::TrainingSpec& t = spec.training();
  if (t.has_steps() && t.steps() <= 0)
    Violate(&v, "training.steps", absl::StrCat("must be > 0, got ", t.steps()));
  if (t.has_epochs() && t.epochs() <= 0)
    Violate(&v, "training.epochs", absl::StrCat("must be > 0, got ", t.epochs()));
  if (t.has_batch_size() && t.batch_size() <= 0)
    Violate(&v, "training.batch_size", absl::StrCat("must be > 0, got ", t.batch_size()));
  if (t.has_grad_accumulation() && t.grad_accumulation() <= 0)
    Violate(&v, "training.grad_accumulation",
            absl::StrCat("must be > 0, got ", t.grad_accumulation()));
  if (t.eval_interval() < 0)
    Violate(&v, "training.eval_interval", absl::StrCat("must be >= 0, got ", t.eval_interval()));
  if (!(t.clip_norm() >= 0))
    Violate(&v, "training.clip_norm", absl::StrCat("must be >= 0, got ", t.clip_norm()));
  // Resources: data-parallel workers (DDP's semantics; engine/dist).
  const v1::ResourcesSpec& r = spec.resources();
  const int workers = std::max(1, r.workers());
  if (r.workers() < 0 || r.workers() > kMaxWorkers) {
    Violate(&v, "resources.workers",
            absl::StrCat("must be in [1, ", kMaxWorkers, "] (0: one), got ", r.workers()));
  } else if (workers > 1) {
    const int64_t batch = t.has_batch_size() ? t.batch_size() : 128;
    if (batch > 0 && batch % workers != 0) {
      Violate(
          &v, "training.batch_size",
          absl::StrCat("must be a multiple of resources.workers (", workers,
                       "; each worker trains an equal share of the global batch), got ", batch));
    }
  }
  if (r.devices_per_worker() < 0 || r.devices_per_worker() > 1) {
    Violate(&v, "resources.devices_per_worker",
            absl::StrCat("must be 0 or 1 (one device per worker so far), got ",
                         r.devices_per_worker()));
  } else if (r.devices_per_worker() > 0 && spec.device() != v1::DEVICE_CUDA) {
    Violate(&v, "resources.devices_per_worker", "is for device DEVICE_CUDA");
  }
  if (r.external_workers() && workers < 2) {
    Violate(&v, "resources.external_workers",
            "needs resources.workers >= 2: ranks 1..workers-1 join from the launcher");
  } else if (r.external_workers() && spec.device() == v1::DEVICE_CUDA) {
    Violate(&v, "resources.external_workers",
            "is for CPU jobs so far: a DEVICE_CUDA job's ranks run on the server, one per device");
  }
  if (r.has_max_restarts() && (r.max_restarts() < 0 || r.max_restarts() > kMaxRestarts)) {
    Violate(&v, "resources.max_restarts",
            absl::StrCat("must be in [0, ", kMaxRestarts, "], got ", r.max_restarts()));
  }
  // Precision.
  ResolveJobPrecision(spec.precision(), context, &v);
  return v;
}

std::vector<std::pair<std::string, std::string>> DataPaths(const v1::DataSpec& d) {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](std::string field, const std::string& value) {
    if (!value.empty()) out.emplace_back(std::move(field), value);
  };
  if (d.has_file()) {
    const v1::FileDataset& f = d.file();
    add("data.file.train_images", f.train_images());
    add("data.file.train_labels", f.train_labels());
    add("data.file.test_images", f.test_images());
    add("data.file.test_labels", f.test_labels());
    add("data.file.train_csv", f.train_csv());
    add("data.file.test_csv", f.test_csv());
  }
  if (d.has_tokens()) {
    const v1::TokenDataset& t = d.tokens();
    add("data.tokens.text", t.text());
    for (int i = 0; i < t.shards().train_size(); ++i) {
      add(absl::StrCat("data.tokens.shards.train[", i, "]"), t.shards().train(i));
    }
    add("data.tokens.shards.val", t.shards().val());
  }
  return out;
}

train::TokenData TokenJobData::View() const {
  train::TokenData d;
  for (const data::TokenSequence& shard : train) d.train.push_back(&shard);
  d.val = val ? &*val : nullptr;
  d.byte_level = byte_level;
  d.eval_windows = eval_windows;
  return d;
}

std::optional<std::pair<int64_t, int>> KnownDataShape(const v1::DataSpec& d) {
  if (d.has_synthetic()) {
    const auto& s = d.synthetic();
    return std::make_pair(s.feature_dim() ? s.feature_dim() : 32,
                          s.num_classes() ? s.num_classes() : 4);
  }
  if (d.has_file() || IsTokenData(d)) return std::nullopt;
  return std::make_pair(int64_t{784}, 10);  // fashion-mnist
}

absl::StatusOr<ResolvedJob> ResolveJobSpec(const v1::JobSpec& spec, const JobSpecContext& context) {
  // Every violation in one status (AIP-193): the field checks and the
  // precision (ValidateJobSpec), then what needs the resolved model, which
  // is checked whenever the model and data fields themselves are valid.
  std::vector<FieldViolation> violations = ValidateJobSpec(spec, context);
  const bool model_known =
      std::none_of(violations.begin(), violations.end(), [](const FieldViolation& v) {
        return absl::StartsWith(v.field, "model") || absl::StartsWith(v.field, "data");
      });
  ResolvedJob job;
  TrainerConfig& c = job.config;
  MlpSpec mlp;
  if (spec.model().has_mlp()) {
    const v1::MlpSpec& m = spec.model().mlp();
    mlp.input_dim = m.input_dim();
    mlp.num_classes = m.num_classes();
    if (m.hidden_size() > 0) mlp.hidden.assign(m.hidden().begin(), m.hidden().end());
    mlp.activation = m.activation() == v1::ACTIVATION_GELU ? Activation::kGelu : Activation::kRelu;
    mlp.layer_norm = m.layer_norm();
    mlp.dropout = m.dropout();
  } else {
    mlp.input_dim = 0;
    mlp.num_classes = 0;
  }
  if (auto shape = KnownDataShape(spec.data())) {
    if (mlp.input_dim == 0) mlp.input_dim = shape->first;
    if (mlp.num_classes == 0) mlp.num_classes = shape->second;
  }
  c.model = mlp;
  if (spec.model().has_gpt()) c.model = GptFromProto(spec.model().gpt(), spec.data());
  if (spec.model().has_sequential()) {
    std::vector<FieldViolation> proto_violations;  // ValidateJobSpec has them already
    nn::SequentialSpec q = SequentialFromProto(spec.model().sequential(), &proto_violations);
    const v1::DataSpec& d = spec.data();
    if (auto shape = KnownDataShape(d)) {
      // fashion-mnist's images are [1, 28, 28]; a synthetic set's examples are vectors.
      const bool images = !d.has_synthetic();
      c.model = q;
      nn::FillDataDims(&c.model, shape->first, shape->second,
                       images ? std::vector<int64_t>{1, 28, 28} : std::vector<int64_t>{});
    } else {
      c.model = q;
    }
    // The shapes, layer by layer, once the input shape is known (a file's
    // is known when it is read; the trainer checks it then).
    if (model_known && nn::DataDimsKnown(c.model)) {
      ViolateStatus(nn::ValidateModelSpec(c.model), &violations);
    }
  }
  std::vector<FieldViolation> reported;  // ValidateJobSpec has them already
  c.precision = ResolveJobPrecision(spec.precision(), context, &reported);
  const v1::OptimizerSpec& o = spec.optimizer();
  c.optimizer.lr = o.has_lr() ? o.lr() : 1e-3;
  c.optimizer.weight_decay = o.weight_decay();
  if (o.has_min_8bit_size()) c.optimizer.min_8bit_size = o.min_8bit_size();
  c.optimizer.fp32_state_layers.insert(o.fp32_state_layers().begin(), o.fp32_state_layers().end());
  if (o.has_sgd()) {
    c.optimizer.kind = OptimizerSpec::Kind::kSgd;
    c.optimizer.momentum = o.sgd().momentum();
    c.optimizer.nesterov = o.sgd().nesterov();
    if (o.sgd().state_bits() == 8) c.optimizer.state_bits = 8;
  } else {
    if (o.adamw().state_bits() == 8) c.optimizer.state_bits = 8;
    c.optimizer.kind = OptimizerSpec::Kind::kAdamW;
    if (o.adamw().has_beta1()) c.optimizer.beta1 = o.adamw().beta1();
    if (o.adamw().has_beta2()) c.optimizer.beta2 = o.adamw().beta2();
    if (o.adamw().has_eps()) c.optimizer.eps = o.adamw().eps();
  }
  const v1::DataSpec& ds = spec.data();
  c.transforms.mean.assign(ds.normalize().mean().begin(), ds.normalize().mean().end());
  c.transforms.std.assign(ds.normalize().std().begin(), ds.normalize().std().end());
  c.transforms.crop_padding = ds.augment().random_crop_padding();
  c.transforms.horizontal_flip = ds.augment().horizontal_flip();
  c.transforms.erasing = ds.augment().random_erasing();
  c.schedule.kind = spec.schedule().kind() == v1::ScheduleSpec::KIND_WARMUP_COSINE
                        ? ScheduleSpec::Kind::kWarmupCosine
                        : ScheduleSpec::Kind::kConstant;
  c.schedule.warmup_steps = spec.schedule().warmup_steps();
  c.schedule.min_lr_ratio = spec.schedule().min_lr_ratio();
  const v1::TrainingSpec& t = spec.training();
  c.training.steps = t.has_steps() ? t.steps() : 0;
  c.training.epochs = t.has_epochs() ? t.epochs() : 1;
  c.training.batch_size = t.has_batch_size() ? t.batch_size() : 128;
  c.training.grad_accumulation = t.has_grad_accumulation() ? t.grad_accumulation() : 1;
  c.training.eval_interval = t.eval_interval();
  c.training.seed = t.seed();
  c.training.clip_norm = t.clip_norm();
  job.device = spec.device() == v1::DEVICE_CUDA ? Device::kCuda : Device::kCpu;
  job.workers = std::max(1, spec.resources().workers());
  job.external_workers = spec.resources().external_workers();
  job.max_restarts =
      spec.resources().has_max_restarts() ? spec.resources().max_restarts() : kDefaultMaxRestarts;
  job.config.device = job.device;
  // fp32_state_layers must name layers of this model (a typo would silently
  // leave a layer in 8 bits).
  std::set<std::string> layers;
  if (model_known) {
    for (const nn::ParameterShape& p : nn::DescribeModel(c.model).parameters)
      layers.insert(p.layer);
  }
  for (int i = 0; model_known && i < o.fp32_state_layers_size(); ++i) {
    if (!layers.count(o.fp32_state_layers(i))) {
      Violate(&violations, absl::StrCat("optimizer.fp32_state_layers[", i, "]"),
              absl::StrCat("\"", o.fp32_state_layers(i), "\" is not a layer of this model"));
    }
  }
  // FP8 is for a transformer's block linears (Transformer Engine's split);
  // a model without them would silently train in plain autocast.
  if (c.precision.fp8 && !spec.model().has_gpt()) {
    Violate(&violations, "precision",
            absl::StrCat("precision ", c.precision.name,
                         " runs a transformer's block linears as FP8 GEMMs; model.",
                         spec.model().has_sequential() ? "sequential" : "mlp",
                         " has none (use bf16-mixed, or model.gpt)"));
  }
  if (!violations.empty()) return ViolationsToStatus(violations);
  return job;
}

bool ByteLevelTokens(const v1::DataSpec& data) {
  return IsTokenData(data) && ByteLevel(TokensOf(data));
}

std::vector<std::pair<std::string, std::string>> SpecPaths(const v1::JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> out = DataPaths(spec.data());
  if (!spec.init_from().empty()) out.emplace_back("init_from", spec.init_from());
  return out;
}

namespace {

std::string UnderRoot(const JobSpecContext& context, const std::string& p) {
  return context.resolve_data_path ? context.resolve_data_path(p) : context.data_root + "/" + p;
}

}  // namespace

absl::Status CheckInitFrom(const v1::JobSpec& spec, const JobSpecContext& context,
                           const nn::ModelSpec& model) {
  if (spec.init_from().empty()) return absl::OkStatus();
  absl::StatusOr<io::SafetensorsHeader> header =
      io::ReadSafetensorsHeader(UnderRoot(context, spec.init_from()));
  if (!header.ok()) {
    return FieldError("init_from", std::string(header.status().message()));
  }
  absl::StatusOr<std::vector<nn::WeightSource>> sources =
      nn::MatchWeightsFile(model, header->entries, spec.init_from());
  if (!sources.ok()) return FieldError("init_from", std::string(sources.status().message()));
  return absl::OkStatus();
}

absl::Status LoadInitFrom(const v1::JobSpec& spec, const JobSpecContext& context,
                          train::TrainerConfig* config) {
  config->initial_weights.clear();
  if (spec.init_from().empty()) return absl::OkStatus();
  absl::StatusOr<io::SafetensorsFile> f = io::ReadSafetensors(UnderRoot(context, spec.init_from()));
  if (!f.ok()) return FieldError("init_from", std::string(f.status().message()));
  absl::StatusOr<std::map<std::string, Tensor>> weights =
      nn::ImportWeights(config->model, *f, spec.init_from());
  if (!weights.ok()) return FieldError("init_from", std::string(weights.status().message()));
  config->initial_weights = *std::move(weights);
  return absl::OkStatus();
}

absl::StatusOr<JobData> LoadJobData(const v1::DataSpec& d, const JobSpecContext& context,
                                    TrainerConfig* config) {
  JobData data;
  auto under_root = [&](const std::string& p) {
    return context.resolve_data_path ? context.resolve_data_path(p) : context.data_root + "/" + p;
  };
  if (IsTokenData(d)) {
    const v1::TokenDataset t = TokensOf(d);
    TokenJobData tokens;
    tokens.byte_level = ByteLevel(t);
    tokens.eval_windows = t.has_eval_windows() ? t.eval_windows() : kDefaultEvalWindows;
    const GptSpec* gpt = config ? std::get_if<GptSpec>(&config->model) : nullptr;
    if (t.has_shards()) {
      const int64_t vocab = gpt ? gpt->vocab_size : kGpt2VocabSize;
      for (const std::string& shard : t.shards().train()) {
        absl::StatusOr<data::TokenSequence> s = data::ReadTokenShard(under_root(shard), vocab);
        if (!s.ok()) return s.status();
        tokens.train.push_back(*std::move(s));
      }
      if (!t.shards().val().empty()) {
        absl::StatusOr<data::TokenSequence> s =
            data::ReadTokenShard(under_root(t.shards().val()), vocab);
        if (!s.ok()) return s.status();
        tokens.val = *std::move(s);
      }
    } else {
      std::string text;
      std::string name;
      if (t.has_builtin()) {
        absl::StatusOr<std::string> fortunes = data::ReadFortunes(context.fortunes_dir);
        if (!fortunes.ok()) return fortunes.status();
        text = *std::move(fortunes);
        name = "fortunes";
      } else {
        const std::string path = under_root(t.text());
        std::ifstream in(path, std::ios::binary);
        if (!in) return absl::NotFoundError(absl::StrCat(t.text(), ": cannot open text file"));
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
        name = t.text();
      }
      data::TokenSplit split =
          data::SplitHeldOut(data::ByteTokens(text, name),
                             t.has_held_out_fraction() ? t.held_out_fraction() : kDefaultHeldOut);
      tokens.train.push_back(std::move(split.train));
      tokens.val = std::move(split.val);
    }
    data.tokens = std::move(tokens);
    return data;
  }
  if (d.has_synthetic()) {
    const v1::SyntheticDataset& s = d.synthetic();
    data::SyntheticSpec spec;
    spec.num_examples = s.num_examples() ? s.num_examples() : 4096;
    spec.feature_dim = s.feature_dim() ? s.feature_dim() : 32;
    spec.num_classes = s.num_classes() ? s.num_classes() : 4;
    spec.seed = s.seed();
    auto train = data::MakeSyntheticDataset(spec);
    if (!train.ok()) return train.status();
    data.train = *std::move(train);
    const int64_t n_test = s.num_test_examples() ? s.num_test_examples() : 1024;
    if (n_test > 0) {
      // Same teacher (seed), later examples: generate train + test and split.
      data::SyntheticSpec all = spec;
      all.num_examples = spec.num_examples + n_test;
      auto both = data::MakeSyntheticDataset(all);
      if (!both.ok()) return both.status();
      data::Dataset test;
      test.num_examples = n_test;
      test.feature_dim = spec.feature_dim;
      test.num_classes = spec.num_classes;
      test.features.assign(both->features.begin() + spec.num_examples * spec.feature_dim,
                           both->features.end());
      test.labels.assign(both->labels.begin() + spec.num_examples, both->labels.end());
      data.test = std::move(test);
    }
  } else if (d.has_file()) {
    const v1::FileDataset& f = d.file();
    if (f.format() == v1::FileDataset::FORMAT_IDX) {
      const int classes = f.num_classes() ? f.num_classes() : 10;
      auto train =
          data::ReadIdxDataset(under_root(f.train_images()), under_root(f.train_labels()), classes);
      if (!train.ok()) return train.status();
      data.train = *std::move(train);
      if (!f.test_images().empty()) {
        auto test =
            data::ReadIdxDataset(under_root(f.test_images()), under_root(f.test_labels()), classes);
        if (!test.ok()) return test.status();
        data.test = *std::move(test);
      }
    } else {
      data::CsvOptions options;
      options.label_column = f.label_column();
      options.num_classes = f.num_classes();
      auto train = data::ReadCsvDataset(under_root(f.train_csv()), options);
      if (!train.ok()) return train.status();
      data.train = *std::move(train);
      if (!f.test_csv().empty()) {
        options.num_classes = data.train.num_classes;
        auto test = data::ReadCsvDataset(under_root(f.test_csv()), options);
        if (!test.ok()) return test.status();
        data.test = *std::move(test);
      }
      // A declared example shape: images in CSV rows.
      if (!f.example_shape().empty()) {
        std::vector<int64_t> shape(f.example_shape().begin(), f.example_shape().end());
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        if (n != data.train.feature_dim) {
          return FieldError("data.file.example_shape",
                            absl::StrCat("holds ", n, " values but ", f.train_csv(), " has ",
                                         data.train.feature_dim, " features per example"));
        }
        data.train.example_shape = shape;
        if (data.test) data.test->example_shape = shape;
      }
    }
  } else {
    auto train = data::LoadMnistStyle(context.fashion_mnist_dir, true);
    if (!train.ok()) return train.status();
    auto test = data::LoadMnistStyle(context.fashion_mnist_dir, false);
    if (!test.ok()) return test.status();
    data.train = *std::move(train);
    data.test = *std::move(test);
  }
  if (config != nullptr) {
    FillDataDims(&config->model, data.train.feature_dim, data.train.num_classes,
                 data.train.example_shape);
  }
  return data;
}

}  // namespace ampd::engine::runner
