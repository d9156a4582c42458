#include "engine/data/text_tokens.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ampd::engine::data {

TokenSequence ByteTokens(std::string_view text, std::string name) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return TokenSequence::FromU16(std::move(tokens), std::move(name));
}

TokenSplit SplitHeldOut(const TokenSequence& tokens, double held_out_fraction) {
  const int64_t n = tokens.size();
  const int64_t val = std::clamp<int64_t>(
      static_cast<int64_t>(std::llround(held_out_fraction * static_cast<double>(n))), 0, n);
  return {tokens.Slice(0, n - val), tokens.Slice(n - val, n)};
}

namespace {

// One fortune file as training text: `%` separator lines become blank lines,
// and "x\bx" overstriking (bold/underline for terminals) keeps only the
// character that shows.
std::string CleanFortuneText(const std::string& raw) {
  std::string out;
  out.reserve(raw.size());
  size_t line_start = 0;
  while (line_start < raw.size()) {
    size_t end = raw.find('\n', line_start);
    if (end == std::string::npos) end = raw.size();
    const std::string_view line(raw.data() + line_start, end - line_start);
    if (line != "%") {
      for (char c : line) {
        if (c == '\b') {
          if (!out.empty() && out.back() != '\n') out.pop_back();
        } else {
          out.push_back(c);
        }
      }
    }
    out.push_back('\n');
    line_start = end + 1;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadFortunes(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("the fortunes corpus is not installed: no ", dir,
                                            " (Debian's package `fortunes`; "
                                            "tools/setup installs it)"));
  }
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink() || !e.is_regular_file()) continue;
    if (name.empty() || name[0] == '.') continue;
    const std::string ext = e.path().extension().string();
    if (ext == ".dat" || ext == ".u8") continue;
    files.push_back(e.path().string());
  }
  if (ec) return absl::InternalError(absl::StrCat(dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(f, ": cannot open"));
    text += CleanFortuneText(
        std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  }
  if (text.empty()) return absl::NotFoundError(absl::StrCat(dir, ": no fortune files"));
  return text;
}

}  // namespace ampd::engine::data
