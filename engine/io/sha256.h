#ifndef AMPD_ENGINE_IO_SHA256_H_
#define AMPD_ENGINE_IO_SHA256_H_

// SHA-256 (FIPS 180-4), for checkpoint checksums.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace ampd::engine::io {

// Streaming hash: Update() any number of times, then Finish() once.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  void Update(const void* data, size_t size);
  void Update(const std::string& bytes) { Update(bytes.data(), bytes.size()); }
  // Pads, returns the digest and resets the object to the empty state.
  Digest Finish();
  // Finish() as 64 lowercase hex characters.
  std::string FinishHex();

  static std::string ToHex(const Digest& digest);

 private:
  void Reset();
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// The hex digest of `bytes`.
std::string Sha256HexOfBytes(const std::string& bytes);
// The hex digest of the file at `path`, read in chunks. Errors name the path
// and the errno text.
absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_SHA256_H_
