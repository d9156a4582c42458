#ifndef AMPD_SERVER_LOG_H_
#define AMPD_SERVER_LOG_H_

// Structured logs: one JSON object per line on stderr, e.g.
//   {"ts":"2026-11-29T22:50:01.123Z","level":"info","msg":"job started","job":"j00ab"}

#include <initializer_list>
#include <string>
#include <utility>

namespace ampd::server {

using LogField = std::pair<std::string, std::string>;

void Log(const char* level, const std::string& message,
         std::initializer_list<LogField> fields = {});
inline void LogInfo(const std::string& m, std::initializer_list<LogField> f = {}) {
  Log("info", m, f);
}
inline void LogWarning(const std::string& m, std::initializer_list<LogField> f = {}) {
  Log("warning", m, f);
}
inline void LogError(const std::string& m, std::initializer_list<LogField> f = {}) {
  Log("error", m, f);
}

}  // namespace ampd::server

#endif  // AMPD_SERVER_LOG_H_
