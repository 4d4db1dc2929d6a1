// cuBLAS calls for row-major products: a row-major C[m,n] is the column-major
// C^T[n,m] = op(B)^T op(A)^T, so B goes first and the sizes swap.
#include "kernels/cuda/gemm.hpp"

#include <string>

namespace troupe::gpu {

blas_handle::~blas_handle() {
  if (h_ != nullptr)
    (void)cublasDestroy(h_);
}

status blas_handle::init() {
  if (h_ != nullptr)
    return {};
  TROUPE_CUBLAS_CHECK(cublasCreate(&h_));
  return {};
}

namespace {

status check_shape(const gemm_shape& s) {
  if (s.m < 0 || s.n < 0 || s.k < 0)
    return status::failure("gemm: negative size m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                           " k=" + std::to_string(s.k));
  return {};
}

status run(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const void* a, const void* b, void* c,
           cudaDataType_t in, cudaDataType_t out, cublasComputeType_t compute) {
  TROUPE_GPU_TRY(check_shape(s));
  if (s.m == 0 || s.n == 0)
    return {};
  TROUPE_CUBLAS_CHECK(cublasSetStream(h, stream));
  int lda = s.trans_a ? s.m : s.k; // row length of A as stored
  int ldb = s.trans_b ? s.k : s.n;
  auto op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TROUPE_CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, s.n, s.m, s.k, &s.alpha, b, in, ldb, a, in, lda, &s.beta, c, out, s.n,
                                   compute, CUBLAS_GEMM_DEFAULT));
  return {};
}

} // namespace

status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const __nv_bfloat16* a, const __nv_bfloat16* b,
            __nv_bfloat16* c) {
  return run(h, stream, s, a, b, c, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
}

status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const __nv_bfloat16* a, const __nv_bfloat16* b,
            float* c) {
  return run(h, stream, s, a, b, c, CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F);
}

status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const float* a, const float* b, float* c) {
  return run(h, stream, s, a, b, c, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC);
}

status gemm_strided_batched(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, int batch,
                            const __nv_bfloat16* a, long long stride_a, const __nv_bfloat16* b, long long stride_b,
                            __nv_bfloat16* c, long long stride_c) {
  TROUPE_GPU_TRY(check_shape(s));
  if (s.m == 0 || s.n == 0 || batch == 0)
    return {};
  TROUPE_CUBLAS_CHECK(cublasSetStream(h, stream));
  int lda = s.trans_a ? s.m : s.k;
  int ldb = s.trans_b ? s.k : s.n;
  auto op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TROUPE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, s.n, s.m, s.k, &s.alpha, b, CUDA_R_16BF, ldb, stride_b,
                                                 a, CUDA_R_16BF, lda, stride_a, &s.beta, c, CUDA_R_16BF, s.n, stride_c,
                                                 batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

} // namespace troupe::gpu
