#ifndef AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_
#define AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_

// Blockwise 8-bit (de)quantization of optimizer states on the CPU
// (backend/quant_map.h): AVX-512 gathers from the maps' code tables where
// the processor has AVX-512F, scalar lookups otherwise. Every path gives
// the codes and values of backend::QuantizeBlockwise / DequantizeBlockwise
// bit for bit (tests/engine/cpu:blockwise_quant_test).

#include <array>
#include <cstdint>

namespace ampd::engine::cpu {

enum class QuantPath { kBest, kScalar, kAvx512 };

// Whether kAvx512 can run here.
bool HasAvx512Quant();

// n values (n need not be a multiple of kQuantBlock; x starts a block):
// absmax[b] = max |x| of block b, codes[i] = the nearest code of x[i] / absmax.
void QuantizeBlocks(const std::array<float, 256>& map, const float* x, int64_t n, uint8_t* codes,
                    float* absmax, QuantPath path = QuantPath::kBest);
// x[i] = map[codes[i]] * absmax[i / kQuantBlock].
void DequantizeBlocks(const std::array<float, 256>& map, const uint8_t* codes,
                      const float* absmax, int64_t n, float* x,
                      QuantPath path = QuantPath::kBest);

}  // namespace ampd::engine::cpu

#endif  // AMPD_ENGINE_CPU_BLOCKWISE_QUANT_H_
