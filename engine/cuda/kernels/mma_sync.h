#ifndef AMPD_ENGINE_CUDA_KERNELS_MMA_SYNC_H_
#define AMPD_ENGINE_CUDA_KERNELS_MMA_SYNC_H_

// One warp's tensor-core product through the PTX instruction
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, whose
// fragments (unlike WMMA's) have a documented element-to-lane layout (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"), so a kernel
// can work on the accumulators in registers. With g = lane / 4 and
// q = lane % 4:
//   A (16 x 16, row-major), four 32-bit registers of two values each, the
//     lower-numbered column in the low half: a[0] = A[g][2q..2q+1],
//     a[1] = A[g+8][2q..], a[2] = A[g][2q+8..], a[3] = A[g+8][2q+8..];
//   B (16 x 8, "col": k down, n across), two registers:
//     b[0] = B[2q..2q+1][g], b[1] = B[2q+8..2q+9][g];
//   C and D (16 x 8, f32): d[0..1] = D[g][2q..2q+1], d[2..3] = D[g+8][2q..].
// Both the GPU's instruction and the CPU emulator's stand-in
// (tests/engine/cuda/emu) follow this layout; the emulator's own test checks
// its stand-in against the table above.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ampd::engine::cuda::kernel_util {

// d = a * b + d for T = __nv_bfloat16 or __half (every lane of the warp calls
// it together).
template <typename T>
__device__ __forceinline__ void MmaM16N8K16(float (&d)[4], const uint32_t (&a)[4],
                                            const uint32_t (&b)[2]) {
#ifdef AMPD_CUDA_EMU
  AmpdEmuMmaM16N8K16(d, a, b, std::is_same_v<T, __nv_bfloat16>);
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// Four 8 x 8 matrices of 16-bit values from shared memory in one warp-wide
// instruction, ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lane l gives
// `row`, the address of row l % 8 of matrix l / 8 (16 bytes, 16-byte
// aligned); register i of lane (g, q) receives matrix i's row g, columns 2q
// and 2q + 1 (kTrans: rows 2q and 2q + 1 of column g), the first in the low
// half. That is an mma.sync operand's layout: an A fragment is one such load
// (its four 8 x 8 quarters), a B fragment half of one. One instruction
// instead of eight 32-bit loads, or sixteen 16-bit loads where the operand
// runs down the tile's columns (kTrans).
template <bool kTrans>
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row) {
#ifdef AMPD_CUDA_EMU
  AmpdEmuLdMatrixX4(r, row, kTrans);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  }
#endif
}

// Writes the pair w (two adjacent 16-bit values, the first in the low half)
// to p (4-byte aligned).
template <typename T>
__device__ __forceinline__ void StorePair(T* p, uint32_t w) {
#ifdef AMPD_CUDA_EMU
  AmpdEmuCheckAligned(p, 4, "pair store");
  std::memcpy(p, &w, 4);
#else
  *reinterpret_cast<uint32_t*>(p) = w;
#endif
}

// Two 16-bit values from anywhere, lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t JoinPair(const T& lo, const T& hi) {
  uint16_t l, h;
  std::memcpy(&l, &lo, 2);
  std::memcpy(&h, &hi, 2);
  return static_cast<uint32_t>(l) | (static_cast<uint32_t>(h) << 16);
}

}  // namespace ampd::engine::cuda::kernel_util

#endif  // AMPD_ENGINE_CUDA_KERNELS_MMA_SYNC_H_
