#include "server/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ampd::server {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace

void Log(const char* level, const std::string& message, std::initializer_list<LogField> fields) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line = "{\"ts\":\"" + std::string(ts) + "." + std::to_string(1000 + ms).substr(1) +
                     "Z\",\"level\":\"" + level + "\",\"msg\":\"" + Escape(message) + "\"";
  for (const auto& [k, v] : fields) line += ",\"" + Escape(k) + "\":\"" + Escape(v) + "\"";
  line += "}\n";
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace ampd::server
