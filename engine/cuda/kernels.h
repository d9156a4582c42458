#ifndef AMPD_ENGINE_CUDA_KERNELS_H_
#define AMPD_ENGINE_CUDA_KERNELS_H_

// Launchers for the CUDA backend's kernels (kernels/<family>.cu). Plain C++: pointers
// are device pointers, `dt` codes are engine::DType's values (0 f32, 1 f16,
// 2 bf16, 3 f64), `stream` is a cudaStream_t. Every kernel computes in f32
// (f64 when a tensor is f64) and rounds once on store, like the CPU backend;
// each is named for what it computes and tested against the CPU backend in
// tests/engine/cuda/cuda_backend_test.cc. A launcher returns "" or the launch
// error with the kernel's name.

#include <cstdint>
#include <string>

#include "engine/ops/op_list.h"
#include "engine/ops/pool_window.h"

namespace ampd::engine::cuda {

using engine::OpId;

using Stream = void*;

// Scratch the reductions need: partial sums, one double per block.
constexpr int kMaxReduceBlocks = 1024;

std::string LaunchFill(void* y, int dt, int64_t n, double value, Stream s);
std::string LaunchConvert(const void* x, int xdt, void* y, int ydt, int64_t n, Stream s);
// op: one of the unary family (engine::ops::IsUnaryOp); any other is refused.
std::string LaunchUnary(OpId op, const void* x, int xdt, void* y, int ydt, int64_t n, Stream s);
std::string LaunchUnaryBackward(OpId op, const void* x, int xdt, const void* dy, int gdt, void* dx,
                                int64_t n, Stream s);
// op: one of the binary family (engine::ops::IsBinaryOp). b has n elements, 1 (scalar), or bn (a
// row broadcast over the last dim).
std::string LaunchBinary(OpId op, const void* a, int adt, const void* b, int bdt, int64_t bn,
                         void* y, int ydt, int64_t n, Stream s);
std::string LaunchScale(const void* x, int xdt, double factor, void* y, int ydt, int64_t n,
                        Stream s);
// x += alpha * y, in place.
std::string LaunchAddInPlace(void* x, int xdt, const void* y, int ydt, double alpha, int64_t n,
                             Stream s);
// out[0] = sum(x) in f64, deterministic (fixed blocks, fixed combine order).
std::string LaunchSumAll(const void* x, int xdt, int64_t n, double* scratch, void* out, int odt,
                         Stream s);
// Sums over rows ([rows, cols] -> [cols]) run in two passes, for
// parallelism (one thread per column alone would leave a GPU idle for a
// 768-wide bias): f64 partial sums over chunks of rows per column into
// `scratch`, then each column's partials in chunk order: a fixed order, the
// same bits every run. ColumnSumScratch(rows, cols) doubles of scratch.
int64_t ColumnSumScratch(int64_t rows, int64_t cols);
// out[c] = sum over rows of x[r, c], f64 accumulation.
std::string LaunchSumRows(const void* x, int xdt, int64_t rows, int64_t cols, double* scratch,
                          void* out, int odt, Stream s);
std::string LaunchSoftmax(const void* x, int xdt, int64_t rows, int64_t cols, bool log, void* y,
                          int ydt, Stream s);
std::string LaunchSoftmaxBackward(const void* y, int ydt, const void* dy, int gdt, int64_t rows,
                                  int64_t cols, bool log, void* dx, int odt, Stream s);
// mean/rstd: f32 (f64 for f64 x), one per row.
std::string LaunchLayerNorm(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                            int64_t rows, int64_t cols, double eps, void* y, int ydt, void* mean,
                            void* rstd, int sdt, Stream s);
std::string LaunchLayerNormBackward(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t rows, int64_t cols, void* dx, void* dgamma,
                                    void* dbeta, double* scratch, Stream s);
// (scratch: 2 * ColumnSumScratch(rows, cols) doubles, for dgamma and dbeta.)
// 2-D pooling over `planes` (N*C) planes of h x w into oh x ow (pool_window.h).
std::string LaunchPool2d(const void* x, int xdt, int64_t planes, int64_t h, int64_t w,
                         const ops::Pool2dGeometry& g, int64_t oh, int64_t ow, void* y, int ydt,
                         Stream s);
// dx (x's dtype) gathered per input element from the outputs covering it.
std::string LaunchPool2dBackward(const void* x, int xdt, const void* dy, int dydt, int64_t planes,
                                 int64_t h, int64_t w, const ops::Pool2dGeometry& g, int64_t oh,
                                 int64_t ow, void* dx, Stream s);
// Batch norm over [n, c, inner]; running stats (rdt) updated in place when
// training; mean/rstd per channel in sdt (f32, f64 for f64 x).
std::string LaunchBatchNorm(const void* x, int xdt, const void* gamma, int gdt, const void* beta,
                            int64_t n, int64_t c, int64_t inner, void* running_mean,
                            void* running_var, int rdt, bool training, double momentum, double eps,
                            void* y, int ydt, void* mean, void* rstd, int sdt, Stream s);
// dx in xdt, dgamma/dbeta in gdt.
std::string LaunchBatchNormBackward(const void* x, int xdt, const void* gamma, int gdt,
                                    const void* mean, const void* rstd, int sdt, const void* dy,
                                    int dydt, int64_t n, int64_t c, int64_t inner, bool training,
                                    void* dx, void* dgamma, void* dbeta, Stream s);
// Per-row loss lse - x[label] into row_loss (f64) and the row logsumexp (f32 or
// f64); the probabilities are never stored. Then the mean over rows into out.
std::string LaunchSoftmaxCrossEntropy(const void* logits, int dt, const int32_t* labels,
                                      int64_t rows, int64_t cols, void* lse, int ldt,
                                      double* row_loss, double* scratch, void* out, int odt,
                                      Stream s);
// dx = (softmax - onehot) * dloss[0] / rows, with dloss read on the device.
std::string LaunchSoftmaxCrossEntropyBackward(const void* logits, int dt, const int32_t* labels,
                                              const void* lse, int ldt, int64_t rows, int64_t cols,
                                              const void* dloss, int ddt, void* dx, Stream s);
std::string LaunchEmbedding(const void* table, int dt, const int32_t* ids, int64_t n, int64_t dim,
                            void* y, Stream s);
// dtable [rows, dim] (dt) = the sum of dy's rows per id, f64 accumulation
// in row order, one block per distinct id. groups (on the device): the
// `distinct` ids, then distinct + 1 offsets into the positions, then the
// positions (the dy rows of each id, ascending): GroupIds in embedding.cc.
std::string LaunchEmbeddingBackward(const void* dy, int dt, const int32_t* groups, int64_t distinct,
                                    int64_t dim, int64_t rows, void* dtable, Stream s);
std::string LaunchDropout(const void* x, int dt, double p, uint64_t seed, void* y, int64_t n,
                          Stream s);

// FP8 (kernels/fp8.cu; format 0 E4M3, 1 E5M2): codes = FP8(x * scales[index]),
// saturating, and *recorded_amax = max(itself, max |x|), reduced through
// `scratch` (kMaxReduceBlocks floats); decode * scale_invs[index] into y; the
// scaling update of a [len, n] amax history (algo: core::AmaxAlgo).
// `saturated` may be null (no count).
std::string LaunchFp8Cast(const void* x, int dt, int64_t n, int format, const float* scales,
                          int64_t index, float* recorded_amax, double* saturated, uint8_t* codes,
                          double* scratch, Stream s);
std::string LaunchFp8Decode(const uint8_t* codes, int64_t n, int format, const float* scale_invs,
                            int64_t index, void* y, int ydt, Stream s);
std::string LaunchFp8UpdateScaling(float* history, int64_t len, int64_t n, float* scales,
                                   float* scale_invs, const float* scaled_max, int algo, Stream s);
// LaunchFp8Cast of x [rows, cols] that also writes codes_t [cols, rows], the
// codes transposed, in the same pass.
std::string LaunchFp8CastTranspose(const void* x, int dt, int64_t rows, int64_t cols, int format,
                                   const float* scales, int64_t index, float* recorded_amax,
                                   double* saturated, uint8_t* codes, uint8_t* codes_t,
                                   double* scratch, Stream s);

// Fused causal self-attention over qkv [B*T, 3C] (q, k, v side by side; H
// heads of D = C / H <= kMaxAttentionHeadDim) into y [B*T, C] (qkv's dtype)
// and the rows' logsumexp [B, H, T] (f32 or f64 by sdt). dropout_p > 0
// drops probabilities by backend::AttentionDropout's mask of dropout_seed.
constexpr int kMaxAttentionHeadDim = 256;
std::string LaunchCausalAttention(const void* qkv, int dt, int64_t B, int64_t T, int64_t C,
                                  int64_t H, double dropout_p, uint64_t dropout_seed, void* y,
                                  void* lse, int sdt, Stream s);
// Which tensor-core kernels the flash attention forward and backward take
// for f16 and bf16 (head sizes 16, 32, 48, 64): WMMA's (the default: they
// passed the GPU suite on an H200) or mma.sync's (flash attention 2's form,
// checked on the emulator only; the default once they have passed on a GPU).
// AMPD_CUDA_FLASH_ATTENTION=mma in the environment picks mma.sync's at
// start-up; tests and gpu_bench set it directly.
enum class FlashKernels { kWmma, kMma };
void SetFlashKernels(FlashKernels kernels);
FlashKernels GetFlashKernels();
// Generation's attention against a KV cache (backend/kernels/attention.h's
// CachedAttentionKernel): qkv [B*n, 3C] of n new rows at [past, past + n),
// their k, v appended to k_cache, v_cache [B, max_len, E], y [B*n, E].
std::string LaunchCachedAttention(const void* qkv, int dt, int64_t B, int64_t n, int64_t E,
                                  int64_t H, int64_t max_len, int64_t past, void* k_cache,
                                  void* v_cache, void* y, Stream s);
// dqkv [B*T, 3C] from the forward's y and lse and dy (all of qkv's dtype
// dt) and its dropout; delta: B * H * T values of scratch, f32 (f64 for f64).
std::string LaunchCausalAttentionBackward(const void* qkv, const void* y, const void* dy, int dt,
                                          const void* lse, int sdt, int64_t B, int64_t T, int64_t C,
                                          int64_t H, double dropout_p, uint64_t dropout_seed,
                                          void* delta, void* dqkv, Stream s);

// --- AMP and optimizers.
// Up to kMaxTensorsPerLaunch tensors per launch; callers split longer lists.
constexpr int kMaxTensorsPerLaunch = 48;
struct TensorList {
  int count = 0;
  void* ptr[kMaxTensorsPerLaunch];
  int64_t numel[kMaxTensorsPerLaunch];
  int dt[kMaxTensorsPerLaunch];
};
// g *= (float)(1.0 / scale[0]) for every tensor; found_inf[0] = 1 on inf/NaN.
std::string LaunchUnscaleAndCheck(const TensorList& grads, const float* scale, float* found_inf,
                                  Stream s);
// Non-finite check with a host-given factor (gradient clipping): flags found_inf.
std::string LaunchMultiplyAndCheck(const TensorList& grads, float factor, float* found_inf,
                                   Stream s);
// Gradient clipping on the device: factor[0] = backend::ClipFactor(sum_sq[0],
// max_norm) (1: nothing to clip), then per list g *= factor[0], flagging
// found_inf, or nothing at all where factor[0] is 1.
std::string LaunchClipFactor(const float* sum_sq, double max_norm, float* factor, Stream s);
std::string LaunchMultiplyByDeviceFactorAndCheck(const TensorList& grads, const float* factor,
                                                 float* found_inf, Stream s);
// torch._amp_update_scale_ in one thread, then the bounds (0: none).
std::string LaunchUpdateScale(float* scale, float* growth_tracker, const float* found_inf,
                              double growth_factor, double backoff_factor, int64_t growth_interval,
                              double min_scale, double max_scale, Stream s);
// Sum of squares of all tensors: partials into scratch (f64, kMaxReduceBlocks
// per call), then combined in order into out[0] (f32 or f64 by odt). When
// accumulate, adds to the f64 value already in scratch[kMaxReduceBlocks].
std::string LaunchSumOfSquares(const TensorList& tensors, double* scratch, bool accumulate,
                               void* out, int odt, Stream s);
struct SgdArgs {
  float lr, momentum, weight_decay;
  bool nesterov, first;
};
// param (f32 or the param's dtype) updated in place; skip when found_inf &&
// *found_inf != 0; model_copy (may be null) gets the result rounded to mdt.
std::string LaunchSgdStep(void* param, int pdt, const void* grad, int gdt, float* momentum,
                          int64_t n, const SgdArgs& a, const float* found_inf, void* model_copy,
                          int mdt, Stream s);
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // used when step_ptr is null
};
// Bias correction from step_ptr[0] + 1 when step_ptr is given (device step).
std::string LaunchAdamWStep(void* param, int pdt, const void* grad, int gdt, float* exp_avg,
                            float* exp_avg_sq, int64_t n, const AdamWArgs& a, const float* step_ptr,
                            const float* found_inf, void* model_copy, int mdt, Stream s);
// AdamW over a list of parameters in one launch (the blocks shared out by
// size as the AMP lists'): each tensor's values get LaunchAdamWStep's
// arithmetic, bit for bit; weight decay (a.weight_decay) only where decay[t].
// model_copy[t] may be null; skip and device step as LaunchAdamWStep. Every
// buffer must start on a 16-byte boundary (AdamWListAccepts; the caching
// allocator's always do): others go to LaunchAdamWStep.
constexpr int kMaxParamsPerStepLaunch = 32;
struct AdamWList {
  int count = 0;
  void* param[kMaxParamsPerStepLaunch];
  const void* grad[kMaxParamsPerStepLaunch];
  float* exp_avg[kMaxParamsPerStepLaunch];
  float* exp_avg_sq[kMaxParamsPerStepLaunch];
  void* model_copy[kMaxParamsPerStepLaunch];
  int64_t numel[kMaxParamsPerStepLaunch];
  int8_t pdt[kMaxParamsPerStepLaunch], gdt[kMaxParamsPerStepLaunch], mdt[kMaxParamsPerStepLaunch];
  bool decay[kMaxParamsPerStepLaunch];
};
bool AdamWListAccepts(const void* param, const void* grad, const float* exp_avg,
                      const float* exp_avg_sq, const void* model_copy);
std::string LaunchAdamWStepList(const AdamWList& list, const AdamWArgs& a, const float* step_ptr,
                                const float* found_inf, Stream s);

// The 8-bit steps (backend/kernels/optimizer8bit.h; kernels/optimizers8bit.cu):
// one block per quantization block of 256 values; `maps` (device, 512 f32)
// is the signed dynamic map then the unsigned one. Codes (u8) and absmax
// (f32, one per 256) are updated in place; skip, device step and model copy
// as LaunchAdamWStep.
std::string LaunchAdamW8bitStep(void* param, int pdt, const void* grad, int gdt, uint8_t* m_codes,
                                float* m_absmax, uint8_t* v_codes, float* v_absmax, int64_t n,
                                const AdamWArgs& a, const float* step_ptr, const float* found_inf,
                                void* model_copy, int mdt, const float* maps, Stream s);
// LaunchAdamW8bitStep over a list of tensors in one launch (blocks shared
// out by size, as LaunchAdamWStepList's): each tensor's codes, absmax values
// and weights bit for bit as its own launch would leave them; weight decay
// only where decay[t]; model_copy[t] may be null.
struct AdamW8bitList {
  int count = 0;
  void* param[kMaxParamsPerStepLaunch];
  const void* grad[kMaxParamsPerStepLaunch];
  uint8_t* m_codes[kMaxParamsPerStepLaunch];
  float* m_absmax[kMaxParamsPerStepLaunch];
  uint8_t* v_codes[kMaxParamsPerStepLaunch];
  float* v_absmax[kMaxParamsPerStepLaunch];
  void* model_copy[kMaxParamsPerStepLaunch];
  int64_t numel[kMaxParamsPerStepLaunch];
  int8_t pdt[kMaxParamsPerStepLaunch], gdt[kMaxParamsPerStepLaunch], mdt[kMaxParamsPerStepLaunch];
  bool decay[kMaxParamsPerStepLaunch];
};
std::string LaunchAdamW8bitStepList(const AdamW8bitList& list, const AdamWArgs& a,
                                    const float* step_ptr, const float* found_inf,
                                    const float* maps, Stream s);
std::string LaunchSgd8bitStep(void* param, int pdt, const void* grad, int gdt, uint8_t* codes,
                              float* absmax, int64_t n, const SgdArgs& a, const float* found_inf,
                              void* model_copy, int mdt, const float* maps, Stream s);
// LaunchSgd8bitStep over a list, as LaunchAdamW8bitStepList.
struct Sgd8bitList {
  int count = 0;
  void* param[kMaxParamsPerStepLaunch];
  const void* grad[kMaxParamsPerStepLaunch];
  uint8_t* codes[kMaxParamsPerStepLaunch];
  float* absmax[kMaxParamsPerStepLaunch];
  void* model_copy[kMaxParamsPerStepLaunch];
  int64_t numel[kMaxParamsPerStepLaunch];
  int8_t pdt[kMaxParamsPerStepLaunch], gdt[kMaxParamsPerStepLaunch], mdt[kMaxParamsPerStepLaunch];
  bool decay[kMaxParamsPerStepLaunch];
};
std::string LaunchSgd8bitStepList(const Sgd8bitList& list, const SgdArgs& a,
                                  const float* found_inf, const float* maps, Stream s);

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_KERNELS_H_
