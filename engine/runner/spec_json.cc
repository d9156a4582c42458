#include "engine/runner/spec_json.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace ampd::engine::runner {
namespace {

namespace v1 = ::ampd::v1;
namespace pb = ::google::protobuf;

// {"optimizer": "adamw8bit"} -> the JSON with the optimizer spelled out, or
// "" when the spec has no string optimizer. A spec that parses as it is never
// comes here, so its numbers never go through a double.
std::string RewriteOptimizerAlias(const std::string& json, std::string* unknown) {
  pb::Struct root;
  if (!pb::util::JsonStringToMessage(json, &root).ok()) return "";
  auto it = root.mutable_fields()->find("optimizer");
  if (it == root.mutable_fields()->end() || !it->second.has_string_value()) return "";
  std::string name = it->second.string_value();
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const bool adamw = name == "adamw" || name == "adamw8bit";
  const bool sgd = name == "sgd" || name == "sgd8bit";
  if (!adamw && !sgd) {
    *unknown = it->second.string_value();
    return "";
  }
  pb::Struct kind;
  if (name.size() > 5 && name.substr(name.size() - 4) == "8bit") {
    (*kind.mutable_fields())["stateBits"].set_number_value(8);
  }
  pb::Struct optimizer;
  *(*optimizer.mutable_fields())[adamw ? "adamw" : "sgd"].mutable_struct_value() = kind;
  *it->second.mutable_struct_value() = optimizer;
  std::string out;
  if (!pb::util::MessageToJsonString(root, &out).ok()) return "";
  return out;
}

// For protobuf's "invalid value \"X\" for type type.googleapis.com/ampd.v1.E":
// "; expected one of E's value names" (the parser names neither), else "".
std::string EnumValuesHint(std::string_view message) {
  constexpr std::string_view kType = "for type type.googleapis.com/";
  const size_t at = message.find(kType);
  if (at == std::string_view::npos) return "";
  std::string_view name = message.substr(at + kType.size());
  name = name.substr(0, name.find_first_not_of(
                            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_."));
  const pb::EnumDescriptor* e =
      pb::DescriptorPool::generated_pool()->FindEnumTypeByName(std::string(name));
  if (e == nullptr) return "";
  std::vector<std::string> values;
  for (int i = 0; i < e->value_count(); ++i) values.push_back(e->value(i)->name());
  return absl::StrCat("; expected one of ", absl::StrJoin(values, ", "));
}

}  // namespace

absl::StatusOr<v1::JobSpec> ParseJobSpecJson(const std::string& json,
                                             const std::string& source_name) {
  v1::JobSpec spec;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = pb::util::JsonStringToMessage(json, &spec, options);
  if (status.ok()) return spec;
  std::string unknown;
  const std::string rewritten = RewriteOptimizerAlias(json, &unknown);
  if (!unknown.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": optimizer: unknown name \"", unknown,
                     "\" (known: adamw, adamw8bit, sgd, sgd8bit, or an object)"));
  }
  if (!rewritten.empty()) {
    spec.Clear();
    if (pb::util::JsonStringToMessage(rewritten, &spec, options).ok()) return spec;
    status = pb::util::JsonStringToMessage(rewritten, &spec, options);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source_name, ": not a valid ampd.v1.JobSpec: ", std::string(status.message()),
                   EnumValuesHint(std::string(status.message()))));
}

}  // namespace ampd::engine::runner
