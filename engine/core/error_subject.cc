#include "engine/core/error_subject.h"

#include <optional>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace ampd::engine::core {
namespace {

// Not a protobuf type: an engine-internal payload the server reads. Its value
// is subject NUL description NUL ... (neither ever contains a NUL).
constexpr char kSubjectsUrl[] = "ampd.engine/ErrorSubjects";

}  // namespace

absl::Status SubjectsError(absl::StatusCode code, const std::vector<ErrorSubject>& subjects) {
  std::vector<std::string> message, payload;
  for (const ErrorSubject& e : subjects) {
    message.push_back(absl::StrCat(e.subject, ": ", e.description));
    payload.push_back(e.subject);
    payload.push_back(e.description);
  }
  absl::Status s(code, absl::StrJoin(message, "; "));
  s.SetPayload(kSubjectsUrl, absl::Cord(absl::StrJoin(payload, std::string(1, '\0'))));
  return s;
}

absl::Status SubjectError(absl::StatusCode code, const std::string& subject,
                          const std::string& description) {
  return SubjectsError(code, {{subject, description}});
}

std::vector<ErrorSubject> GetErrorSubjects(const absl::Status& status) {
  auto payload = status.GetPayload(kSubjectsUrl);  // absl::optional here
  if (!payload) return {};
  const std::vector<std::string> parts = absl::StrSplit(std::string(*payload), '\0');
  if (parts.size() % 2 != 0) return {};
  std::vector<ErrorSubject> out;
  for (size_t i = 0; i < parts.size(); i += 2) out.push_back({parts[i], parts[i + 1]});
  return out;
}

absl::Status PrefixSubject(const absl::Status& status, const std::string& prefix) {
  std::vector<ErrorSubject> subjects = GetErrorSubjects(status);
  if (subjects.empty()) return status;
  for (ErrorSubject& e : subjects) e.subject = absl::StrCat(prefix, e.subject);
  return SubjectsError(status.code(), subjects);
}

}  // namespace ampd::engine::core
