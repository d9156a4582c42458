#ifndef AMPD_ENGINE_RUNNER_JOB_SPEC_H_
#define AMPD_ENGINE_RUNNER_JOB_SPEC_H_

// ampd.v1.JobSpec (the public job format) -> the engine's TrainerConfig and
// data. Shared by the local runner and the server, so both accept exactly the
// same files. Validation reports every bad field at once, named by its JSON
// path ("training.batch_size", "model.mlp.hidden[1]").

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ampd/v1/job_spec.pb.h"
#include "engine/core/tensor.h"
#include "engine/data/dataset.h"
#include "engine/data/text_tokens.h"
#include "engine/data/token_sequence.h"
#include "engine/runner/spec_json.h"
#include "engine/train/trainer.h"

namespace ampd::engine::runner {

struct FieldViolation {
  std::string field;
  std::string description;
};

struct JobSpecContext {
  // Root for FileDataset paths (relative paths only, never escaping it).
  std::string data_root = ".";
  std::string fashion_mnist_dir = data::kFashionMnistDir;
  std::string fortunes_dir = data::kFortunesDir;
  // Maps a FileDataset path to the file to read (default: data_root/PATH);
  // the server uses it to give each principal its own uploads/.
  std::function<std::string(const std::string&)> resolve_data_path;
  // User-defined precision profiles by name (built-ins are always known).
  std::function<std::optional<ampd::v1::PrecisionConfig>(const std::string&)> profiles;
};

// INVALID_ARGUMENT listing every violation ("a: why; b: why").
absl::Status ViolationsToStatus(const std::vector<FieldViolation>& violations);

// ParseJobSpecJson (spec_json.h), on a file.
absl::StatusOr<ampd::v1::JobSpec> ReadJobSpecFile(const std::string& path);

// A precision config from its proto form (base mode + overrides).
amp::PrecisionConfig PrecisionFromProto(const ampd::v1::PrecisionConfig& proto,
                                        const std::string& field,
                                        std::vector<FieldViolation>* violations);
// The precision a spec asks for (profile name, custom config, or default).
amp::PrecisionConfig ResolveJobPrecision(const ampd::v1::PrecisionSpec& spec,
                                         const JobSpecContext& context,
                                         std::vector<FieldViolation>* violations);

// Everything checkable without reading data. Empty: valid.
std::vector<FieldViolation> ValidateJobSpec(const ampd::v1::JobSpec& spec,
                                            const JobSpecContext& context);

// resources: the workers a job may ask for, and how often a data-parallel
// job is restarted after losing one when the spec does not say.
inline constexpr int kMaxWorkers = 256;
inline constexpr int kMaxRestarts = 100;
inline constexpr int kDefaultMaxRestarts = 3;

struct ResolvedJob {
  train::TrainerConfig config;
  Device device = Device::kCpu;
  int workers = 1;  // resources.workers (data-parallel ranks)
  int max_restarts = kDefaultMaxRestarts;
  bool external_workers = false;  // resources.external_workers
};
// INVALID_ARGUMENT (all violations) when the spec is not valid. Model sizes
// left 0 are filled from the data by LoadJobData.
absl::StatusOr<ResolvedJob> ResolveJobSpec(const ampd::v1::JobSpec& spec,
                                           const JobSpecContext& context);

// A language model's data as loaded (data.tokens).
struct TokenJobData {
  std::vector<data::TokenSequence> train;  // shards, or the text's train split
  std::optional<data::TokenSequence> val;
  bool byte_level = false;
  int64_t eval_windows = 0;
  // Pointers into this object: valid while it stays where it is.
  train::TokenData View() const;
};

struct JobData {
  data::Dataset train;
  std::optional<data::Dataset> test;
  std::optional<TokenJobData> tokens;  // data.tokens (then train/test are empty)
};
// Loads the data and fills model.mlp.input_dim / num_classes when unset.
// Token data is checked against the model's vocabulary (`config`'s GPT;
// without a config: GPT-2's 50257 for shards).
absl::StatusOr<JobData> LoadJobData(const ampd::v1::DataSpec& spec, const JobSpecContext& context,
                                    train::TrainerConfig* config);

// The files a data spec names, each with its field ("data.file.train_csv",
// "data.tokens.shards.train[1]"), for the server's confinement check.
std::vector<std::pair<std::string, std::string>> DataPaths(const ampd::v1::DataSpec& spec);
// Whether the data is byte-level text (data.tokens.text or builtin): its
// token ids are bytes.
bool ByteLevelTokens(const ampd::v1::DataSpec& data);

// Every file a job spec names: DataPaths, and init_from.
std::vector<std::pair<std::string, std::string>> SpecPaths(const ampd::v1::JobSpec& spec);

// init_from against the model (`model`'s sizes known): its header only.
// INVALID_ARGUMENT on "init_from" naming the tensor (missing, unexpected, or
// its shape in the file and in the model; a dtype that is not floating);
// NOT_FOUND-like errors name the path. OK when the spec has no init_from.
absl::Status CheckInitFrom(const ampd::v1::JobSpec& spec, const JobSpecContext& context,
                           const nn::ModelSpec& model);
// The same checks on the whole file, then its tensors as the config's
// initial_weights (the trainer casts them to each parameter's dtype).
absl::Status LoadInitFrom(const ampd::v1::JobSpec& spec, const JobSpecContext& context,
                          train::TrainerConfig* config);

// The data set's shape without loading it, when the spec alone tells
// (builtin, synthetic): for explain and memory estimates.
std::optional<std::pair<int64_t, int>> KnownDataShape(const ampd::v1::DataSpec& spec);

}  // namespace ampd::engine::runner

#endif  // AMPD_ENGINE_RUNNER_JOB_SPEC_H_
