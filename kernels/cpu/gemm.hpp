// Matrix products on the CPU: row-major sgemm through OpenBLAS, one thread per
// calling actor by default.
#pragma once

namespace troupe::kernels::cpu {

/// C = alpha * op(A) * op(B) + beta * C, all row-major; op(X) is X or Xᵀ.
/// op(A) is m×k, op(B) is k×n, C is m×n; lda/ldb/ldc are row strides in elements.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
           int ldb, float beta, float* c, int ldc);

/// Sets how many threads one sgemm call may use (default 1, or TROUPE_BLAS_THREADS).
void set_blas_threads(int n);

/// The thread count sgemm calls currently use.
int blas_threads();

/// Plain triple-loop sgemm in double accumulation: the reference sgemm is checked against.
void sgemm_reference(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                     const float* b, int ldb, float beta, float* c, int ldc);

} // namespace troupe::kernels::cpu
