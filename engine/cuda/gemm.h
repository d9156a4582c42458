#ifndef AMPD_ENGINE_CUDA_GEMM_H_
#define AMPD_ENGINE_CUDA_GEMM_H_

// Row-major GEMMs through cuBLASLt (gemm.cu): C[m,n] = op(A)[m,k] @ op(B)[k,n].
// f16/bf16 inputs use tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F);
// f32 inputs accumulate in f32 with TF32 off unless allow_tf32 (PyTorch's
// default for matmul since 1.12); f64 in f64. The algorithm is chosen once per
// shape by cuBLASLt's heuristic and cached; a 32 MiB workspace is shared by a
// thread's GEMMs.

#include <cstdint>
#include <string>

namespace ampd::engine::cuda {

enum class Epilogue {
  kNone,
  kBias,         // C += bias[n] (bias in C's dtype)
  kGeluAuxBias,  // pre = AB + bias -> aux; C = gelu(pre)
  kDGelu,        // C = (AB) * gelu'(aux)      (backward through a GELU)
  kDGeluBgrad,   // as kDGelu, and bias_grad[n] = sum over rows of C
};

// FP8 operands (u8 codes) in GemmArgs' ab_dtype / b_dtype: not engine
// DTypes (a code tensor is u8 with a format beside it).
constexpr int kGemmE4M3 = 16;
constexpr int kGemmE5M2 = 17;

struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  int ab_dtype = 0;  // engine::DType values: 0 f32, 1 f16, 2 bf16, 3 f64; or kGemmE4M3/E5M2
  int b_dtype = -1;  // B's when it differs from A's (FP8: E5M2 gradients x E4M3); -1: ab_dtype
  int c_dtype = 0;
  // FP8 only (and then required): device pointers to A's and B's decode
  // scales (f32, the FP8 tensors' scale_inv): C = a_scale * b_scale * A B.
  // cuBLASLt's FP8 GEMMs are "TN" on Hopper: trans_a false, trans_b true
  // (both operands K-contiguous), k and n multiples of 16.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool allow_tf32 = false;
  Epilogue epilogue = Epilogue::kNone;
  const void* bias = nullptr;  // [n]
  void* aux = nullptr;         // [m, n], C's dtype
  void* bias_grad = nullptr;   // [n], C's dtype
};

// One per thread (handles and cached plans are not shared across threads).
class GemmRunner {
 public:
  static GemmRunner& ForThisThread();
  // "" on success, else the failing cuBLASLt call and its status.
  std::string Run(const GemmArgs& args, void* stream);
  // Whether cuBLASLt has an algorithm for this problem (shape, types,
  // epilogue); its heuristic is asked once per problem, the answer kept.
  bool HasAlgorithm(const GemmArgs& args);
  int cached_plans() const;

  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;
  ~GemmRunner();

 private:
  GemmRunner();
  std::string FindPlan(const GemmArgs& args, void** plan);
  struct State;
  State* state_;
};

}  // namespace ampd::engine::cuda

#endif  // AMPD_ENGINE_CUDA_GEMM_H_
