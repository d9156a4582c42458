// cuBLASLt GEMMs for row-major tensors. cuBLASLt is column-major: a row-major
// C[m,n] is a column-major C^T[n,m], and C^T = op(B)^T op(A)^T, so each call
// passes B as cuBLASLt's "A" and A as its "B". The bias of an epilogue then
// runs along cuBLASLt's rows, i.e. our n (output features), as a Linear needs.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <tuple>

#include "engine/cuda/gemm.h"

namespace ampd::engine::cuda {
namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

cudaDataType_t DataType(int dt) {
  switch (dt) {
    case kGemmE4M3:
      return CUDA_R_8F_E4M3;
    case kGemmE5M2:
      return CUDA_R_8F_E5M2;
    case 1:
      return CUDA_R_16F;
    case 2:
      return CUDA_R_16BF;
    case 3:
      return CUDA_R_64F;
    default:
      return CUDA_R_32F;
  }
}

cublasLtEpilogue_t ToLt(Epilogue e) {
  switch (e) {
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAuxBias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kDGeluBgrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::kNone:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

std::string LtError(const char* call, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return "";
  return std::string(call) + ": " + cublasLtGetStatusName(s) + " (" + cublasLtGetStatusString(s) +
         ")";
}

#define LT_RETURN_IF_ERROR(call)             \
  do {                                       \
    std::string e_ = LtError(#call, (call)); \
    if (!e_.empty()) return e_;              \
  } while (0)

using PlanKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int, int, bool, int>;

bool IsFp8(int dt) { return dt == kGemmE4M3 || dt == kGemmE5M2; }
int BType(const GemmArgs& g) { return g.b_dtype < 0 ? g.ab_dtype : g.b_dtype; }

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
  bool f64 = false;
};

}  // namespace

struct GemmRunner::State {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::string init_error;
  std::map<PlanKey, Plan> plans;
  // Problems cuBLASLt has no algorithm for, with the reason: asked once.
  std::map<PlanKey, std::string> refused;
};

GemmRunner& GemmRunner::ForThisThread() {
  static thread_local GemmRunner runner;
  return runner;
}

GemmRunner::GemmRunner() : state_(new State) {
  state_->init_error = LtError("cublasLtCreate", cublasLtCreate(&state_->handle));
  if (state_->init_error.empty()) {
    cudaError_t err = cudaMalloc(&state_->workspace, kWorkspaceBytes);
    if (err != cudaSuccess) {
      state_->init_error = std::string("cudaMalloc(GEMM workspace): ") + cudaGetErrorString(err);
    }
  }
}

GemmRunner::~GemmRunner() {
  for (auto& [key, p] : state_->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
  }
  if (state_->workspace) cudaFree(state_->workspace);
  if (state_->handle) cublasLtDestroy(state_->handle);
  delete state_;
}

int GemmRunner::cached_plans() const { return static_cast<int>(state_->plans.size()); }

// The cached plan for this problem, built (and the heuristic asked) on first
// use; "" or why cuBLASLt cannot run it.
std::string GemmRunner::FindPlan(const GemmArgs& g, void** plan) {
  if (!state_->init_error.empty()) return state_->init_error;
  const PlanKey key{g.m,        g.n,      g.k,       g.trans_a,    g.trans_b,
                    g.ab_dtype, BType(g), g.c_dtype, g.allow_tf32, static_cast<int>(g.epilogue)};
  if (IsFp8(g.ab_dtype) != IsFp8(BType(g))) return "an FP8 GEMM needs FP8 codes for A and B";
  auto it = state_->plans.find(key);
  if (it != state_->plans.end()) {
    *plan = &it->second;
    return "";
  }
  if (auto r = state_->refused.find(key); r != state_->refused.end()) return r->second;
  Plan p;
  p.f64 = g.ab_dtype == 3;
  const cublasComputeType_t compute = p.f64 ? CUBLAS_COMPUTE_64F
                                      : (g.ab_dtype == 0 && g.allow_tf32)
                                          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F;
  LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p.desc, compute, p.f64 ? CUDA_R_64F : CUDA_R_32F));
  // cuBLASLt's A is our B, its B our A (see the top of the file).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const cublasLtEpilogue_t epi = ToLt(g.epilogue);
  LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (g.epilogue != Epilogue::kNone && g.epilogue != Epilogue::kBias) {
    const int64_t ld = g.n;
    LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                      &ld, sizeof(ld)));
  }
  // Stored (pre-op) shapes, column-major.
  // (cuBLASLt's A is our B: its type is B's.)
  const cudaDataType_t lt_a = DataType(BType(g)), lt_b = DataType(g.ab_dtype),
                       c = DataType(g.c_dtype);
  LT_RETURN_IF_ERROR(g.trans_b ? cublasLtMatrixLayoutCreate(&p.a, lt_a, g.k, g.n, g.k)
                               : cublasLtMatrixLayoutCreate(&p.a, lt_a, g.n, g.k, g.n));
  LT_RETURN_IF_ERROR(g.trans_a ? cublasLtMatrixLayoutCreate(&p.b, lt_b, g.m, g.k, g.m)
                               : cublasLtMatrixLayoutCreate(&p.b, lt_b, g.k, g.m, g.k));
  LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p.c, c, g.n, g.m, g.n));
  cublasLtMatmulPreference_t pref = nullptr;
  LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(state_->handle, p.desc, p.a, p.b, p.c,
                                                           p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
    std::string why = "cublasLtMatmulAlgoGetHeuristic(m=" + std::to_string(g.m) +
                      ", n=" + std::to_string(g.n) + ", k=" + std::to_string(g.k) + "): " +
                      (hs != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(hs)
                                                   : "no algorithm for this shape and epilogue");
    state_->refused.emplace(key, why);
    return why;
  }
  p.algo = result.algo;
  it = state_->plans.emplace(key, p).first;
  *plan = &it->second;
  return "";
}

bool GemmRunner::HasAlgorithm(const GemmArgs& args) {
  void* plan = nullptr;
  return FindPlan(args, &plan).empty();
}

std::string GemmRunner::Run(const GemmArgs& g, void* stream) {
  if (!state_->init_error.empty()) return state_->init_error;
  if (g.m == 0 || g.n == 0) return "";
  void* found = nullptr;
  if (std::string e = FindPlan(g, &found); !e.empty()) return e;
  Plan& p = *static_cast<Plan*>(found);
  // Per-call pointers live in the (per-thread) descriptor.
  if (IsFp8(g.ab_dtype)) {
    // cuBLASLt takes a missing scale as 1; ours are always the tensors'
    // scale_inv, so a missing one is a bug to report, not a silent 1.
    if (g.a_scale == nullptr || g.b_scale == nullptr) {
      return "an FP8 GEMM needs both decode scales (GemmArgs::a_scale, b_scale)";
    }
    LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &g.b_scale, sizeof(g.b_scale)));
    LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &g.a_scale, sizeof(g.a_scale)));
  }
  if (g.epilogue != Epilogue::kNone) {
    const void* bias = g.epilogue == Epilogue::kDGeluBgrad ? g.bias_grad : g.bias;
    if (g.epilogue != Epilogue::kDGelu) {
      LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &bias, sizeof(bias)));
    }
    if (g.epilogue != Epilogue::kBias) {
      LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof(g.aux)));
    }
  }
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const void* alpha = p.f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = p.f64 ? static_cast<const void*>(&beta64) : &beta32;
  return LtError("cublasLtMatmul",
                 cublasLtMatmul(state_->handle, p.desc, alpha, g.b, p.a, g.a, p.b, beta, g.c, p.c,
                                g.c, p.c, &p.algo, state_->workspace, kWorkspaceBytes,
                                static_cast<cudaStream_t>(stream)));
}

}  // namespace ampd::engine::cuda
