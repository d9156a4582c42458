// The CPU's 8-bit optimizer steps (backend/kernels/optimizer8bit.h): a block
// of kBlock elements (kBlock / kQuantBlock quantization blocks) at a time,
// over the OpenMP pool. The f32 math is SgdStep's line for line; AdamW's is
// bitsandbytes' form of the update (AdamWBlockMath::Form::kBitsandbytes: one
// division a value, where torch's form, which the 32-bit step keeps, has
// two), so an 8-bit step differs from a 32-bit one by the states' rounding
// and a few units in the last place of the update.
// The codes go through blockwise_quant (AVX-512 or AVX2 where the processor
// has it); AdamW decodes, updates and re-codes one quantization block at a
// time, so both states stay in L1 in between.
// The fused form's arguments are host tensors here: the skip flag and the
// step counter are read directly, and the model copy is written per block.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/quant_map.h"
#include "engine/cpu/adamw8bit_coder.h"
#include "engine/cpu/blockwise_quant.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/optimizer_math.h"
#include "engine/cpu/quant_vbmi.h"
#include "engine/cpu/vector_isa.h"

namespace ampd::engine::cpu {
namespace {

using backend::AdamW8bitParam;
using backend::AdamW8bitStepKernel;
using backend::AdamW8bitStepListKernel;
using backend::DeviceAmp;
using backend::DynamicMap;
using backend::kQuantBlock;
using backend::Sgd8bitParam;
using backend::Sgd8bitStepKernel;
using backend::Sgd8bitStepListKernel;
using backend::UnsignedDynamicMap;

static_assert(kBlock % kQuantBlock == 0, "a CPU block holds whole quantization blocks");

using FusedArgs = DeviceAmp::FusedStepArgs;

#ifdef AMPD_QUANT_X86
// One whole quantization block (kQuantBlock values) of AdamW with 8-bit
// states, fused, where the CPU has the VBMI coder and AVX-512 kernels are on.
// The arithmetic is AdamWBlockMath::UpdateAvx512's (kBitsandbytes form)
// operation for operation
// (fp-contract=off likewise), and the codes are QuantizeBlocks', so the
// results are the unfused step's bit for bit
// (tests/engine/cpu:vector_kernels_test). What fusing buys:
//  - the old states are decoded straight into the moment update, and the new
//    absmax values taken on the way, with no separate passes;
//  - the parameter update (a division and a square root a value) is issued
//    with the moments, and the coding,
//    which does not depend on it, follows: the divider works while the
//    permute units code (measured: 3-5 % faster than updating the
//    parameters after each 64 values' codes, 12 % faster than a loop that
//    pipelines whole blocks, which spills).
// The new codes come from the VBMI search (kGather false) or from the code
// table's gathers (true), whichever ResolvedFusedCoder() found faster here
// (adamw8bit_coder.h): the same codes either way.
// A block with a non-finite moment or an extreme absmax is coded by
// QuantizeBlocks, which takes the reference's codes there.
#define AMPD_ADAMW8_ATTRS __attribute__((target(AMPD_QUANT_VBMI_ISA), optimize("fp-contract=off")))

using Coefficients = AdamWBlockMath::Coefficients;
constexpr int64_t kPrefetchAhead = 2 * kQuantBlock;
// Values of each state coded at once: 2 x 64, eight searches interleaved (6 %
// faster than 64, the search's latency better hidden; 256 spills).
constexpr int kCodeGroups = 2;

// A prefetch of base[index] (index may lie past the end: the address is
// formed as an integer, and a prefetch never faults).
template <typename T>
AMPD_ADAMW8_ATTRS __attribute__((always_inline)) inline void Prefetch(const T* base,
                                                                      int64_t index) {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) +
                                             static_cast<uintptr_t>(index) * sizeof(T)),
               _MM_HINT_T0);
}

// The new moments of 16 values (UpdateAvx512's first two lines); their
// absolute maxima and a NaN detector (x * 0 is NaN for infinities) updated.
AMPD_ADAMW8_ATTRS __attribute__((always_inline)) inline void Moments16(const Coefficients& k,
                                                                       __m512 g, __m512 m0,
                                                                       __m512 v0, float* m,
                                                                       float* v, __m512* m_max,
                                                                       __m512* v_max, __m512* odd) {
  const __m512 mi = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(k.beta1), m0),
                                  _mm512_mul_ps(_mm512_set1_ps(k.one_minus_beta1), g));
  const __m512 vi =
      _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(k.beta2), v0),
                    _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(k.one_minus_beta2), g), g));
  _mm512_store_ps(m, mi);
  _mm512_store_ps(v, vi);
  *m_max = _mm512_max_ps(_mm512_abs_ps(mi), *m_max);  // a NaN dropped, as QuantizeBlocks does
  *v_max = _mm512_max_ps(_mm512_abs_ps(vi), *v_max);
  *odd = _mm512_fmadd_ps(vi, _mm512_setzero_ps(), _mm512_fmadd_ps(mi, _mm512_setzero_ps(), *odd));
}

// The new parameters of 16 values (UpdateAvx512's last lines, the
// kBitsandbytes form: k.step_size and k.eps are the scaled ones).
AMPD_ADAMW8_ATTRS __attribute__((always_inline)) inline void Params16(const Coefficients& k,
                                                                      const float* p,
                                                                      const float* m,
                                                                      const float* v, float* out) {
  const __m512 ratio = _mm512_div_ps(
      _mm512_load_ps(m), _mm512_add_ps(_mm512_sqrt_ps(_mm512_load_ps(v)), _mm512_set1_ps(k.eps)));
  const __m512 pi = _mm512_sub_ps(_mm512_mul_ps(_mm512_loadu_ps(p), _mm512_set1_ps(k.decay)),
                                  _mm512_mul_ps(_mm512_set1_ps(k.step_size), ratio));
  _mm512_storeu_ps(out, pi);
}

// g, p, out: the block's kQuantBlock values (out may alias p); mc/ma, vc/va:
// its codes and absmax, read and replaced.
// 16 codes of x * inv by the code table: one gather of the bucket's packed
// entry (its first code and the one threshold inside it), a compare of the
// low bits: CodeTable::Code, as QuantizeBlockAvx512 computes it.
AMPD_ADAMW8_ATTRS __attribute__((always_inline)) inline __m128i GatherCode16(const int* entry,
                                                                             __m512 x, __m512 inv) {
  const __m512i low16 = _mm512_set1_epi32(0xFFFF);
  const __m512i bits = _mm512_castps_si512(_mm512_mul_ps(x, inv));
  const __m512i e = _mm512_i32gather_epi32(_mm512_srli_epi32(bits, 16), entry, 4);
  const __m512i low = _mm512_xor_si512(_mm512_and_si512(bits, low16),
                                       _mm512_and_si512(_mm512_srai_epi32(bits, 31), low16));
  const __mmask16 up = _mm512_cmpgt_epi32_mask(low, _mm512_and_si512(e, low16));
  const __m512i start = _mm512_srli_epi32(e, 16);
  return _mm512_cvtepi32_epi8(_mm512_mask_add_epi32(start, up, start, _mm512_set1_epi32(1)));
}

template <bool kGather>
AMPD_ADAMW8_ATTRS void AdamW8bitBlockVbmi(const Coefficients& k, const vbmi::PermuteTables& mt,
                                          const vbmi::PermuteTables& vt, const float* g,
                                          const float* p, float* out, uint8_t* mc, float* ma,
                                          uint8_t* vc, float* va) {
  alignas(64) float m[kQuantBlock], v[kQuantBlock];
  const __m512 m_scale = _mm512_set1_ps(*ma), v_scale = _mm512_set1_ps(*va);
  __m512 m_max = _mm512_setzero_ps(), v_max = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
  for (int64_t q = 0; q < kQuantBlock; q += 64) {
    const vbmi::Dwords4 mo = vbmi::Lookup64(mt.plane, mt.code_order, _mm512_loadu_si512(mc + q));
    const vbmi::Dwords4 vo = vbmi::Lookup64(vt.plane, vt.code_order, _mm512_loadu_si512(vc + q));
    const __m512i m_bits[4] = {mo.r0, mo.r1, mo.r2, mo.r3};
    const __m512i v_bits[4] = {vo.r0, vo.r1, vo.r2, vo.r3};
    for (int r = 0; r < 4; ++r) {
      const int64_t at = q + 16 * r;
      Moments16(k, _mm512_loadu_ps(g + at), _mm512_mul_ps(_mm512_castsi512_ps(m_bits[r]), m_scale),
                _mm512_mul_ps(_mm512_castsi512_ps(v_bits[r]), v_scale), m + at, v + at, &m_max,
                &v_max, &odd);
      Params16(k, p + at, m + at, v + at, out + at);
    }
  }
  const float m_abs = _mm512_reduce_max_ps(m_max), v_abs = _mm512_reduce_max_ps(v_max);
  const float m_inv = 1.0f / m_abs, v_inv = 1.0f / v_abs;
  const bool codable = _mm512_cmp_ps_mask(odd, odd, _CMP_UNORD_Q) == 0 && m_abs > 0 && v_abs > 0 &&
                       m_inv <= std::numeric_limits<float>::max() &&
                       v_inv <= std::numeric_limits<float>::max();
  if (!codable) {
    QuantizeBlocks(DynamicMap(), m, kQuantBlock, mc, ma);
    QuantizeBlocks(UnsignedDynamicMap(), v, kQuantBlock, vc, va);
    return;
  }
  *ma = m_abs;
  *va = v_abs;
  const __m512 m_invs = _mm512_set1_ps(m_inv), v_invs = _mm512_set1_ps(v_inv);
  if constexpr (kGather) {
    static const int* m_entry =
        reinterpret_cast<const int*>(backend::CodeTableFor(DynamicMap())->entry.data());
    static const int* v_entry =
        reinterpret_cast<const int*>(backend::CodeTableFor(UnsignedDynamicMap())->entry.data());
    for (int64_t q = 0; q < kQuantBlock; q += 64) {
      for (int64_t i = q; i < q + 64; i += 16) {
        Prefetch(g, kPrefetchAhead + i);
        Prefetch(p, kPrefetchAhead + i);
      }
      Prefetch(mc, kPrefetchAhead + q);
      Prefetch(vc, kPrefetchAhead + q);
      for (int64_t i = q; i < q + 64; i += 16) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(mc + i),
                         GatherCode16(m_entry, _mm512_load_ps(m + i), m_invs));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(vc + i),
                         GatherCode16(v_entry, _mm512_load_ps(v + i), v_invs));
      }
    }
    return;
  }
  const vbmi::Tree m_tree = vbmi::LoadTree(mt.node), v_tree = vbmi::LoadTree(vt.node);
  for (int64_t q = 0; q < kQuantBlock; q += 64 * kCodeGroups) {
    // The data of the block after next, a share at a time, so that memory
    // keeps streaming while the permute units code (4-5 % faster on the
    // MLP's weights than the hardware prefetchers alone). Past the end of
    // the tensor these are hints that touch nothing (Prefetch).
    for (int64_t i = q; i < q + 64 * kCodeGroups; i += 16) {
      Prefetch(g, kPrefetchAhead + i);
      Prefetch(p, kPrefetchAhead + i);
    }
    for (int64_t i = q; i < q + 64 * kCodeGroups; i += 64) {
      Prefetch(mc, kPrefetchAhead + i);
      Prefetch(vc, kPrefetchAhead + i);
    }
    vbmi::CodeRuns<kCodeGroups, kCodeGroups>(mt, m_tree, m + q, m_invs, mc + q, vt, v_tree, v + q,
                                             v_invs, vc + q);
  }
}
// Which coder is faster here, timed once: both blocks over the same 64
// quantization blocks of moment-like data, alternated five times, the best
// time of each kept.
FusedCoder TimeFusedCoders() {
  const vbmi::PermuteTables* mt = vbmi::PermuteTablesFor(DynamicMap());
  const vbmi::PermuteTables* vt = vbmi::PermuteTablesFor(UnsignedDynamicMap());
  if (mt == nullptr || vt == nullptr) return FusedCoder::kSearch;
  constexpr int64_t kBlocks = 64, n = kBlocks * kQuantBlock;
  std::vector<float> g(n), p(n), out(n), ma(kBlocks, 1e-3f), va(kBlocks, 1e-6f);
  std::vector<uint8_t> mc(n), vc(n);
  uint32_t x = 12345;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;  // a fixed sequence: nothing here affects results
    g[i] = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f) * 1e-3f;
    p[i] = g[i] * 100;
    mc[i] = static_cast<uint8_t>(x >> 3);
    vc[i] = static_cast<uint8_t>(x >> 11);
  }
  DeviceAmp::AdamWHyper h;
  h.step = 10;
  const AdamWBlockMath::Coefficients k =
      AdamWBlockMath(h, AdamWBlockMath::Form::kBitsandbytes).coefficients();
  double best[2] = {1e30, 1e30};
  for (int round = 0; round < 5; ++round) {
    for (int gather = 0; gather < 2; ++gather) {
      const auto t = std::chrono::steady_clock::now();
      for (int64_t b = 0; b < kBlocks; ++b) {
        const int64_t at = b * kQuantBlock;
        (gather ? AdamW8bitBlockVbmi<true> : AdamW8bitBlockVbmi<false>)(k, *mt, *vt, &g[at], &p[at],
                                                                        &out[at], &mc[at], &ma[b],
                                                                        &vc[at], &va[b]);
      }
      best[gather] =
          std::min(best[gather],
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
    }
  }
  return best[1] < best[0] ? FusedCoder::kGather : FusedCoder::kSearch;
}
#endif  // AMPD_QUANT_X86

std::atomic<FusedCoder> forced_coder{FusedCoder::kAuto};

bool Skipped(const FusedArgs& args) {
  return args.found_inf.defined() && args.found_inf.data<float>()[0] != 0.0f;
}

void AdamW8bitStep(const Tensor& param, const Tensor& grad, const Tensor& m_codes,
                   const Tensor& m_absmax, const Tensor& v_codes, const Tensor& v_absmax,
                   const DeviceAmp::AdamWHyper& hyper, const FusedArgs& args) {
  if (Skipped(args)) return;
  DeviceAmp::AdamWHyper h = hyper;
  if (args.step.defined()) h.step = static_cast<int64_t>(args.step.data<float>()[0]) + 1;
  const AdamWBlockMath math(h, AdamWBlockMath::Form::kBitsandbytes);
  uint8_t* mc = m_codes.data<uint8_t>();
  uint8_t* vc = v_codes.data<uint8_t>();
  float* ma = m_absmax.data<float>();
  float* va = v_absmax.data<float>();
  const auto& signed_map = DynamicMap();
  const auto& unsigned_map = UnsignedDynamicMap();
#ifdef AMPD_QUANT_X86
  const AdamWBlockMath::Coefficients coefficients = math.coefficients();
  // The fused block needs the VBMI coder's tables for both maps.
  const vbmi::PermuteTables* fused = nullptr;
  const vbmi::PermuteTables* vt = vbmi::PermuteTablesFor(unsigned_map);
  if (UseAvx512Kernels() && HasQuantPath(QuantPath::kAvx512Vbmi) && vt != nullptr) {
    fused = vbmi::PermuteTablesFor(signed_map);
  }
  const bool gather = fused != nullptr && ResolvedFusedCoder() == FusedCoder::kGather;
#endif
  ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
    float g_buf[kBlock], p_buf[kBlock];
    const float* gs = LoadBlock(grad, begin, len, g_buf);
    const float* ps = LoadBlock(param, begin, len, p_buf);
    float* out = DestBlock(param, begin, p_buf);  // element i read, then written
    // One quantization block at a time: its two states stay in L1 from
    // decoding to re-coding.
    for (int64_t q = 0; q < len; q += kQuantBlock) {
      float m[kQuantBlock], v[kQuantBlock];
      const int64_t at = begin + q, qb = at / kQuantBlock, qlen = std::min(kQuantBlock, len - q);
#ifdef AMPD_QUANT_X86
      if (fused != nullptr && qlen == kQuantBlock) {
        (gather ? AdamW8bitBlockVbmi<true>
                : AdamW8bitBlockVbmi<false>)(coefficients, *fused, *vt, gs + q, ps + q, out + q,
                                             mc + at, ma + qb, vc + at, va + qb);
        continue;
      }
#endif
      DequantizeBlocks(signed_map, mc + at, ma + qb, qlen, m);
      DequantizeBlocks(unsigned_map, vc + at, va + qb, qlen, v);
      math.Update(gs + q, ps + q, m, v, out + q, qlen);
      QuantizeBlocks(signed_map, m, qlen, mc + at, ma + qb);
      QuantizeBlocks(unsigned_map, v, qlen, vc + at, va + qb);
    }
    StoreBlock(out, param, begin, len);
    if (args.model_copy.defined()) StoreBlock(out, args.model_copy, begin, len);
  });
}

// The list, a tensor at a time (the CPU gains nothing from one call).
void AdamW8bitStepList(const std::vector<AdamW8bitParam>& params, const DeviceAmp::AdamWHyper& h,
                       const Tensor& found_inf, const Tensor& step) {
  for (const AdamW8bitParam& p : params) {
    DeviceAmp::AdamWHyper own = h;
    if (!p.weight_decay) own.weight_decay = 0;
    AdamW8bitStep(p.param, p.grad, p.m_codes, p.m_absmax, p.v_codes, p.v_absmax, own,
                  FusedArgs{found_inf, p.model_copy, step});
  }
}

void Sgd8bitStep(const Tensor& param, const Tensor& grad, const Tensor& codes, const Tensor& absmax,
                 const DeviceAmp::SgdHyper& h, bool first, const FusedArgs& args) {
  if (Skipped(args)) return;
  uint8_t* c = codes.data<uint8_t>();
  float* a = absmax.data<float>();
  const auto& map = DynamicMap();
  ForBlocks(param.numel(), [&](int64_t begin, int64_t len) {
    float g_buf[kBlock], p_buf[kBlock], buf[kBlock];
    const float* gs = LoadBlock(grad, begin, len, g_buf);
    const float* ps = LoadBlock(param, begin, len, p_buf);
    float* out = DestBlock(param, begin, p_buf);
    const int64_t qb = begin / kQuantBlock;
    DequantizeBlocks(map, c + begin, a + qb, len, buf);
    SgdMomentumBlock(h, first, gs, ps, buf, out, len);
    StoreBlock(out, param, begin, len);
    if (args.model_copy.defined()) StoreBlock(out, args.model_copy, begin, len);
    QuantizeBlocks(map, buf, len, c + begin, a + qb);
  });
}

void Sgd8bitStepList(const std::vector<Sgd8bitParam>& params, const DeviceAmp::SgdHyper& h,
                     bool first, const Tensor& found_inf) {
  for (const Sgd8bitParam& p : params) {
    DeviceAmp::SgdHyper own = h;
    if (!p.weight_decay) own.weight_decay = 0;
    Sgd8bitStep(p.param, p.grad, p.codes, p.absmax, own, first,
                FusedArgs{found_inf, p.model_copy, Tensor()});
  }
}

}  // namespace

void SetFusedCoder(FusedCoder coder) { forced_coder.store(coder); }

FusedCoder ResolvedFusedCoder() {
  const FusedCoder forced = forced_coder.load();
  if (forced != FusedCoder::kAuto) return forced;
#ifdef AMPD_QUANT_X86
  // The hardware decides, not UseAvx512Kernels(): tests flip that at will.
  static const FusedCoder timed =
      HasQuantPath(QuantPath::kAvx512Vbmi) ? TimeFusedCoders() : FusedCoder::kSearch;
  return timed;
#else
  return FusedCoder::kSearch;
#endif
}

const char* FusedCoderName(FusedCoder coder) {
  switch (coder) {
    case FusedCoder::kSearch:
      return "vbmi-search";
    case FusedCoder::kGather:
      return "table-gather";
    default:
      return "auto";
  }
}

AMPD_REGISTER_KERNEL(AdamW8bitStepKernel, Device::kCpu, AdamW8bitStep);
AMPD_REGISTER_KERNEL(AdamW8bitStepListKernel, Device::kCpu, AdamW8bitStepList);
AMPD_REGISTER_KERNEL(Sgd8bitStepKernel, Device::kCpu, Sgd8bitStep);
AMPD_REGISTER_KERNEL(Sgd8bitStepListKernel, Device::kCpu, Sgd8bitStepList);

}  // namespace ampd::engine::cpu
