// bf16 matrix products: operands are packed per block of k into pairs of bf16
// (the layout _mm512_dpbf16_ps consumes) and a 6×64 register tile accumulates f32.
// That kernel is compiled for AVX-512 BF16 alone (Highway 1.0 has no such target) and
// runs where the processor has it and TROUPE_CPU_TARGET allows AVX-512; elsewhere the
// inputs are rounded to bf16 in copies and multiplied by the f32 kernel.
#include "kernels/cpu/gemm_bf16.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "kernels/cpu/target.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TROUPE_BF16_KERNEL 1
#endif

namespace troupe::kernels::cpu {

float round_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

#if TROUPE_BF16_KERNEL
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")
// GCC 12 reports its own AVX-512 intrinsics' _mm512_undefined_ps() as maybe uninitialised.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

/// Mask selecting the first `n` lanes (none when n <= 0, all when n >= 16).
inline __mmask16 tail_mask(long n) {
  if (n <= 0)
    return 0;
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

constexpr int kc_max = 256; // k per packed block (128 pairs)
constexpr int panel = 64;   // columns per packed B panel (4 vectors)
constexpr int rows = 6;     // rows per register tile: 24 accumulators

/// Two rows of 16 floats → 16 pairs (lo = r0[i], hi = r1[i]) as 32-bit lanes.
inline __m512i interleave_pairs(__m512 r0, __m512 r1) {
  static const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  __m512i both = (__m512i)_mm512_cvtne2ps_pbh(r1, r0); // lanes 0-15 from r0, 16-31 from r1
  return _mm512_permutexvar_epi16(idx, both);
}

/// 32 consecutive floats (masked to `n`) → 16 pairs in order.
inline __m512i adjacent_pairs(const float* x, long n) {
  __m512 lo = _mm512_maskz_loadu_ps(tail_mask(n), x);
  __m512 hi = _mm512_maskz_loadu_ps(tail_mask(n - 16), x + 16);
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

struct packed_a {
  std::uint32_t* data;
  long rs, ps; // pair (row r, pair p) is data[r·rs + p·ps]
};

/// Packs op(A)[0..m, k0..k0+kc) into pairs. Untransposed rows give [m][kp]; transposed
/// give [kp][m]; either way the work is whole vectors.
packed_a pack_a(bool ta, const float* a, long lda, long m, long k0, long kc, std::uint32_t* buf) {
  const long kp = (kc + 1) / 2;
  if (!ta) {
    for (long i = 0; i < m; ++i)
      for (long q = 0; q < kp; q += 16)
        _mm512_mask_storeu_epi32(buf + i * kp + q, tail_mask(kp - q),
                                 adjacent_pairs(a + i * lda + k0 + 2 * q, kc - 2 * q));
    return {buf, kp, 1};
  }
  for (long p = 0; p < kp; ++p) {
    const float* r0 = a + (k0 + 2 * p) * lda;
    const bool has1 = 2 * p + 1 < kc;
    for (long i = 0; i < m; i += 16) {
      auto mk = tail_mask(m - i);
      __m512 x0 = _mm512_maskz_loadu_ps(mk, r0 + i);
      __m512 x1 = has1 ? _mm512_maskz_loadu_ps(mk, r0 + lda + i) : _mm512_setzero_ps();
      _mm512_mask_storeu_epi32(buf + p * m + i, mk, interleave_pairs(x0, x1));
    }
  }
  return {buf, 1, m};
}

/// Packs op(B)[k0..k0+kc, j0..j0+w) as [kp][panel] pairs, zero beyond w.
void pack_b(bool tb, const float* b, long ldb, long j0, long w, long k0, long kc, std::uint32_t* buf) {
  const long kp = (kc + 1) / 2;
  if (!tb) {
    for (long p = 0; p < kp; ++p) {
      const float* r0 = b + (k0 + 2 * p) * ldb + j0;
      const bool has1 = 2 * p + 1 < kc;
      for (long v = 0; v < panel; v += 16) {
        auto mk = tail_mask(w - v);
        __m512 x0 = _mm512_maskz_loadu_ps(mk, r0 + v);
        __m512 x1 = has1 ? _mm512_maskz_loadu_ps(mk, r0 + ldb + v) : _mm512_setzero_ps();
        _mm512_storeu_si512(buf + p * panel + v, interleave_pairs(x0, x1));
      }
    }
    return;
  }
  // Column j of op(B) is row j of b: its pairs are adjacent; scatter them by pair index.
  alignas(64) std::uint32_t tmp[16];
  for (long j = 0; j < panel; ++j) {
    if (j >= w) {
      for (long p = 0; p < kp; ++p)
        buf[p * panel + j] = 0;
      continue;
    }
    const float* col = b + (j0 + j) * ldb + k0;
    for (long q = 0; q < kp; q += 16) {
      _mm512_store_si512(tmp, adjacent_pairs(col + 2 * q, kc - 2 * q));
      for (long t = 0; t < 16 && q + t < kp; ++t)
        buf[(q + t) * panel + j] = tmp[t];
    }
  }
}

template <int R, std::size_t... I>
inline void tile(std::index_sequence<I...>, const packed_a& pa, long i0, long kp, const std::uint32_t* bp, float* c,
                 long ldc, long w, float alpha, float beta, bool first) {
  __m512 acc[R * 4] = {((void)I, _mm512_setzero_ps())...};
  for (long p = 0; p < kp; ++p) {
    const std::uint32_t* bq = bp + p * panel;
    __m512bh bv[4];
    for (int v = 0; v < 4; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512(bq + 16 * v);
    ((acc[I] = _mm512_dpbf16_ps(
        acc[I], (__m512bh)_mm512_set1_epi32(int(pa.data[(i0 + long(I / 4)) * pa.rs + p * pa.ps])), bv[I % 4])),
     ...);
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
  auto store = [&](std::size_t i, __m512 x) {
    float* dst = c + (i0 + long(i / 4)) * ldc + 16 * long(i % 4);
    auto mk = tail_mask(w - 16 * long(i % 4));
    if (w <= 16 * long(i % 4))
      return;
    x = _mm512_mul_ps(x, al);
    if (!first)
      x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, dst));
    else if (beta != 0.0f)
      x = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(mk, dst), x);
    _mm512_mask_storeu_ps(dst, mk, x);
  };
  (store(I, acc[I]), ...);
}

template <int R>
void tile_rows(const packed_a& pa, long i0, long kp, const std::uint32_t* bp, float* c, long ldc, long w, float alpha,
               float beta, bool first) {
  tile<R>(std::make_index_sequence<std::size_t(R * 4)>{}, pa, i0, kp, bp, c, ldc, w, alpha, beta, first);
}

/// The AVX-512 BF16 kernel (the caller checked the processor has it).
void sgemm_bf16_dp(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                   const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) { // C = beta·C, as sgemm does
    for (long i = 0; i < m; ++i)
      for (long j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  thread_local std::vector<std::uint32_t> abuf, bbuf; // grow once, then reused
  abuf.resize(std::max<std::size_t>(abuf.size(), std::size_t(m) * (kc_max / 2) + 16));
  bbuf.resize(std::max<std::size_t>(bbuf.size(), std::size_t(kc_max / 2) * panel + 16));
  for (long k0 = 0; k0 < k; k0 += kc_max) {
    const long kc = std::min<long>(kc_max, k - k0), kp = (kc + 1) / 2;
    const bool first = k0 == 0;
    auto pa = pack_a(trans_a, a, lda, m, k0, kc, abuf.data());
    for (long j0 = 0; j0 < n; j0 += panel) {
      const long w = std::min<long>(panel, n - j0);
      pack_b(trans_b, b, ldb, j0, w, k0, kc, bbuf.data());
      long i = 0;
      for (; i + rows <= m; i += rows)
        tile_rows<rows>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
      switch (m - i) {
      case 0:
        break;
      case 1:
        tile_rows<1>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
        break;
      case 2:
        tile_rows<2>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
        break;
      case 3:
        tile_rows<3>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
        break;
      case 4:
        tile_rows<4>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
        break;
      default:
        tile_rows<5>(pa, i, kp, bbuf.data(), c + j0, ldc, w, alpha, beta, first);
        break;
      }
    }
  }
}

} // namespace
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#pragma GCC pop_options
#endif // TROUPE_BF16_KERNEL

namespace {

/// Rounded copies of the inputs, multiplied by sgemm_fused: the same rounding, another summation order.
void sgemm_bf16_rounded(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                        const float* b, int ldb, float beta, float* c, int ldc) {
  // Portable path: round copies of the operands to bf16, then an f32 product.
  thread_local std::vector<float> ra, rb;
  const long a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const long b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  ra.resize(std::size_t(a_rows * a_cols));
  rb.resize(std::size_t(b_rows * b_cols));
  for (long i = 0; i < a_rows; ++i)
    for (long j = 0; j < a_cols; ++j)
      ra[std::size_t(i * a_cols + j)] = round_bf16(a[i * lda + j]);
  for (long i = 0; i < b_rows; ++i)
    for (long j = 0; j < b_cols; ++j)
      rb[std::size_t(i * b_cols + j)] = round_bf16(b[i * ldb + j]);
  sgemm_fused(trans_a, trans_b, m, n, k, alpha, ra.data(), int(a_cols), rb.data(), int(b_cols), beta, c, ldc, {});
}

/// Whether the dpbf16 kernel may run: the processor has AVX-512 BF16 and the kernel
/// target (TROUPE_CPU_TARGET) is not capped below AVX-512.
bool use_dp_kernel() {
#if TROUPE_BF16_KERNEL
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  if (!cpu)
    return false;
  const std::string t = kernel_target();
  return t == "avx512" || t == "avx512_dl";
#else
  return false;
#endif
}

} // namespace

void sgemm_bf16(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                int ldb, float beta, float* c, int ldc) {
#if TROUPE_BF16_KERNEL
  if (use_dp_kernel())
    return sgemm_bf16_dp(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
#endif
  sgemm_bf16_rounded(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

} // namespace troupe::kernels::cpu
