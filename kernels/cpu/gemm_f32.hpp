// Our own f32 matrix product for the GPT's shapes, with the memory passes around a
// product (bias rows, a residual, a bias gradient) fused into it; every SIMD target.
#pragma once

namespace troupe::kernels::cpu {

/// What sgemm_fused does besides C = alpha · op(A) · op(B) + beta · C_in.
struct gemm_epilogue {
  /// Added to every row of C (length n), or null.
  const float* bias = nullptr;
  /// Read instead of C for the beta term (row stride ldc_in), or null for C itself.
  const float* c_in = nullptr;
  int ldc_in = 0;
  /// a_row_sums[i] += alpha · Σ_p op(A)(i, p) (length m), or null: a bias gradient
  /// when op(A) is the transposed output gradient.
  float* a_row_sums = nullptr;
};

/// C = alpha · op(A) · op(B) + beta · C_in + bias, row-major like sgemm, in one pass
/// over C. A packed register-tiled kernel per SIMD target (Highway); sgemm plus loops
/// on targets without fixed-size vectors and for transposed A of more than 512 rows.
void sgemm_fused(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc, const gemm_epilogue& e);

} // namespace troupe::kernels::cpu
