// Packed AVX-512 f32 sgemm (the BLIS loop order: a packed B panel stays in L1 while
// register tiles of rows stream past it; Van Zee & van de Geijn, "BLIS", TOMS 2015)
// with bias, residual and bias-gradient passes fused into packing and write-back.
#include "kernels/cpu/gemm_f32.hpp"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/simd.hpp"
#include "kernels/cpu/small_gemm.hpp"

namespace troupe::kernels::cpu {

namespace {

/// The epilogue's plain version: C was computed as alpha·AB + beta·C_in by sgemm.
void epilogue_rows(int m, int n, int k, bool trans_a, float alpha, const float* a, int lda, float* c, int ldc,
                   const gemm_epilogue& e) {
  if (e.bias)
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j)
        c[i * ldc + j] += e.bias[j];
  if (e.a_row_sums && trans_a && alpha == 1.0f && lda == m)
    column_sum_add(a, e.a_row_sums, k, m); // rows of `a` are k: op(A)'s row sums are its column sums
  else if (e.a_row_sums && trans_a)
    for (long p = 0; p < k; ++p)
      for (long i = 0; i < m; ++i)
        e.a_row_sums[i] += alpha * a[p * lda + i];
  else if (e.a_row_sums)
    for (long i = 0; i < m; ++i) {
      float s = 0;
      for (long p = 0; p < k; ++p)
        s += a[i * lda + p];
      e.a_row_sums[i] += alpha * s;
    }
}

/// sgemm through BLAS, then the epilogue as separate passes.
void fused_fallback(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                    int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  if (e.c_in && e.c_in != c && beta != 0.0f)
    for (long i = 0; i < m; ++i)
      std::memcpy(c + i * ldc, e.c_in + long(i) * e.ldc_in, std::size_t(n) * sizeof(float));
  sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  epilogue_rows(m, n, k, ta, alpha, a, lda, c, ldc, e);
}

} // namespace

#if TROUPE_AVX512

namespace {

// Measured on this machine's GPT shapes against 6×64 with k blocks of 192, 12×32,
// 14×32 and 8×48 register tiles: 6×64 with 256 was fastest (≈190–205 GFLOP/s).
constexpr int kc_max = 256; // k per block: a B panel (256 × 64 floats) stays in L1
constexpr int vecs = 4;     // vectors per register-tile row: panels of 64 columns
constexpr int panel = 16 * vecs;
constexpr int rows = 6; // rows per register tile: 24 accumulators

/// Where the register tile finds A(r, p): data[r·rs + p·ps], A in place.
struct a_view {
  const float* data;
  long rs, ps;
};

/// Write-back of one register tile: first k block applies alpha, beta·C_in and the
/// bias; later blocks add onto C.
struct store_args {
  float* c;
  long ldc;
  const float* c_in;
  long ldc_in;
  const float* bias;
  float alpha, beta;
  bool first;
  /// Lines this tile prefetches into L2 as it runs, one per k step: its share of the
  /// next B panel's source, which other ops may have left in L3 or memory.
  struct lines {
    const char* base = nullptr;
    long ld = 0, per_row = 1, first = 0, count = 0;
    template <_mm_hint Hint>
    void fetch(long i) const {
      i += first;
      _mm_prefetch(base + (i / per_row) * ld + (i % per_row) * 64, Hint);
    }
  } next_b;
};

template <int R, std::size_t... I>
inline void tile(std::index_sequence<I...>, a_view a, long kc, const float* bp, long w, const store_args& s) {
  __m512 acc[R * vecs] = {((void)I, _mm512_setzero_ps())...};
  const float* ar[R];
  for (int r = 0; r < R; ++r)
    ar[r] = a.data + r * a.rs;
  // C (and the residual) are read only at the end: ask for their lines now, since
  // a gradient accumulated across steps or a fresh output is rarely in cache.
  for (int r = 0; r < R; ++r)
    for (long j = 0; j < w; j += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(s.c + r * s.ldc + j), _MM_HINT_ET0);
      if (s.first && s.beta != 0.0f && s.c_in != s.c)
        _mm_prefetch(reinterpret_cast<const char*>(s.c_in + r * s.ldc_in + j), _MM_HINT_T0);
    }
  for (long extra = kc; extra < s.next_b.count; ++extra)
    s.next_b.fetch<_MM_HINT_T1>(extra);
  for (long p = 0; p < kc; ++p) {
    if (p < s.next_b.count)
      s.next_b.fetch<_MM_HINT_T1>(p);
    const float* bq = bp + p * panel;
    __m512 bv[vecs];
    for (int v = 0; v < vecs; ++v)
      bv[v] = _mm512_loadu_ps(bq + 16 * v);
    ((acc[I] = _mm512_fmadd_ps(_mm512_set1_ps(ar[I / vecs][p * a.ps]), bv[I % vecs], acc[I])), ...);
  }
  const __m512 al = _mm512_set1_ps(s.alpha), be = _mm512_set1_ps(s.beta);
  auto store = [&](std::size_t i, __m512 x) {
    const long r = long(i / vecs), j = 16 * long(i % vecs);
    if (w <= j)
      return;
    const auto mk = simd::tail_mask(w - j);
    float* dst = s.c + r * s.ldc + j;
    if (!s.first) {
      x = _mm512_fmadd_ps(x, al, _mm512_maskz_loadu_ps(mk, dst));
    } else {
      x = _mm512_mul_ps(x, al);
      if (s.beta != 0.0f)
        x = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(mk, s.c_in + r * s.ldc_in + j), x);
      if (s.bias)
        x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, s.bias + j));
    }
    _mm512_mask_storeu_ps(dst, mk, x);
  };
  (store(I, acc[I]), ...);
}

template <int R>
void tile_rows(a_view a, long kc, const float* bp, long w, const store_args& s) {
  tile<R>(std::make_index_sequence<std::size_t(R * vecs)>{}, a, kc, bp, w, s);
}

/// sums[i] += alpha · Σ_p op(A)(i, p) over k0 ≤ p < k0 + kc for transposed A (rows of `a` are k).
void add_transposed_row_sums(const float* a, long lda, long m, long k0, long kc, float alpha, float* sums) {
  const __m512 al = _mm512_set1_ps(alpha);
  for (long i = 0; i < m; i += 16) {
    const auto mk = simd::tail_mask(m - i);
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    long p = 0;
    for (; p + 1 < kc; p += 2) {
      s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(mk, a + (k0 + p) * lda + i));
      s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(mk, a + (k0 + p + 1) * lda + i));
    }
    if (p < kc)
      s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(mk, a + (k0 + p) * lda + i));
    __m512 old = _mm512_maskz_loadu_ps(mk, sums + i);
    _mm512_mask_storeu_ps(sums + i, mk, _mm512_fmadd_ps(al, _mm512_add_ps(s0, s1), old));
  }
}

/// Packs op(B)[k0..k0+kc, j0..j0+w) as [kc][panel], zero beyond w.
void pack_b(bool tb, const float* b, long ldb, long j0, long w, long k0, long kc, float* buf) {
  if (!tb) {
    for (long p = 0; p < kc; ++p) {
      const float* src = b + (k0 + p) * ldb + j0;
      for (long v = 0; v < panel; v += 16)
        _mm512_storeu_ps(buf + p * panel + v, _mm512_maskz_loadu_ps(simd::tail_mask(w - v), src + v));
    }
    return;
  }
  // Column j of op(B) is row j0 + j of b: transpose 16 columns × kc at a time.
  for (long v = 0; v < panel; v += 16) {
    const long cols = std::min<long>(16, w - v);
    if (cols <= 0) {
      for (long p = 0; p < kc; ++p)
        _mm512_storeu_ps(buf + p * panel + v, _mm512_setzero_ps());
      continue;
    }
    if (cols == 16 && kc % 16 == 0) {
      transpose(b + (j0 + v) * ldb + k0, 16, kc, ldb, buf + v, panel);
      continue;
    }
    for (long p = 0; p < kc; ++p)
      for (long j = 0; j < 16; ++j)
        buf[p * panel + v + j] = j < cols ? b[(j0 + v + j) * ldb + k0 + p] : 0.0f;
  }
}

} // namespace

bool sgemm_fused_native() { return true; }

void sgemm_fused(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  if (m == 0 || n == 0)
    return;
  // Transposed A is read in place at its row stride; from 768 rows on (a stride of
  // 3 KiB or more) its lines collide in L1 and OpenBLAS's packing measured faster.
  if (k == 0 || (trans_a && m > 512)) {
    fused_fallback(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
    return;
  }
  thread_local std::vector<float> bbuf; // grows once, then reused
  bbuf.resize(std::max<std::size_t>(bbuf.size(), std::size_t(kc_max) * panel + 16));
  for (long k0 = 0; k0 < k; k0 += kc_max) {
    const long kc = std::min<long>(kc_max, k - k0);
    store_args s{c, ldc, e.c_in ? e.c_in : c, e.c_in ? e.ldc_in : ldc, e.bias, alpha, beta, k0 == 0, {}};
    // A is read in place: transposed, a tile's rows are adjacent floats of each k row.
    if (trans_a && e.a_row_sums)
      add_transposed_row_sums(a, lda, m, k0, kc, alpha, e.a_row_sums);
    else if (e.a_row_sums)
      for (long i = 0; i < m; ++i) {
        float sum = 0;
        for (long p = 0; p < kc; ++p)
          sum += a[i * lda + k0 + p];
        e.a_row_sums[i] += alpha * sum;
      }
    auto view = [&](long i) {
      if (trans_a)
        return a_view{a + k0 * lda + i, 1, lda};
      return a_view{a + i * lda + k0, lda, 1};
    };
    for (long j0 = 0; j0 < n; j0 += panel) {
      const long w = std::min<long>(panel, n - j0);
      pack_b(trans_b, b, ldb, j0, w, k0, kc, bbuf.data());
      // The next panel's source: the next 64 columns, or the next k block's first.
      long j1 = j0 + panel, k1 = k0, kc1 = kc;
      if (j1 >= n) {
        j1 = 0;
        k1 = k0 + kc;
        kc1 = std::min<long>(kc_max, k - k1);
      }
      const long w1 = std::min<long>(panel, n - j1);
      if (k1 < k) {
        s.next_b.base = reinterpret_cast<const char*>(trans_b ? b + j1 * ldb + k1 : b + k1 * ldb + j1);
        s.next_b.ld = long(ldb) * long(sizeof(float));
        s.next_b.per_row = ((trans_b ? kc1 : w1) * long(sizeof(float)) + 63) / 64;
      }
      const long pf_total = k1 < k ? (trans_b ? w1 : kc1) * s.next_b.per_row : 0;
      const long tiles = (m + rows - 1) / rows, pf_per_tile = (pf_total + tiles - 1) / tiles;
      auto at = [&](long i) {
        store_args t = s;
        t.next_b.first = i / rows * pf_per_tile;
        t.next_b.count = std::clamp<long>(pf_total - t.next_b.first, 0, pf_per_tile);
        t.c += i * ldc + j0;
        t.c_in += i * t.ldc_in + j0;
        if (t.bias)
          t.bias += j0;
        return t;
      };
      long i = 0;
      for (; i + rows <= m; i += rows)
        tile_rows<rows>(view(i), kc, bbuf.data(), w, at(i));
      switch (m - i) {
        case 0: break;
        case 1: tile_rows<1>(view(i), kc, bbuf.data(), w, at(i)); break;
        case 2: tile_rows<2>(view(i), kc, bbuf.data(), w, at(i)); break;
        case 3: tile_rows<3>(view(i), kc, bbuf.data(), w, at(i)); break;
        case 4: tile_rows<4>(view(i), kc, bbuf.data(), w, at(i)); break;
        default: tile_rows<5>(view(i), kc, bbuf.data(), w, at(i)); break;
      }
    }
  }
}

#else

bool sgemm_fused_native() { return false; }

void sgemm_fused(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  fused_fallback(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
}

#endif

} // namespace troupe::kernels::cpu
