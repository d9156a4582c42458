#include "engine/core/error_subject.h"

#include "gtest/gtest.h"

namespace ampd::engine {

using core::ErrorSubject;
using core::FieldError;
using core::GetErrorSubjects;
using core::PrefixSubject;
using core::SubjectError;
using core::SubjectsError;

namespace {

TEST(ErrorSubjectTest, TheSubjectTravelsBesideTheMessage) {
  absl::Status s = FieldError("model.mlp.hidden[1]", "must be > 0, got -3");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "model.mlp.hidden[1]: must be > 0, got -3");
  std::vector<ErrorSubject> e = GetErrorSubjects(s);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].subject, "model.mlp.hidden[1]");
  EXPECT_EQ(e[0].description, "must be > 0, got -3");
}

TEST(ErrorSubjectTest, ADescriptionWithColonsIsNotSplit) {
  // Parsing "a: b: c" on ": " would have made "a" the field and lost nothing,
  // but a field cannot be recovered from "device: CUDA is not usable here: no GPU".
  absl::Status s = SubjectError(absl::StatusCode::kFailedPrecondition, "device",
                                "CUDA is not usable here: cudaGetDeviceCount: no driver");
  std::vector<ErrorSubject> e = GetErrorSubjects(s);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].subject, "device");
  EXPECT_EQ(e[0].description, "CUDA is not usable here: cudaGetDeviceCount: no driver");
}

TEST(ErrorSubjectTest, SeveralSubjectsAndAPrefix) {
  absl::Status s = SubjectsError(absl::StatusCode::kInvalidArgument,
                                 {{"growth_factor", "must be > 1"}, {"init_scale", "must be > 0"}});
  EXPECT_EQ(s.message(), "growth_factor: must be > 1; init_scale: must be > 0");
  absl::Status p = PrefixSubject(s, "precision.loss_scaling.");
  EXPECT_EQ(p.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(p.message(),
            "precision.loss_scaling.growth_factor: must be > 1; "
            "precision.loss_scaling.init_scale: must be > 0");
  std::vector<ErrorSubject> e = GetErrorSubjects(p);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].subject, "precision.loss_scaling.init_scale");
  EXPECT_EQ(e[1].description, "must be > 0");
}

TEST(ErrorSubjectTest, AStatusWithoutASubjectHasNone) {
  absl::Status plain = absl::InvalidArgumentError("x: y");
  EXPECT_TRUE(GetErrorSubjects(plain).empty());
  EXPECT_EQ(PrefixSubject(plain, "spec."), plain);
  EXPECT_TRUE(GetErrorSubjects(absl::OkStatus()).empty());
}

}  // namespace
}  // namespace ampd::engine
