// The CPU emulator's cuBLASLt (see include/cublasLt.h): a reference GEMM in
// cuBLASLt's column-major terms with its epilogues, queued on the stream like
// a kernel, behind the argument checks a real call makes.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cublasLt.h"
#include "engine/core/fp8.h"
#include "engine/core/half.h"

struct cublasLtContext {
  int magic = 0x4c74;
};
struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
  const float* a_scale = nullptr;  // FP8: null is 1
  const float* b_scale = nullptr;
};
struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
};

namespace {

bool IsFp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

size_t Size(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_8F_E4M3:
    case CUDA_R_8F_E5M2:
      return 1;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_64F:
      return 8;
    default:
      return 4;
  }
}

// FP8: the code's value, unscaled (the scale pointers multiply the product).
double Get(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_8F_E4M3:
      return ampd::engine::core::Fp8ToF32(static_cast<const uint8_t*>(p)[i],
                                          ampd::engine::core::Fp8Format::kE4M3);
    case CUDA_R_8F_E5M2:
      return ampd::engine::core::Fp8ToF32(static_cast<const uint8_t*>(p)[i],
                                          ampd::engine::core::Fp8Format::kE5M2);
    case CUDA_R_16F:
      return ampd::engine::core::F16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_16BF:
      return ampd::engine::core::BF16BitsToF32(static_cast<const uint16_t*>(p)[i]);
    case CUDA_R_64F:
      return static_cast<const double*>(p)[i];
    default:
      return static_cast<const float*>(p)[i];
  }
}

void Put(void* p, cudaDataType_t t, int64_t i, double v) {
  switch (t) {
    case CUDA_R_16F:
      static_cast<uint16_t*>(p)[i] = ampd::engine::core::F32ToF16Bits(static_cast<float>(v));
      break;
    case CUDA_R_16BF:
      static_cast<uint16_t*>(p)[i] = ampd::engine::core::F32ToBF16Bits(static_cast<float>(v));
      break;
    case CUDA_R_64F:
      static_cast<double*>(p)[i] = v;
      break;
    default:
      static_cast<float*>(p)[i] = static_cast<float>(v);
  }
}

// TF32: f32 with a 10-bit mantissa (round to nearest even).
float ToTf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
  std::memcpy(&x, &u, 4);
  return x;
}

constexpr double kSqrt2OverPi = 0.7978845608028654;
double GeluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}
double GeluTanhGrad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * x * x);
}

bool g_epilogues_supported = true;

bool HasAux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool HasBias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

// The checks that do not need pointers (the heuristic's view).
cublasStatus_t CheckShapes(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                           cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                           cublasLtMatrixLayout_t dd) {
  if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t m = dd->rows, n = dd->cols;
  const uint64_t k = d->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t a_m = d->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
  const uint64_t b_k = d->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
  const uint64_t b_n = d->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  if (a_m != m || b_k != k || b_n != n || c->rows != m || c->cols != n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  for (auto* l : {a, b, c, dd}) {
    if (l->ld < static_cast<int64_t>(std::max<uint64_t>(1, l->rows))) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (c->type != dd->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (IsFp8(a->type) || IsFp8(b->type)) {
    if (!IsFp8(a->type) || !IsFp8(b->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (a->type == CUDA_R_8F_E5M2 && b->type == CUDA_R_8F_E5M2) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (dd->type != CUDA_R_32F && dd->type != CUDA_R_16BF && dd->type != CUDA_R_16F) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->trans_a != CUBLAS_OP_T || d->trans_b != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (auto* l : {a, b, c, dd}) {
      if (l->ld % 16 != 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (a->type != b->type) return CUBLAS_STATUS_NOT_SUPPORTED;
  switch (d->compute) {
    case CUBLAS_COMPUTE_64F:
      if (a->type != CUDA_R_64F || dd->type != CUDA_R_64F || d->scale != CUDA_R_64F) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
      // Epilogues are not emulated for doubles: the backend must not ask.
      if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      if (a->type != CUDA_R_32F || dd->type != CUDA_R_32F || d->scale != CUDA_R_32F) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
      break;
    case CUBLAS_COMPUTE_32F:
      if (d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      if (a->type == CUDA_R_32F && dd->type != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
      if ((a->type == CUDA_R_16F || a->type == CUDA_R_16BF) && dd->type != a->type &&
          dd->type != CUDA_R_32F) {
        return CUBLAS_STATUS_NOT_SUPPORTED;
      }
      if (a->type == CUDA_R_64F) return CUBLAS_STATUS_NOT_SUPPORTED;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!g_epilogues_supported && d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (HasAux(d->epilogue)) {
    // "Must be divisible by 8 and be no less than the number of rows in the
    // output matrix" (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD).
    if (d->aux_ld % 8 != 0 || d->aux_ld < static_cast<int64_t>(m)) {
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool Device(const void* p, uint64_t rows, uint64_t cols, int64_t ld, size_t elem) {
  if (!p) return false;
  if (reinterpret_cast<uintptr_t>(p) % 256 != 0) return false;  // the default minimum
  const size_t bytes = cols == 0 ? 0 : ((cols - 1) * ld + rows) * elem;
  return cudaemu::IsDeviceRange(p, std::max<size_t>(bytes, 1));
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  *handle = new cublasLtContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t size) {
  auto expect = [&](size_t want) { return size == want; };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      if (!expect(sizeof(int32_t))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->trans_a, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (!expect(sizeof(int32_t))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->trans_b, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (!expect(sizeof(uint32_t))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->epilogue, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (!expect(sizeof(void*))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->bias, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if (!expect(sizeof(void*))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if (!expect(sizeof(int64_t))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->aux_ld, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
      if (!expect(sizeof(void*))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->a_scale, buf, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
      if (!expect(sizeof(void*))) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&desc->b_scale, buf, size);
      return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t size) {
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(uint64_t)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  std::memcpy(&pref->max_workspace, buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t* results,
                                              int* returned) {
  *returned = 0;
  if (!handle || !pref || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t s = CheckShapes(desc, a, b, c, d);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].algo.data[0] = 0x656d75;  // "emu"
  results[0].state = CUBLAS_STATUS_SUCCESS;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                              cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!handle || !algo || algo->data[0] != 0x656d75 || !alpha || !beta) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  cublasStatus_t s = CheckShapes(desc, adesc, bdesc, cdesc, ddesc);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (cudaemu::StickyError() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  const uint64_t m = ddesc->rows, n = ddesc->cols;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const cudaDataType_t ab = adesc->type, bt = bdesc->type, dt = ddesc->type;
  const size_t ds = Size(dt);
  if (!Device(a, adesc->rows, adesc->cols, adesc->ld, Size(ab)) ||
      !Device(b, bdesc->rows, bdesc->cols, bdesc->ld, Size(bt)) ||
      !Device(c, cdesc->rows, cdesc->cols, cdesc->ld, ds) ||
      !Device(d, ddesc->rows, ddesc->cols, ddesc->ld, ds)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (workspace && !cudaemu::IsDeviceRange(workspace, std::max<size_t>(workspace_bytes, 1))) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtMatmulDescOpaque_t e = *desc;  // pointers as of this call
  for (const float* scale : {e.a_scale, e.b_scale}) {
    if (scale != nullptr && !cudaemu::IsDeviceRange(scale, sizeof(float))) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  if (HasBias(e.epilogue) && !Device(e.bias, m, 1, m, ds)) return CUBLAS_STATUS_INVALID_VALUE;
  if (HasAux(e.epilogue) && !Device(e.aux, m, n, e.aux_ld, ds)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool f64 = e.compute == CUBLAS_COMPUTE_64F;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  const cublasLtMatrixLayoutOpaque_t la = *adesc, lb = *bdesc, lc = *cdesc, ld = *ddesc;
  if (cudaemu::Tracing()) {
    std::fprintf(
        stderr, "cuda emulator: cublasLtMatmul m=%llu n=%llu k=%llu epilogue=%d types=%d,%d\n",
        static_cast<unsigned long long>(ddesc->rows), static_cast<unsigned long long>(ddesc->cols),
        static_cast<unsigned long long>(desc->trans_a == CUBLAS_OP_N ? adesc->cols : adesc->rows),
        static_cast<int>(desc->epilogue), static_cast<int>(adesc->type),
        static_cast<int>(bdesc->type));
  }
  cudaemu::Enqueue(stream, [=] {
    const uint64_t k = e.trans_a == CUBLAS_OP_N ? la.cols : la.rows;
    const bool tf32 = e.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    // op(A) as rows of k and op(B) as columns of k, widened once, so each
    // output is one contiguous dot product (f32 multiply-adds in k order, as
    // one GPU thread's chain, or f64).
    std::vector<double> a64, b64;
    std::vector<float> a32, b32;
    auto widen = [&](const void* p, const cublasLtMatrixLayoutOpaque_t& l, bool trans,
                     uint64_t outer, auto& out) {
      out.resize(outer * k);
      for (uint64_t o = 0; o < outer; ++o) {
        for (uint64_t x = 0; x < k; ++x) {
          double v = Get(p, l.type, trans ? x + o * l.ld : o + x * l.ld);
          if constexpr (std::is_same_v<std::decay_t<decltype(out[0])>, float>) {
            out[o * k + x] = tf32 ? ToTf32(static_cast<float>(v)) : static_cast<float>(v);
          } else {
            out[o * k + x] = v;
          }
        }
      }
    };
    // A's element (i, l) is A[i + l*ld] untransposed; B's (l, j) is B[l + j*ld].
    if (f64) {
      widen(a, la, e.trans_a != CUBLAS_OP_N, m, a64);
      widen(b, lb, e.trans_b == CUBLAS_OP_N, n, b64);
    } else {
      widen(a, la, e.trans_a != CUBLAS_OP_N, m, a32);
      widen(b, lb, e.trans_b == CUBLAS_OP_N, n, b32);
    }
    std::vector<double> bias_grad(m, 0.0);
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        double v;
        if (f64) {
          const double* x = &a64[i * k];
          const double* y = &b64[j * k];
          double acc = 0;
          for (uint64_t l = 0; l < k; ++l) acc += x[l] * y[l];
          v = acc;
        } else {
          const float* x = &a32[i * k];
          const float* y = &b32[j * k];
          float acc = 0;  // f32 accumulation, as CUBLAS_COMPUTE_32F
          for (uint64_t l = 0; l < k; ++l) acc += x[l] * y[l];
          v = acc;
        }
        if (IsFp8(ab)) {  // the scales are read when the GEMM runs, as on a GPU
          v *= static_cast<double>((e.a_scale ? *e.a_scale : 1.0f) *
                                   (e.b_scale ? *e.b_scale : 1.0f));
        }
        v = al * v + (be != 0 ? be * Get(c, lc.type, i + j * lc.ld) : 0.0);
        switch (e.epilogue) {
          case CUBLASLT_EPILOGUE_BIAS:
            v += Get(e.bias, dt, i);
            break;
          case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: {
            const double pre = v + Get(e.bias, dt, i);
            Put(e.aux, dt, i + j * e.aux_ld, pre);
            v = GeluTanh(pre);
            break;
          }
          case CUBLASLT_EPILOGUE_DGELU:
          case CUBLASLT_EPILOGUE_DGELU_BGRAD:
            v *= GeluTanhGrad(Get(e.aux, dt, i + j * e.aux_ld));
            bias_grad[i] += v;
            break;
          default:
            break;
        }
        Put(d, dt, i + j * ld.ld, v);
      }
    }
    if (e.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      for (uint64_t i = 0; i < m; ++i) Put(const_cast<void*>(e.bias), dt, i, bias_grad[i]);
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

void cudaemu::SetCublasLtEpiloguesSupported(bool supported) { g_epilogues_supported = supported; }

const char* cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed to the function";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "cuBLASLt emulator error";
  }
}
