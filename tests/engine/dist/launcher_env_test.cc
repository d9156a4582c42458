// A worker's rank and world size from each launcher's environment.

#include "engine/dist/launcher_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ampd::engine::dist {
namespace {

absl::StatusOr<WorldPlace> From(const std::map<std::string, std::string>& env) {
  return PlaceFromEnvironment([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(LauncherEnvTest, EachLaunchersVariablesGiveTheRankAndSize) {
  struct Case {
    std::map<std::string, std::string> env;
    int rank, size;
    std::string source;
  };
  const Case cases[] = {
      {{{"AMPD_RANK", "1"}, {"AMPD_WORLD_SIZE", "2"}}, 1, 2, "AMPD_RANK/AMPD_WORLD_SIZE"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}}, 3, 4, "SLURM_PROCID/SLURM_NTASKS"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "8"}},
       0,
       8,
       "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE"},
      {{{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}}, 5, 6, "PMI_RANK/PMI_SIZE"},
      {{{"JOB_COMPLETION_INDEX", "2"}, {"AMPD_WORLD_SIZE", "3"}},
       2,
       3,
       "JOB_COMPLETION_INDEX/AMPD_WORLD_SIZE"},
      // ampd's own variables win over a launcher's.
      {{{"AMPD_RANK", "0"}, {"AMPD_WORLD_SIZE", "1"}, {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}},
       0,
       1,
       "AMPD_RANK/AMPD_WORLD_SIZE"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<WorldPlace> p = From(c.env);
    ASSERT_TRUE(p.ok()) << c.source << ": " << p.status();
    EXPECT_EQ(p->rank, c.rank) << c.source;
    EXPECT_EQ(p->size, c.size) << c.source;
    EXPECT_EQ(p->source, c.source);
  }
}

TEST(LauncherEnvTest, BadOrMissingVariablesAreNamed) {
  EXPECT_TRUE(absl::IsNotFound(From({}).status()));
  struct Case {
    std::map<std::string, std::string> env;
    std::string named;
  };
  const Case cases[] = {
      {{{"SLURM_PROCID", "1"}}, "SLURM_NTASKS"},
      {{{"JOB_COMPLETION_INDEX", "1"}}, "AMPD_WORLD_SIZE"},
      {{{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "0"}}, "SLURM_NTASKS"},
      {{{"PMI_RANK", "2"}, {"PMI_SIZE", "2"}}, "PMI_RANK=2 is outside [0, PMI_SIZE=2)"},
  };
  for (const Case& c : cases) {
    absl::Status s = From(c.env).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << c.named << ": " << s;
    EXPECT_NE(s.message().find(c.named), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace ampd::engine::dist
