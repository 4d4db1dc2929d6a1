// Packed f32 sgemm (the BLIS loop order: a packed B panel stays in L1 while register
// tiles of rows stream past it; Van Zee & van de Geijn, "BLIS", TOMS 2015) with bias,
// residual and bias-gradient passes fused into packing and write-back. Written once
// with Highway: a tile is 6 rows × 4 vectors where 32 vector registers exist (AVX-512:
// 6×64 floats) and 6 rows × 2 vectors where 16 do (AVX2: 6×16, the shape of BLIS's
// and OpenBLAS's Haswell kernels).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/gemm_f32.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "kernels/cpu/simd-inl.h"
#include "kernels/cpu/small_gemm.hpp"

#ifndef TROUPE_KERNELS_CPU_GEMM_F32_ONCE
#define TROUPE_KERNELS_CPU_GEMM_F32_ONCE // the target-independent part, once
namespace troupe::kernels::cpu::detail {

/// The epilogue's plain version: C was computed as alpha·AB + beta·C_in by sgemm.
inline void epilogue_rows(int m, int n, int k, bool trans_a, float alpha, const float* a, int lda, float* c, int ldc,
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
inline void fused_fallback(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                           int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  if (e.c_in && e.c_in != c && beta != 0.0f)
    for (long i = 0; i < m; ++i)
      std::memcpy(c + i * ldc, e.c_in + long(i) * e.ldc_in, std::size_t(n) * sizeof(float));
  sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  epilogue_rows(m, n, k, ta, alpha, a, lda, c, ldc, e);
}

} // namespace troupe::kernels::cpu::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace {

#if !HWY_HAVE_SCALABLE
using tag = hn::ScalableTag<float>;
constexpr long lanes = long(hn::MaxLanes(tag()));
// Measured on AVX-512 against 6×64 with k blocks of 192, 12×32, 14×32 and 8×48
// register tiles: 6×64 with 256 was fastest (≈190–205 GFLOP/s).
constexpr int kc_max = 256;                          // k per block: a B panel stays in L1
constexpr int vecs = vector_registers >= 32 ? 4 : 2; // vectors per register-tile row
constexpr long panel = vecs * lanes;                 // columns per packed B panel
constexpr int rows = 6;                              // rows per register tile

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
    void fetch(long i) const {
      i += first;
      __builtin_prefetch(base + (i / per_row) * ld + (i % per_row) * 64, 0, 2); // into L2
    }
  } next_b;
};

template <int R, std::size_t... I>
HWY_INLINE void tile(std::index_sequence<I...>, a_view a, long kc, const float* bp, long w, const store_args& s) {
  const tag d;
  using V = hn::Vec<tag>;
  V acc[R * vecs] = {((void)I, hn::Zero(d))...};
  const float* ar[R];
  for (int r = 0; r < R; ++r)
    ar[r] = a.data + r * a.rs;
  // C (and the residual) are read only at the end: ask for their lines now, since
  // a gradient accumulated across steps or a fresh output is rarely in cache.
  for (int r = 0; r < R; ++r)
    for (long j = 0; j < w; j += 16) {
      __builtin_prefetch(s.c + r * s.ldc + j, 1, 3);
      if (s.first && s.beta != 0.0f && s.c_in != s.c)
        __builtin_prefetch(s.c_in + r * s.ldc_in + j, 0, 3);
    }
  for (long extra = kc; extra < s.next_b.count; ++extra)
    s.next_b.fetch(extra);
  for (long p = 0; p < kc; ++p) {
    if (p < s.next_b.count)
      s.next_b.fetch(p);
    const float* bq = bp + p * panel;
    V bv[vecs];
    for (int v = 0; v < vecs; ++v)
      bv[v] = hn::LoadU(d, bq + lanes * v);
    ((acc[I] = hn::MulAdd(hn::Set(d, ar[I / vecs][p * a.ps]), bv[I % vecs], acc[I])), ...);
  }
  const auto al = hn::Set(d, s.alpha), be = hn::Set(d, s.beta);
  auto store = [&](std::size_t i, V x) TROUPE_INLINE_LAMBDA {
    const long r = long(i / vecs), j = lanes * long(i % vecs);
    if (w <= j)
      return;
    const long n = std::min(lanes, w - j);
    float* dst = s.c + r * s.ldc + j;
    if (!s.first) {
      x = hn::MulAdd(x, al, load_n(d, dst, n));
    } else {
      x = hn::Mul(x, al);
      if (s.beta != 0.0f)
        x = hn::MulAdd(be, load_n(d, s.c_in + r * s.ldc_in + j, n), x);
      if (s.bias)
        x = hn::Add(x, load_n(d, s.bias + j, n));
    }
    if (n == lanes)
      hn::StoreU(x, d, dst);
    else
      store_n(x, d, dst, n);
  };
  (store(I, acc[I]), ...);
}

template <int R>
void tile_rows(a_view a, long kc, const float* bp, long w, const store_args& s) {
  tile<R>(std::make_index_sequence<std::size_t(R * vecs)>{}, a, kc, bp, w, s);
}

/// sums[i] += alpha · Σ_p op(A)(i, p) over k0 ≤ p < k0 + kc for transposed A (rows of `a` are k).
void add_transposed_row_sums(const float* a, long lda, long m, long k0, long kc, float alpha, float* sums) {
  const tag d;
  const auto al = hn::Set(d, alpha);
  for (long i = 0; i < m; i += lanes) {
    const long n = std::min(lanes, m - i);
    auto s0 = hn::Zero(d), s1 = hn::Zero(d);
    long p = 0;
    for (; p + 1 < kc; p += 2) {
      s0 = hn::Add(s0, load_n(d, a + (k0 + p) * lda + i, n));
      s1 = hn::Add(s1, load_n(d, a + (k0 + p + 1) * lda + i, n));
    }
    if (p < kc)
      s0 = hn::Add(s0, load_n(d, a + (k0 + p) * lda + i, n));
    store_n(hn::MulAdd(al, hn::Add(s0, s1), load_n(d, sums + i, n)), d, sums + i, n);
  }
}

/// Packs op(B)[k0..k0+kc, j0..j0+w) as [kc][panel], zero beyond w.
void pack_b(bool tb, const float* b, long ldb, long j0, long w, long k0, long kc, float* buf) {
  const tag d;
  if (!tb) {
    for (long p = 0; p < kc; ++p) {
      const float* src = b + (k0 + p) * ldb + j0;
      for (long v = 0; v < panel; v += lanes)
        hn::StoreU(load_n(d, src + v, std::clamp(w - v, 0L, lanes)), d, buf + p * panel + v);
    }
    return;
  }
  // Column j of op(B) is row j0 + j of b: transpose a vector of columns × kc at a time.
  for (long v = 0; v < panel; v += lanes) {
    const long cols = std::min(lanes, w - v);
    if (cols <= 0) {
      for (long p = 0; p < kc; ++p)
        hn::StoreU(hn::Zero(d), d, buf + p * panel + v);
      continue;
    }
    if (cols == lanes && kc % 16 == 0) {
      transpose(b + (j0 + v) * ldb + k0, lanes, kc, ldb, buf + v, panel);
      continue;
    }
    for (long p = 0; p < kc; ++p)
      for (long j = 0; j < lanes; ++j)
        buf[p * panel + v + j] = j < cols ? b[(j0 + v + j) * ldb + k0 + p] : 0.0f;
  }
}

void packed(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
            int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  thread_local std::vector<float> bbuf; // grows once, then reused
  bbuf.resize(std::max<std::size_t>(bbuf.size(), std::size_t(kc_max) * panel + 16));
  for (long k0 = 0; k0 < k; k0 += kc_max) {
    const long kc = std::min<long>(kc_max, k - k0);
    store_args s{c, ldc, e.c_in ? e.c_in : c, e.c_in ? e.ldc_in : ldc, e.bias, alpha, beta, k0 == 0, {}};
    // A is read in place: transposed, a tile's rows are adjacent floats of each k row.
    if (trans_a && e.a_row_sums)
      add_transposed_row_sums(a, lda, m, k0, kc, alpha, e.a_row_sums);
    else if (e.a_row_sums)
      for (long i = 0; i < m; ++i)
        e.a_row_sums[i] += alpha * row_sum(a + i * lda + k0, kc);
    auto view = [&](long i) {
      if (trans_a)
        return a_view{a + k0 * lda + i, 1, lda};
      return a_view{a + i * lda + k0, lda, 1};
    };
    for (long j0 = 0; j0 < n; j0 += panel) {
      const long w = std::min<long>(panel, n - j0);
      pack_b(trans_b, b, ldb, j0, w, k0, kc, bbuf.data());
      // The next panel's source: the next panel of columns, or the next k block's first.
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
      case 0:
        break;
      case 1:
        tile_rows<1>(view(i), kc, bbuf.data(), w, at(i));
        break;
      case 2:
        tile_rows<2>(view(i), kc, bbuf.data(), w, at(i));
        break;
      case 3:
        tile_rows<3>(view(i), kc, bbuf.data(), w, at(i));
        break;
      case 4:
        tile_rows<4>(view(i), kc, bbuf.data(), w, at(i));
        break;
      default:
        tile_rows<5>(view(i), kc, bbuf.data(), w, at(i));
        break;
      }
    }
  }
}
#endif // !HWY_HAVE_SCALABLE

} // namespace

void sgemm_fused_t(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                   const float* b, int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  if (m == 0 || n == 0)
    return;
#if !HWY_HAVE_SCALABLE
  // Highway's scalar baseline has one-lane vectors: BLAS is faster there.
  if (lanes > 1 && k > 0) {
    if (trans_a && m > 512) {
      // Transposed A is read in place at its row stride; from 768 rows on (a stride
      // of 3 KiB or more) its lines collide in L1, so it is transposed first: a copy
      // of m·k floats against 2·m·n·k flops. (This used to go to OpenBLAS, which on a
      // processor it does not know, such as this Xeon, runs its SSE3 kernel at a
      // quarter of this speed.)
      thread_local std::vector<float> at; // grows once, then reused
      at.resize(std::max<std::size_t>(at.size(), std::size_t(m) * std::size_t(k)));
      transpose(a, k, m, lda, at.data(), k);
      packed(false, trans_b, m, n, k, alpha, at.data(), k, b, ldb, beta, c, ldc, e);
      return;
    }
    packed(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
    return;
  }
#endif
  detail::fused_fallback(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

HWY_EXPORT(sgemm_fused_t);

void sgemm_fused(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                 int ldb, float beta, float* c, int ldc, const gemm_epilogue& e) {
  TROUPE_DISPATCH(sgemm_fused_t)(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e);
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
