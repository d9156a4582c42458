#ifndef AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_
#define AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_

// Blockwise 8-bit (de)quantization of optimizer states on the CPU
// (backend/quant_map.h). Where the processor has AVX-512 VBMI and VBMI2 (Ice
// Lake, Zen 4 and later) no lookup is a gather (quant_vbmi.h): a code is a
// binary search over the map's decision thresholds' high 16 bits held in
// registers (vpermi2w, 32 lanes), finished by one compare with the next
// threshold, and a value is assembled from four byte-plane lookups of 64
// codes at a time (vpermi2b). Elsewhere the lookups are gathers from the
// maps' code tables, 16 lanes with AVX-512F, 8 with AVX2, scalar loads
// otherwise (gathers are slow on AMD's cores: about 24 cycles for 16 lanes on
// Zen 5). Every path gives the codes and values of
// backend::QuantizeBlockwise / DequantizeBlockwise bit for bit
// (tests/engine/cpu:blockwise_quant_test).

#include <array>
#include <cstdint>

namespace ampd::engine::cpu {

enum class QuantPath { kBest, kScalar, kAvx2, kAvx512, kAvx512Vbmi };

// Whether `path` can run here (kScalar and kBest always can; a path that
// cannot is run as kScalar).
bool HasQuantPath(QuantPath path);
// The name of the path that `path` runs as here: "avx512-vbmi", "avx512",
// "avx2", "scalar".
const char* QuantPathName(QuantPath path);

// n values (n need not be a multiple of kQuantBlock; x starts a block):
// absmax[b] = max |x| of block b, codes[i] = the nearest code of x[i] / absmax.
void QuantizeBlocks(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                    float* absmax, QuantPath path = QuantPath::kBest);
// x[i] = map[codes[i]] * absmax[i / kQuantBlock].
void DequantizeBlocks(const std::array<float, 256>& map, const uint8_t* codes, const float* absmax,
                      int64_t n, float* x, QuantPath path = QuantPath::kBest);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_
