// Small-matrix products: tiles of R rows × NV vectors of 16 floats held in
// registers, one broadcast of A and NV loads of B per step of k.
#include "kernels/cpu/small_gemm.hpp"

#include <utility>

#include <cblas.h>

#include "kernels/cpu/simd.hpp"

namespace troupe::kernels::cpu {

namespace {

#if TROUPE_AVX512
/// One R×(16·NV) tile. The accumulators are indexed only by pack-expansion constants
/// (no loops over them), so the compiler keeps all of them in registers.
template <int R, int NV, std::size_t... I>
inline void tile_impl(std::index_sequence<I...>, long n_left, long k, float alpha, const float* a, long a_rs,
                      long a_cs, const float* b, long ldb, float* c, long ldc, bool accumulate) {
  __mmask16 mask[NV];
  for (int v = 0; v < NV; ++v)
    mask[v] = simd::tail_mask(n_left - 16L * v);
  __m512 acc[R * NV] = {((void)I, _mm512_setzero_ps())...};
  for (long p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    const float* ap = a + p * a_cs;
    __m512 bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = _mm512_maskz_loadu_ps(mask[v], bp + 16 * v);
    ((acc[I] = _mm512_fmadd_ps(_mm512_set1_ps(ap[long(I / NV) * a_rs]), bv[I % NV], acc[I])), ...);
  }
  const __m512 al = _mm512_set1_ps(alpha);
  auto store = [&](std::size_t i, __m512 x) {
    float* dst = c + long(i / NV) * ldc + 16 * long(i % NV);
    x = _mm512_mul_ps(x, al);
    if (accumulate)
      x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[i % NV], dst));
    _mm512_mask_storeu_ps(dst, mask[i % NV], x);
  };
  (store(I, acc[I]), ...);
}

template <int R, int NV>
void tile(long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb, float* c,
          long ldc, bool accumulate) {
  tile_impl<R, NV>(std::make_index_sequence<std::size_t(R * NV)>{}, n_left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc,
                   accumulate);
}

/// The remainder rows (fewer than a full group) of a panel: tile<Rem, NV> for rem == Rem.
template <int NV, int Rem>
void tail_rows(long rem, long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b,
               long ldb, float* c, long ldc, bool accumulate) {
  if constexpr (Rem > 0) {
    if (rem == Rem)
      tile<Rem, NV>(n_left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
    else
      tail_rows<NV, Rem - 1>(rem, n_left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
  }
}

/// All rows of one column panel of up to 16·NV columns, in groups of R then a remainder.
/// R·NV accumulators plus NV loaded B vectors stay within the 32 vector registers.
template <int NV>
void panel(long m, long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
           float* c, long ldc, bool accumulate) {
  constexpr int R = NV >= 3 ? 4 : NV == 2 ? 12 : 16;
  long r = 0;
  for (; r + R <= m; r += R)
    tile<R, NV>(n_left, k, alpha, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
  tail_rows<NV, R - 1>(m - r, n_left, k, alpha, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
}
#endif

} // namespace

void small_gemm(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                float* c, long ldc, bool accumulate) {
#if TROUPE_AVX512
  for (long j = 0; j < n; j += 64) {
    long left = n - j;
    const float* bj = b + j;
    float* cj = c + j;
    if (left > 48)
      panel<4>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate);
    else if (left > 32)
      panel<3>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate);
    else if (left > 16)
      panel<2>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate);
    else
      panel<1>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate);
  }
#else
  for (long r = 0; r < m; ++r)
    for (long j = 0; j < n; ++j) {
      float acc = 0;
      for (long p = 0; p < k; ++p)
        acc += a[r * a_rs + p * a_cs] * b[p * ldb + j];
      c[r * ldc + j] = alpha * acc + (accumulate ? c[r * ldc + j] : 0.0f);
    }
#endif
}

void transpose(const float* src, long rows, long cols, long ld_src, float* dst, long ld_dst) {
  // OpenBLAS's out-of-place copy-transpose is several times faster than a plain loop.
  cblas_somatcopy(CblasRowMajor, CblasTrans, int(rows), int(cols), 1.0f, src, int(ld_src), dst, int(ld_dst));
}

} // namespace troupe::kernels::cpu
