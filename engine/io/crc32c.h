#ifndef AMPD_ENGINE_IO_CRC32C_H_
#define AMPD_ENGINE_IO_CRC32C_H_

// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
// final XOR 0xFFFFFFFF), and the masking TFRecord framing applies to it.

#include <cstddef>
#include <cstdint>

namespace ampd::engine::io {

// The CRC of the bytes so far is `crc`; returns it extended by `data`.
// Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }

// TFRecord stores ((crc >> 15) | (crc << 17)) + 0xa282ead8, since CRCs of
// data that itself holds CRCs are weak.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace ampd::engine::io

#endif  // AMPD_ENGINE_IO_CRC32C_H_
