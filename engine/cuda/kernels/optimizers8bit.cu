// The 8-bit optimizer steps (bitsandbytes' blockwise method,
// backend/quant_map.h): one thread block per quantization block of 256
// values, one value per thread. Each dequantizes its value, runs the f32
// update, the block takes the new absmax of each state, and each thread
// re-quantizes to the nearest code by binary search over the map in shared
// memory. The f32 math is the CPU's (cpu/optimizer_math.h) operation for
// operation, with round-to-nearest intrinsics so that nvcc fuses nothing
// into FMAs: the codes then equal the CPU's bit for bit (the bias
// corrections' f64 pow may differ by an ulp from the host's, which changes
// the f32 constants only in rare cases).

#include "engine/cuda/kernels/kernel_util.h"

namespace ampd::engine::cuda {
namespace {

using namespace kernel_util;  // NOLINT: the kernels' shared vocabulary

constexpr int kQuantBlock = 256;
static_assert(kThreads == kQuantBlock, "one thread per value of a quantization block");

// backend::NearestCode: the first value >= x, then the nearer of it and its
// predecessor, ties to the smaller code.
__device__ __forceinline__ uint8_t NearestCode(const float* map, float x) {
  int lo = 0, hi = 256;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (map[mid] < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return 0;
  if (lo == 256) return 255;
  return static_cast<uint8_t>(__fsub_rn(x, map[lo - 1]) <= __fsub_rn(map[lo], x) ? lo - 1 : lo);
}

// The block's new absmax of `value` (thread 0 stores it), then this thread's code.
__device__ __forceinline__ void Requantize(const float* map, float value, bool valid,
                                           uint8_t* codes, float* absmax, int64_t qb, int64_t i) {
  const float m = BlockMax(valid ? fabsf(value) : 0.0f);
  if (threadIdx.x == 0) absmax[qb] = m;
  if (valid) codes[i] = NearestCode(map, m == 0 ? 0.0f : __fmul_rn(value, __fdiv_rn(1.0f, m)));
}

__device__ __forceinline__ void LoadMaps(const float* maps, float* first, float* second) {
  first[threadIdx.x] = maps[threadIdx.x];
  if (second) second[threadIdx.x] = maps[kQuantBlock + threadIdx.x];
  __syncthreads();
}

// The AdamW update's f32 constants for a step (bitsandbytes' form, as the
// CPU's 8-bit step: AdamWBlockMath::Form::kBitsandbytes): the bias
// corrections folded into the step size and eps, one division a value.
struct AdamW8bitConstants {
  float step_size, eps, decay, one_minus_beta1, one_minus_beta2;
};

__device__ __forceinline__ AdamW8bitConstants AdamW8bitConstantsFor(const AdamWArgs& a,
                                                                    const float* step_ptr,
                                                                    float weight_decay) {
  const int64_t step = step_ptr ? static_cast<int64_t>(*step_ptr) + 1 : a.step;
  const double bc1 = 1.0 - pow(static_cast<double>(a.beta1), static_cast<double>(step));
  const double bc2_sqrt = sqrt(1.0 - pow(static_cast<double>(a.beta2), static_cast<double>(step)));
  return {static_cast<float>(static_cast<double>(a.lr) * bc2_sqrt / bc1),
          static_cast<float>(static_cast<double>(a.eps) * bc2_sqrt),
          __fsub_rn(1.0f, __fmul_rn(a.lr, weight_decay)), __fsub_rn(1.0f, a.beta1),
          __fsub_rn(1.0f, a.beta2)};
}

// Quantization blocks first, first + stride, ... of one tensor of n values,
// a block's values one a thread: decode, update, new absmax, re-code.
__device__ void AdamW8bitBlocks(void* param, int pdt, const void* grad, int gdt,
                                uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                                float* v_absmax, int64_t n, const AdamWArgs& a,
                                const AdamW8bitConstants& c, void* model_copy, int mdt,
                                const float* signed_map, const float* unsigned_map, int64_t first,
                                int64_t stride) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  for (int64_t qb = first; qb < blocks; qb += stride) {
    const int64_t i = qb * kQuantBlock + threadIdx.x;
    const bool valid = i < n;
    float m = 0, v = 0;
    if (valid) {
      const float g = Load<float>(grad, gdt, i);
      m = __fmul_rn(signed_map[m_codes[i]], m_absmax[qb]);
      v = __fmul_rn(unsigned_map[v_codes[i]], v_absmax[qb]);
      m = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(c.one_minus_beta1, g));
      v = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
      const float ratio = __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), c.eps));
      const float p = Load<float>(param, pdt, i);
      Store<float>(param, pdt, i, __fsub_rn(__fmul_rn(p, c.decay), __fmul_rn(c.step_size, ratio)));
      if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
    }
    // Every thread has read this block's absmax values before they change.
    Requantize(signed_map, m, valid, m_codes, m_absmax, qb, i);
    Requantize(unsigned_map, v, valid, v_codes, v_absmax, qb, i);
  }
}

__global__ void AdamW8bitStepKernel(void* param, int pdt, const void* grad, int gdt,
                                    uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                                    float* v_absmax, int64_t n, AdamWArgs a, const float* step_ptr,
                                    const float* found_inf, void* model_copy, int mdt,
                                    const float* maps) {
  if (found_inf && *found_inf != 0.0f) return;  // skipped step: nothing changes
  __shared__ float signed_map[kQuantBlock];
  __shared__ float unsigned_map[kQuantBlock];
  LoadMaps(maps, signed_map, unsigned_map);
  AdamW8bitBlocks(param, pdt, grad, gdt, m_codes, m_absmax, v_codes, v_absmax, n, a,
                  AdamW8bitConstantsFor(a, step_ptr, a.weight_decay), model_copy, mdt, signed_map,
                  unsigned_map, blockIdx.x, gridDim.x);
}

using ParamBlocks = BlockMap<kMaxParamsPerStepLaunch>;

// The list's tensor t takes the blocks `map` gives it (shared out by size, as
// the 32-bit AdamWStepListKernel's) and runs AdamW8bitStepKernel's blocks
// over them: the same arithmetic, so the same bits.
__global__ void AdamW8bitStepListKernel(AdamW8bitList list, ParamBlocks map, AdamWArgs a,
                                        const float* step_ptr, const float* found_inf,
                                        const float* maps) {
  if (found_inf && *found_inf != 0.0f) return;
  __shared__ float signed_map[kQuantBlock];
  __shared__ float unsigned_map[kQuantBlock];
  LoadMaps(maps, signed_map, unsigned_map);
  int64_t blocks, block;
  const int t = TensorOfBlock(map, &blocks, &block);
  AdamW8bitBlocks(list.param[t], list.pdt[t], list.grad[t], list.gdt[t], list.m_codes[t],
                  list.m_absmax[t], list.v_codes[t], list.v_absmax[t], list.numel[t], a,
                  AdamW8bitConstantsFor(a, step_ptr, list.decay[t] ? a.weight_decay : 0.0f),
                  list.model_copy[t], list.mdt[t], signed_map, unsigned_map, block, blocks);
}

// SGD's quantization blocks first, first + stride, ... of one tensor.
__device__ void Sgd8bitBlocks(void* param, int pdt, const void* grad, int gdt, uint8_t* codes,
                              float* absmax, int64_t n, const SgdArgs& a, float weight_decay,
                              void* model_copy, int mdt, const float* signed_map, int64_t first,
                              int64_t stride) {
  const int64_t blocks = (n + kQuantBlock - 1) / kQuantBlock;
  for (int64_t qb = first; qb < blocks; qb += stride) {
    const int64_t i = qb * kQuantBlock + threadIdx.x;
    const bool valid = i < n;
    float buf = 0;
    if (valid) {
      const float p = Load<float>(param, pdt, i);
      float d = __fadd_rn(Load<float>(grad, gdt, i), __fmul_rn(weight_decay, p));
      buf = a.first ? d : __fadd_rn(__fmul_rn(a.momentum, __fmul_rn(signed_map[codes[i]], absmax[qb])), d);
      d = a.nesterov ? __fadd_rn(d, __fmul_rn(a.momentum, buf)) : buf;
      Store<float>(param, pdt, i, __fsub_rn(p, __fmul_rn(a.lr, d)));
      if (model_copy) Store<float>(model_copy, mdt, i, Load<float>(param, pdt, i));
    }
    Requantize(signed_map, buf, valid, codes, absmax, qb, i);
  }
}

__global__ void Sgd8bitStepKernel(void* param, int pdt, const void* grad, int gdt, uint8_t* codes,
                                  float* absmax, int64_t n, SgdArgs a, const float* found_inf,
                                  void* model_copy, int mdt, const float* maps) {
  if (found_inf && *found_inf != 0.0f) return;
  __shared__ float signed_map[kQuantBlock];
  LoadMaps(maps, signed_map, nullptr);
  Sgd8bitBlocks(param, pdt, grad, gdt, codes, absmax, n, a, a.weight_decay, model_copy, mdt,
                signed_map, blockIdx.x, gridDim.x);
}

__global__ void Sgd8bitStepListKernel(Sgd8bitList list, ParamBlocks map, SgdArgs a,
                                      const float* found_inf, const float* maps) {
  if (found_inf && *found_inf != 0.0f) return;
  __shared__ float signed_map[kQuantBlock];
  LoadMaps(maps, signed_map, nullptr);
  int64_t blocks, block;
  const int t = TensorOfBlock(map, &blocks, &block);
  Sgd8bitBlocks(list.param[t], list.pdt[t], list.grad[t], list.gdt[t], list.codes[t],
                list.absmax[t], list.numel[t], a, list.decay[t] ? a.weight_decay : 0.0f,
                list.model_copy[t], list.mdt[t], signed_map, block, blocks);
}

int QuantGrid(int64_t n) {
  return static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((n + kQuantBlock - 1) / kQuantBlock, int64_t{65535} * 8)));
}

}  // namespace

std::string LaunchAdamW8bitStep(void* param, int pdt, const void* grad, int gdt,
                                uint8_t* m_codes, float* m_absmax, uint8_t* v_codes,
                                float* v_absmax, int64_t n, const AdamWArgs& a,
                                const float* step_ptr, const float* found_inf, void* model_copy,
                                int mdt, const float* maps, Stream s) {
  if (n == 0) return "";
  LAUNCH(AdamW8bitStepKernel, QuantGrid(n), kThreads, S(s), param, pdt, grad, gdt, m_codes,
         m_absmax, v_codes, v_absmax, n, a, step_ptr, found_inf, model_copy, mdt, maps);
  return Check("AdamW8bitStepKernel");
}

std::string LaunchAdamW8bitStepList(const AdamW8bitList& list, const AdamWArgs& a,
                                    const float* step_ptr, const float* found_inf,
                                    const float* maps, Stream s) {
  if (list.count == 0) return "";
  static_assert(sizeof(AdamW8bitList) + sizeof(ParamBlocks) + sizeof(AdamWArgs) +
                        3 * sizeof(void*) <=
                    4096,
                "a kernel's parameters fit CUDA's 4 KiB");
  // At most kMaxReduceBlocks blocks in all (each then takes four or more
  // quantization blocks of its tensor in turn): enough to fill a GPU.
  const ParamBlocks map = BlocksBySize<kMaxParamsPerStepLaunch>(list.numel, list.count);
  LAUNCH(AdamW8bitStepListKernel, map.first[list.count], kThreads, S(s), list, map, a, step_ptr,
         found_inf, maps);
  return Check("AdamW8bitStepListKernel");
}

std::string LaunchSgd8bitStep(void* param, int pdt, const void* grad, int gdt, uint8_t* codes,
                              float* absmax, int64_t n, const SgdArgs& a, const float* found_inf,
                              void* model_copy, int mdt, const float* maps, Stream s) {
  if (n == 0) return "";
  LAUNCH(Sgd8bitStepKernel, QuantGrid(n), kThreads, S(s), param, pdt, grad, gdt, codes, absmax, n,
         a, found_inf, model_copy, mdt, maps);
  return Check("Sgd8bitStepKernel");
}

std::string LaunchSgd8bitStepList(const Sgd8bitList& list, const SgdArgs& a,
                                  const float* found_inf, const float* maps, Stream s) {
  if (list.count == 0) return "";
  static_assert(sizeof(Sgd8bitList) + sizeof(ParamBlocks) + sizeof(SgdArgs) + 2 * sizeof(void*) <=
                    4096,
                "a kernel's parameters fit CUDA's 4 KiB");
  const ParamBlocks map = BlocksBySize<kMaxParamsPerStepLaunch>(list.numel, list.count);
  LAUNCH(Sgd8bitStepListKernel, map.first[list.count], kThreads, S(s), list, map, a, found_inf,
         maps);
  return Check("Sgd8bitStepListKernel");
}

}  // namespace ampd::engine::cuda
