// Small-matrix products: tiles of R rows × NV vectors held in registers, one
// broadcast of A and NV loads of B per step of k. Written once with Highway; the
// tile shapes follow the target's register file (32 vectors on AVX-512 and NEON,
// 16 on AVX2 and SSE4), so each target keeps every accumulator in a register.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/small_gemm.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include <utility>

#include <cblas.h>

#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/small_gemm.hpp"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace {

/// Plain loops: targets whose vectors have no compile-time size (SVE, RVV) cannot hold
/// them in arrays, so they take this path; so does any target for degenerate shapes.
void small_gemm_loops(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b,
                      long ldb, float* c, long ldc, bool accumulate, triangle tri) {
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
}

#if !HWY_HAVE_SCALABLE
using tag = hn::ScalableTag<float>;
constexpr long lanes = long(hn::MaxLanes(tag()));
/// Vectors per tile row: the widest panel whose tiles fit the register file.
constexpr int max_nv = vector_registers >= 32 ? 4 : 2;
constexpr long panel_cols = max_nv * lanes;

/// One R×(lanes·NV) tile. The accumulators are indexed only by pack-expansion
/// constants (no loops over them), so the compiler keeps all of them in registers.
template <int R, int NV, std::size_t... I>
HWY_INLINE void tile_impl(std::index_sequence<I...>, long n_left, long k, float alpha, const float* a, long a_rs,
                          long a_cs, const float* b, long ldb, float* c, long ldc, bool accumulate) {
  const tag d;
  using V = hn::Vec<tag>;
  long w[NV];
  for (int v = 0; v < NV; ++v)
    w[v] = std::clamp(n_left - lanes * v, 0L, lanes);
  V acc[R * NV] = {((void)I, hn::Zero(d))...};
  V bv[NV];
  if (w[NV - 1] == lanes) { // the whole panel: plain loads
    for (long p = 0; p < k; ++p) {
      const float* bp = b + p * ldb;
      const float* ap = a + p * a_cs;
      for (int v = 0; v < NV; ++v)
        bv[v] = hn::LoadU(d, bp + lanes * v);
      ((acc[I] = hn::MulAdd(hn::Set(d, ap[long(I / NV) * a_rs]), bv[I % NV], acc[I])), ...);
    }
  } else {
    for (long p = 0; p < k; ++p) {
      const float* bp = b + p * ldb;
      const float* ap = a + p * a_cs;
      for (int v = 0; v < NV; ++v)
        bv[v] = load_n(d, bp + lanes * v, w[v]);
      ((acc[I] = hn::MulAdd(hn::Set(d, ap[long(I / NV) * a_rs]), bv[I % NV], acc[I])), ...);
    }
  }
  const auto al = hn::Set(d, alpha);
  auto store = [&](std::size_t i, V x) TROUPE_INLINE_LAMBDA {
    const long wi = w[i % NV];
    float* dst = c + long(i / NV) * ldc + lanes * long(i % NV);
    x = hn::Mul(x, al);
    if (wi == lanes) {
      if (accumulate)
        x = hn::Add(x, hn::LoadU(d, dst));
      hn::StoreU(x, d, dst);
    } else if (wi > 0) {
      if (accumulate)
        x = hn::Add(x, load_n(d, dst, wi));
      store_n(x, d, dst, wi);
    }
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

/// Rows per tile for NV vectors: R·NV accumulators plus NV loaded B vectors and a
/// broadcast within the register file (GCC 12 spills at 12 rows × 2 of 32 registers).
/// It divides tile_row_align: attention zeroes each score row only that far.
template <int NV>
constexpr int rows_for() {
  constexpr int r = vector_registers >= 32 ? (NV >= 3 ? 4 : NV == 2 ? 8 : 16) : (NV >= 2 ? 6 : 12);
  static_assert(tile_row_align % r == 0, "a row group must end where attention's zeros do");
  return r;
}

/// All rows of one column panel of up to lanes·NV columns, in groups of R then a remainder.
template <int NV>
void panel(long m, long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
           float* c, long ldc, bool accumulate, triangle tri) {
  constexpr int R = rows_for<NV>();
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

/// Columns [0, n_left) of one tile of vectors [1, max_nv]: the narrowest that covers them.
template <int Rows, int NV = 1>
void row_tile(long left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb, float* c,
              long ldc, bool accumulate) {
  if constexpr (NV < max_nv) {
    if (left > NV * lanes)
      return row_tile<Rows, NV + 1>(left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
  }
  tile<Rows, NV>(left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
}

/// Columns [0, n_left) of `rows` rows (1 to 4), the panels' widths picked per row group.
template <int Rows>
void row_group(long n_left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
               float* c, long ldc, bool accumulate) {
  for (long j = 0; j < n_left; j += panel_cols)
    row_tile<Rows>(n_left - j, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate);
}

/// triangle::columns_to_row: row groups of 4, each only as wide as its last row's diagonal.
void columns_to_row(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                    float* c, long ldc, bool accumulate) {
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

/// One column panel of lanes·NV columns or fewer, NV picked as the narrowest that covers them.
template <int NV = 1>
void panel_for(long m, long left, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
               float* c, long ldc, bool accumulate, triangle tri) {
  if constexpr (NV < max_nv) {
    if (left > NV * lanes)
      return panel_for<NV + 1>(m, left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, tri);
  }
  panel<NV>(m, left, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, tri);
}
#endif // !HWY_HAVE_SCALABLE

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// GCC 12 flags its own unpack intrinsics' undefined pass-through operand as uninitialised.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
constexpr long transpose_block = 16;
/// dst[16×16] = src[16×16]ᵀ in registers: unpacks, then 128-bit lane shuffles (the
/// usual AVX-512 sequence, e.g. Z boson's answer on Stack Overflow q. 25622745).
inline void transpose_tile(const float* src, long ld_src, float* dst, long ld_dst) {
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
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
constexpr long transpose_block = 8;
/// dst[8×8] = src[8×8]ᵀ in registers: unpacks, shuffles, then 128-bit lane swaps.
inline void transpose_tile(const float* src, long ld_src, float* dst, long ld_dst) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i)
    r[i] = _mm256_loadu_ps(src + i * ld_src);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
}
#else
constexpr long transpose_block = 0; // OpenBLAS's copy-transpose instead
inline void transpose_tile(const float*, long, float*, long) {}
#endif

} // namespace

void small_gemm_t(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                  float* c, long ldc, bool accumulate, triangle tri) {
#if HWY_HAVE_SCALABLE
  small_gemm_loops(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, tri);
#else
  if constexpr (lanes == 1) { // Highway's scalar baseline: registers of one lane gain nothing over loops
    small_gemm_loops(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, tri);
    return;
  }
  if (tri == triangle::columns_to_row) {
    columns_to_row(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate);
    return;
  }
  for (long j = 0; j < n; j += panel_cols)
    panel_for(m, n - j, k, alpha, a, a_rs, a_cs, b + j, ldb, c + j, ldc, accumulate, tri);
#endif
}

void transpose_t(const float* src, long rows, long cols, long ld_src, float* dst, long ld_dst) {
  if constexpr (transpose_block > 0) {
    if (rows % transpose_block == 0 && cols % transpose_block == 0) { // attention's heads
      for (long r = 0; r < rows; r += transpose_block)
        for (long c = 0; c < cols; c += transpose_block)
          transpose_tile(src + r * ld_src + c, ld_src, dst + c * ld_dst + r, ld_dst);
      return;
    }
  }
  // OpenBLAS's out-of-place copy-transpose is several times faster than a plain loop.
  cblas_somatcopy(CblasRowMajor, CblasTrans, int(rows), int(cols), 1.0f, src, int(ld_src), dst, int(ld_dst));
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(small_gemm_t);
HWY_EXPORT(transpose_t);

void small_gemm(long m, long n, long k, float alpha, const float* a, long a_rs, long a_cs, const float* b, long ldb,
                float* c, long ldc, bool accumulate, triangle tri) {
  TROUPE_DISPATCH(small_gemm_t)(m, n, k, alpha, a, a_rs, a_cs, b, ldb, c, ldc, accumulate, tri);
}

void transpose(const float* src, long rows, long cols, long ld_src, float* dst, long ld_dst) {
  TROUPE_DISPATCH(transpose_t)(src, rows, cols, ld_src, dst, ld_dst);
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
