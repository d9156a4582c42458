// Writes sample files for the Python cross-checks (python_readers_test.py):
//   DIR/sample.safetensors        f32, f16, bf16, f64 tensors + metadata
//   DIR/sample_numpy.safetensors  the same without bf16 (numpy has no bf16)
//   DIR/tb/events.out.tfevents.*  scalars as a training job logs them
// The values are exactly representable in every dtype used, so the Python
// side compares them exactly.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/io/tensorboard.h"
#include "engine/core/tensor.h"

namespace {

using ampd::engine::DType;
using ampd::engine::Tensor;

int Fail(const std::string& what) {
  std::fprintf(stderr, "write_samples: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: write_samples DIR");
  const std::string dir = argv[1];
  namespace io = ampd::engine::io;

  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"fc1.weight", Tensor::FromVector({0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 1024.5f}, {2, 3})},
      {"fc1.bias", Tensor::FromVector({1.0f, -2.5f, 0.125f, 65504.0f}, {4}, DType::kF16)},
      {"head.weight", Tensor::FromVector({1.0f, -3.140625f, 0.5f, 256.0f, -0.0078125f, 3.0e38f},
                                         {3, 2}, DType::kBF16)},
      {"norm.scale", Tensor::FromDoubles({3.141592653589793, -1e300}, {2})},
      {"step", Tensor::FromVector({7.0f}, {})},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"producer", "ampd write_samples"}};
  absl::Status status = io::WriteSafetensors(dir + "/sample.safetensors", tensors, metadata);
  if (!status.ok()) return Fail(std::string(status.message()));
  std::vector<std::pair<std::string, Tensor>> no_bf16;
  for (const auto& named : tensors) {
    if (named.second.dtype() != DType::kBF16) no_bf16.push_back(named);
  }
  status = io::WriteSafetensors(dir + "/sample_numpy.safetensors", no_bf16, metadata);
  if (!status.ok()) return Fail(std::string(status.message()));

  absl::StatusOr<std::unique_ptr<io::EventFileWriter>> writer =
      io::EventFileWriter::Open(dir + "/tb");
  if (!writer.ok()) return Fail(std::string(writer.status().message()));
  const double t0 = 1700000000.0;
  for (int step = 1; step <= 3; ++step) {
    const double t = t0 + step;
    status = (*writer)->AddScalar("train/loss", step, 4.0 / (1 << step), t);
    if (status.ok()) status = (*writer)->AddScalar("train/lr", step, 0.001 * step, t);
    if (status.ok()) status = (*writer)->AddScalar("train/loss_scale", step, 65536.0, t);
    if (status.ok()) status = (*writer)->AddScalar("train/grad_norm", step, 0.25 * step, t);
    if (status.ok()) status = (*writer)->AddScalar("train/skipped_steps", step, 0.0, t);
    if (status.ok()) status = (*writer)->AddScalar("train/samples_per_sec", step, 1000.0 + step, t);
    if (!status.ok()) return Fail(std::string(status.message()));
  }
  status = (*writer)->AddScalar("eval/accuracy", 3, 0.875, t0 + 3.5);
  if (status.ok()) status = (*writer)->Close();
  if (!status.ok()) return Fail(std::string(status.message()));
  std::printf("%s\n", (*writer)->path().c_str());
  return 0;
}
