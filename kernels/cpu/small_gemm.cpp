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

/// k range [k0, k1) of the row group [r, r + rows) under a triangle of the k modes.
inline void k_range(triangle tri, long r, long rows, long k, long& k0, long& k1) {
  k0 = tri == triangle::k_from_row ? (r < k ? r : k) : 0;
  k1 = tri == triangle::k_to_row ? (r + rows < k ? r + rows : k) : k;
}

/// All rows of one column panel of up to 16·NV columns, in groups of R then a remainder.
/// R·NV accumulators plus NV loaded B vectors stay within the 32 vector registers.
template <int NV>
void panel(long m, long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
           float* c, long ldc, bool accumulate, triangle tri) {
  constexpr int R = NV >= 3 ? 4 : NV == 2 ? 8 : 16; // 12 rows × 2 spill a register in GCC 12
  long r = 0, k0 = 0, k1 = k;
  for (; r + R <= m; r += R) {
    k_range(tri, r, R, k, k0, k1);
    tile<R, NV>(n_left, k1 - k0, alpha, a + r * a_rs + k0 * a_cs, a_rs, a_cs, b + k0 * ldb, ldb, c + r * ldc, ldc,
                accumulate);
  }
  k_range(tri, r, m - r, k, k0, k1);
  tail_rows<NV, R - 1>(m - r, n_left, k1 - k0, alpha, a + r * a_rs + k0 * a_cs, a_rs, a_cs, b + k0 * ldb, ldb,
                       c + r * ldc, ldc, accumulate);
}

/// Columns [0, n_left) of `rows` rows (1 to 4), the panels' widths picked per row group.
template <int Rows>
void row_group(long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
               float* c, long ldc, bool accumulate) {
  for (long j = 0; j < n_left; j += 64) {
    long left = n_left - j;
    if (left > 48)
      tile<Rows, 4>(left, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
    else if (left > 32)
      tile<Rows, 3>(left, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
    else if (left > 16)
      tile<Rows, 2>(left, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
    else
      tile<Rows, 1>(left, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
  }
}

/// triangle::columns_to_row: row groups of 4, each only as wide as its last row's diagonal.
void columns_to_row(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b,
                    long ldb, float* c, long ldc, bool accumulate) {
  long r = 0;
  for (; r + 4 <= m; r += 4)
    row_group<4>(r + 4 < n ? r + 4 : n, k, alpha, a + r * a_rs, a_rs, a_cs, b, ldb, c + r * ldc, ldc, accumulate);
  long rem = m - r, w = m < n ? m : n;
  const float* ar = a + r * a_rs;
  float* cr = c + r * ldc;
  if (rem == 3)
    row_group<3>(w, k, alpha, ar, a_rs, a_cs, b, ldb, cr, ldc, accumulate);
  else if (rem == 2)
    row_group<2>(w, k, alpha, ar, a_rs, a_cs, b, ldb, cr, ldc, accumulate);
  else if (rem == 1)
    row_group<1>(w, k, alpha, ar, a_rs, a_cs, b, ldb, cr, ldc, accumulate);
}

// GCC 12 flags its own unpack intrinsics' undefined pass-through operand as uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
/// dst[16×16] = src[16×16]ᵀ in registers: unpacks, then 128-bit lane shuffles (the
/// usual AVX-512 sequence, e.g. Z boson's answer on Stack Overflow q. 25622745).
inline void transpose16(const float* src, long ld_src, float* dst, long ld_dst) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm512_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    _mm512_storeu_ps(dst + j * ld_dst, _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
    _mm512_storeu_ps(dst + (j + 8) * ld_dst, _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

} // namespace

void small_gemm(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                float* c, long ldc, bool accumulate, triangle tri) {
#if TROUPE_AVX512
  if (tri == triangle::columns_to_row) {
    columns_to_row(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
    return;
  }
  for (long j = 0; j < n; j += 64) {
    long left = n - j;
    const float* bj = b + j;
    float* cj = c + j;
    if (left > 48)
      panel<4>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate, tri);
    else if (left > 32)
      panel<3>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate, tri);
    else if (left > 16)
      panel<2>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate, tri);
    else
      panel<1>(m, left, k, alpha, a, a_rs, a_cs, bj, ldb, cj, ldc, accumulate, tri);
  }
#else
  for (long r = 0; r < m; ++r) {
    long j1 = tri == triangle::columns_to_row ? (r + 1 < n ? r + 1 : n) : n;
    long k0 = tri == triangle::k_from_row ? r : 0, k1 = tri == triangle::k_to_row ? (r + 1 < k ? r + 1 : k) : k;
    for (long j = 0; j < j1; ++j) {
      float acc = 0;
      for (long p = k0; p < k1; ++p)
        acc += a[r * a_rs + p * a_cs] * b[p * ldb + j];
      c[r * ldc + j] = alpha * acc + (accumulate ? c[r * ldc + j] : 0.0f);
    }
  }
#endif
}

void transpose(const float* src, long rows, long cols, long ld_src, float* dst, long ld_dst) {
#if TROUPE_AVX512
  if (rows % 16 == 0 && cols % 16 == 0) { // attention's heads: 16×16 blocks in registers
    for (long r = 0; r < rows; r += 16)
      for (long c = 0; c < cols; c += 16)
        transpose16(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
    return;
  }
#endif
  // OpenBLAS's out-of-place copy-transpose is several times faster than a plain loop.
  cblas_somatcopy(CblasRowMajor, CblasTrans, int(rows), int(cols), 1.0f, src, int(ld_src), dst, int(ld_dst));
}

} // namespace troupe::kernels::cpu
