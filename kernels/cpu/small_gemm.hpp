// Register-blocked products for the small matrices of core attention, where
// BLAS call overhead dominates: C = alpha · A · B (+ C), B row-major.
#pragma once

namespace troupe::kernels::cpu {

/// Which triangle of a causal product small_gemm may skip; the diagonal is where the
/// row index equals the column index (columns_to_row) or the k index (the k modes).
enum class triangle {
  none,
  /// Only C(i, j) with j ≤ i is wanted; entries with j > i may be written or left as they are.
  columns_to_row,
  /// C(i, ·) sums over p ≤ i only: A(i, p) must be 0 for p > i (the kernel may read them).
  k_to_row,
  /// C(i, ·) sums over p ≥ i only: A(i, p) must be 0 for p < i (the kernel may read them).
  k_from_row,
};

/// C[m×n] = alpha · A[m×k] · B[k×n] (plus the old C when `accumulate`).
/// A(r, p) is a[r·a_rs + p·a_cs], so a transposed A is just swapped strides;
/// B's rows are contiguous with stride ldb; C's rows have stride ldc. With a
/// triangle, the causal products of attention skip (most of) the masked half.
void small_gemm(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                float* c, long ldc, bool accumulate, triangle tri = triangle::none);

/// dst[c][r] = src[r][c] for an r×c block with row strides ld_src and ld_dst.
void transpose(const float* src, long rows, long cols, long ld_src, float* dst, long ld_dst);

} // namespace troupe::kernels::cpu
