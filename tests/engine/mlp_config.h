#ifndef AMPD_TESTS_ENGINE_MLP_CONFIG_H_
#define AMPD_TESTS_ENGINE_MLP_CONFIG_H_

// The trainer config the device tests start from: a small MLP classifier
// with layer norm in a built-in precision mode on a device. Each test sets
// the optimizer and training fields it is about.

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/amp/precision.h"
#include "engine/train/trainer.h"

namespace ampd::engine::testing {

inline train::TrainerConfig MlpTrainerConfig(int64_t input_dim, std::vector<int64_t> hidden,
                                             int num_classes, const std::string& precision,
                                             Device device) {
  train::TrainerConfig c;
  nn::MlpSpec mlp;
  mlp.input_dim = input_dim;
  mlp.hidden = std::move(hidden);
  mlp.num_classes = num_classes;
  mlp.layer_norm = true;
  c.model = mlp;
  absl::StatusOr<amp::PrecisionConfig> p = amp::ResolvePrecision(precision);
  if (!p.ok()) std::abort();  // a test names a mode that does not exist
  c.precision = *p;
  c.device = device;
  return c;
}

}  // namespace ampd::engine::testing

#endif  // AMPD_TESTS_ENGINE_MLP_CONFIG_H_
