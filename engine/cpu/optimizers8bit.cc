// The CPU's 8-bit optimizer steps (backend/kernels/optimizer8bit.h): a block
// of kBlock elements (kBlock / kQuantBlock quantization blocks) at a time,
// over the OpenMP pool. The f32 math is AdamWStep's / SgdStep's line for line,
// so an 8-bit step differs from a 32-bit one only by the states' rounding.
// The codes go through blockwise_quant (AVX-512 or AVX2 where the processor
// has it); AdamW decodes, updates and re-codes one quantization block at a
// time, so both states stay in L1 in between.
// The fused form's arguments are host tensors here: the skip flag and the
// step counter are read directly, and the model copy is written per block.
#include <algorithm>
#include <cmath>

#include "engine/backend/kernels/optimizer8bit.h"
#include "engine/backend/quant_map.h"
#include "engine/cpu/blockwise_quant.h"
#include "engine/cpu/cpu_backend_impl.h"
#include "engine/cpu/kernel_util.h"
#include "engine/cpu/optimizer_math.h"

namespace ampd::engine::cpu {
namespace {

using backend::AdamW8bitStepKernel;
using backend::DeviceAmp;
using backend::DynamicMap;
using backend::kQuantBlock;
using backend::Sgd8bitStepKernel;
using backend::UnsignedDynamicMap;

static_assert(kBlock % kQuantBlock == 0, "a CPU block holds whole quantization blocks");

using FusedArgs = DeviceAmp::FusedStepArgs;

bool Skipped(const FusedArgs& args) {
  return args.found_inf.defined() && args.found_inf.data<float>()[0] != 0.0f;
}

void AdamW8bitStep(const Tensor& param, const Tensor& grad, const Tensor& m_codes,
                   const Tensor& m_absmax, const Tensor& v_codes, const Tensor& v_absmax,
                   const DeviceAmp::AdamWHyper& hyper, const FusedArgs& args) {
  if (Skipped(args)) return;
  DeviceAmp::AdamWHyper h = hyper;
  if (args.step.defined()) h.step = static_cast<int64_t>(args.step.data<float>()[0]) + 1;
  const AdamWBlockMath math(h);
  uint8_t* mc = m_codes.data<uint8_t>();
  uint8_t* vc = v_codes.data<uint8_t>();
  float* ma = m_absmax.data<float>();
  float* va = v_absmax.data<float>();
  const auto& signed_map = DynamicMap();
  const auto& unsigned_map = UnsignedDynamicMap();
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

}  // namespace

AMPD_REGISTER_KERNEL(AdamW8bitStepKernel, Device::kCpu, AdamW8bitStep);
AMPD_REGISTER_KERNEL(Sgd8bitStepKernel, Device::kCpu, Sgd8bitStep);

}  // namespace ampd::engine::cpu
