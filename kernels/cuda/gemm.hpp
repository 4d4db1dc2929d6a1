// Row-major matrix products on the GPU through cuBLAS: bf16 inputs with f32
// accumulation (bf16 or f32 output), and a full-f32 path with no TF32.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include "kernels/cuda/check.hpp"

namespace troupe::gpu {

/// Owns a cuBLAS handle; one per stream (stage actor) is the intended use.
class blas_handle {
public:
  blas_handle() = default;
  blas_handle(const blas_handle&) = delete;
  blas_handle& operator=(const blas_handle&) = delete;
  ~blas_handle();

  /// Creates the handle on the current device; call once before use.
  status init();
  cublasHandle_t get() const noexcept { return h_; }

private:
  cublasHandle_t h_ = nullptr;
};

/// The shape of one row-major product C[m,n] = alpha * op(A) * op(B) + beta * C.
/// op(A) is A stored [m,k], or with trans_a the transpose of A stored [k,m];
/// op(B) is B stored [k,n], or with trans_b the transpose of B stored [n,k].
/// All matrices are contiguous. beta = 1 accumulates into C (weight gradients).
struct gemm_shape {
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
};

/// bf16 A and B, f32 accumulation, bf16 C.
status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const __nv_bfloat16* a, const __nv_bfloat16* b,
            __nv_bfloat16* c);
/// bf16 A and B, f32 accumulation, f32 C (weight gradients into f32 buffers).
status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const __nv_bfloat16* a, const __nv_bfloat16* b,
            float* c);
/// f32 everywhere, accumulated in f32 without TF32 rounding.
status gemm(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, const float* a, const float* b, float* c);

/// A batch of `batch` products whose operands are `stride_*` elements apart.
status gemm_strided_batched(cublasHandle_t h, cudaStream_t stream, const gemm_shape& s, int batch,
                            const __nv_bfloat16* a, long long stride_a, const __nv_bfloat16* b, long long stride_b,
                            __nv_bfloat16* c, long long stride_c);

} // namespace troupe::gpu
