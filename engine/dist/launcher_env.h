#ifndef AMPD_ENGINE_DIST_LAUNCHER_ENV_H_
#define AMPD_ENGINE_DIST_LAUNCHER_ENV_H_

// A worker's place in its world (rank, size) from the environment the
// cluster's own launcher gives its processes, so that `srun`, `mpirun` or a
// Kubernetes indexed Job can start ampd workers as they start anything else.

#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace ampd::engine::dist {

struct WorldPlace {
  int rank = 0;
  int size = 1;
  std::string source;  // the variables it came from, e.g. "SLURM_PROCID/SLURM_NTASKS"
};

// The first of, in order:
//   AMPD_RANK / AMPD_WORLD_SIZE               (set by hand or by ampd)
//   SLURM_PROCID / SLURM_NTASKS               (srun)
//   OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (Open MPI's mpirun)
//   PMI_RANK / PMI_SIZE                       (MPICH's mpiexec)
//   JOB_COMPLETION_INDEX / AMPD_WORLD_SIZE    (a Kubernetes indexed Job, which
//                                              gives no size: set it to the
//                                              Job's completions)
// NOT_FOUND when none is set; INVALID_ARGUMENT naming the variable when one
// of a pair is missing or not a number, or the rank is outside [0, size).
using GetEnv = std::function<const char*(const char*)>;
absl::StatusOr<WorldPlace> PlaceFromEnvironment(const GetEnv& getenv);

}  // namespace ampd::engine::dist

#endif  // AMPD_ENGINE_DIST_LAUNCHER_ENV_H_
