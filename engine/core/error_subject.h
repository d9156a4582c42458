#ifndef AMPD_ENGINE_CORE_ERROR_SUBJECT_H_
#define AMPD_ENGINE_CORE_ERROR_SUBJECT_H_

// Errors about one thing (a spec field such as "model.mlp.hidden[1]", the
// device, a server limit such as "max_queued_jobs") carry that subject as an
// absl::Status payload beside the human message "subject: description". The
// server turns the payload into google.rpc details (BadRequest, QuotaFailure,
// PreconditionFailure) without parsing messages, and a caller that adds
// context to a subject ("loss_scaling." under "precision.") uses PrefixSubject
// rather than rewriting text.

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace ampd::engine::core {

// `code` with message "subject: description" and the subject payload.
absl::Status SubjectError(absl::StatusCode code, const std::string& subject,
                          const std::string& description);
// INVALID_ARGUMENT about one field.
inline absl::Status FieldError(const std::string& field, const std::string& description) {
  return SubjectError(absl::StatusCode::kInvalidArgument, field, description);
}

struct ErrorSubject {
  std::string subject;
  std::string description;
};
// Several at once (every violation of a spec): message "s1: d1; s2: d2".
absl::Status SubjectsError(absl::StatusCode code, const std::vector<ErrorSubject>& subjects);
// The subjects of `status`: empty when it carries none.
std::vector<ErrorSubject> GetErrorSubjects(const absl::Status& status);

// The same error with `prefix` + each subject (a status without subjects is
// returned unchanged).
absl::Status PrefixSubject(const absl::Status& status, const std::string& prefix);

}  // namespace ampd::engine::core

#endif  // AMPD_ENGINE_CORE_ERROR_SUBJECT_H_
