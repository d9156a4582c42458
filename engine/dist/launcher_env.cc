#include "engine/dist/launcher_env.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ampd::engine::dist {

absl::StatusOr<WorldPlace> PlaceFromEnvironment(const GetEnv& getenv) {
  static constexpr const char* kPairs[][2] = {
      {"AMPD_RANK", "AMPD_WORLD_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"JOB_COMPLETION_INDEX", "AMPD_WORLD_SIZE"},
  };
  for (const auto& pair : kPairs) {
    const char* rank_text = getenv(pair[0]);
    if (rank_text == nullptr) continue;
    const char* size_text = getenv(pair[1]);
    if (size_text == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(pair[0], " is set but ", pair[1], " is not: the world size is unknown"));
    }
    WorldPlace place;
    place.source = absl::StrCat(pair[0], "/", pair[1]);
    if (!absl::SimpleAtoi(rank_text, &place.rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat(pair[0], "=\"", rank_text, "\" is not a number"));
    }
    if (!absl::SimpleAtoi(size_text, &place.size) || place.size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(pair[1], "=\"", size_text, "\" is not a world size (>= 1)"));
    }
    if (place.rank < 0 || place.rank >= place.size) {
      return absl::InvalidArgumentError(absl::StrCat(pair[0], "=", place.rank, " is outside [0, ",
                                                     pair[1], "=", place.size, ")"));
    }
    return place;
  }
  return absl::NotFoundError(
      "no rank in the environment (AMPD_RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or "
      "JOB_COMPLETION_INDEX)");
}

}  // namespace ampd::engine::dist
