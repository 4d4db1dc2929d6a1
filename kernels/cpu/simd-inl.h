// SIMD helpers shared by the CPU kernels, written once with Google Highway and
// compiled for every target (AVX-512, AVX2, SSE4, NEON, a portable baseline): tail
// loads and stores that never touch memory past the end, exp and tanh, row reductions.
// Included by a kernel's per-target part (after hwy/highway.h under foreach_target.h).

// Per-target include guard, the form Highway's own -inl.h headers use.
#if defined(TROUPE_KERNELS_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TROUPE_KERNELS_CPU_SIMD_INL_H_
#undef TROUPE_KERNELS_CPU_SIMD_INL_H_
#else
#define TROUPE_KERNELS_CPU_SIMD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

/// Marks a lambda as always inlined: GCC 12 otherwise keeps a register tile's store
/// lambda out of line, a call per accumulator with the vector passed through memory.
#ifndef TROUPE_INLINE_LAMBDA
#define TROUPE_INLINE_LAMBDA __attribute__((always_inline))
#endif

/// Whether this target has masked loads and stores that leave the masked-off lanes'
/// memory untouched (AVX2's vmaskmov, AVX-512's masks). Elsewhere Highway 1.0's
/// MaskedLoad reads the whole vector, which may cross into an unmapped page.
constexpr bool native_masks = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2;

/// Vector registers of this target: how many accumulators a register tile may hold.
constexpr int vector_registers = (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3) ? 16 : 32;

/// small_gemm's register tiles have a number of rows that divides this. A causal
/// product's k-mode triangles read a whole tile's rows, so attention zeroes each score
/// row up to the next multiple of it past the diagonal (4, 8, 16 rows with 32 vector
/// registers; 6 and 12 with 16).
constexpr long tile_row_align = vector_registers >= 32 ? 16 : 12;

/// The first `n` lanes of p (0 ≤ n ≤ Lanes(d)), the rest zero; reads only those lanes.
template <class D>
HWY_INLINE hn::Vec<D> load_n(D d, const hn::TFromD<D>* p, long n) {
  if constexpr (native_masks) {
    return hn::MaskedLoad(hn::FirstN(d, std::size_t(n)), d, p);
  } else {
    HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)] = {};
    std::memcpy(buf, p, std::size_t(n) * sizeof(*p));
    return hn::Load(d, buf);
  }
}

/// Stores the first `n` lanes of v to p (0 ≤ n ≤ Lanes(d)); writes only those lanes.
template <class D>
HWY_INLINE void store_n(hn::Vec<D> v, D d, hn::TFromD<D>* p, long n) {
  if constexpr (native_masks) {
    hn::BlendedStore(v, hn::FirstN(d, std::size_t(n)), d, p);
  } else {
    HWY_ALIGN hn::TFromD<D> buf[hn::MaxLanes(d)];
    hn::Store(v, d, buf);
    std::memcpy(p, buf, std::size_t(n) * sizeof(*p));
  }
}

template <class D>
HWY_INLINE hn::Vec<D> exp_clamped(D d, hn::Vec<D> x);

/// exp(x): range reduction by ln 2 and a degree-6 polynomial (rel. error < 2e-7, the
/// Cephes expf coefficients), for x up to 88 (exp(88) = 1.65e38; larger x give that):
/// troupe's callers take exp of x - max (≤ 0) or of 2x in tanh, which is 1 from x = 9 on.
/// Clamped to [-87.3, 88], 2^n stays a normal float, so it is built in one step. NaN
/// stays NaN: x86's min and max return their second operand when one is NaN, and x
/// goes second; elsewhere (Highway's scalar baseline drops NaN) NaN is put back.
template <class D>
HWY_INLINE hn::Vec<D> exp(D d, hn::Vec<D> x) {
  if constexpr (!(HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3))
    return hn::IfThenElse(hn::IsNaN(x), x, exp_clamped(d, x));
  else
    return exp_clamped(d, x);
}

/// exp without the NaN fix-up (see exp).
template <class D>
HWY_INLINE hn::Vec<D> exp_clamped(D d, hn::Vec<D> x) {
  const hn::Rebind<std::int32_t, D> di;
  const auto xc = hn::Max(hn::Set(d, -87.3f), hn::Min(hn::Set(d, 88.0f), x));
  const auto n = hn::Round(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)));
  auto r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  auto p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  const auto pow2n = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::Mul(p, pow2n);
}

/// tanh(x) = 1 - 2 / (exp(2x) + 1); accurate to a few 1e-7 absolute.
template <class D>
HWY_INLINE hn::Vec<D> tanh(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  const auto e = exp(d, hn::Add(x, x));
  return hn::Sub(one, hn::Div(hn::Set(d, 2.0f), hn::Add(e, one)));
}

/// Sum of the lanes.
template <class D>
HWY_INLINE float hsum(D d, hn::Vec<D> v) {
  return hn::GetLane(hn::SumOfLanes(d, v));
}

/// Sum of x[0..n).
HWY_INLINE float row_sum(const float* x, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  auto acc = hn::Zero(d);
  long i = 0;
  for (; i + N <= n; i += N)
    acc = hn::Add(acc, hn::LoadU(d, x + i));
  if (i < n)
    acc = hn::Add(acc, load_n(d, x + i, n - i));
  return hsum(d, acc);
}

/// Sum of x[i] * y[i] over [0..n).
HWY_INLINE float row_dot(const float* x, const float* y, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  auto acc = hn::Zero(d);
  long i = 0;
  for (; i + N <= n; i += N)
    acc = hn::MulAdd(hn::LoadU(d, x + i), hn::LoadU(d, y + i), acc);
  if (i < n)
    acc = hn::MulAdd(load_n(d, x + i, n - i), load_n(d, y + i, n - i), acc);
  return hsum(d, acc);
}

/// Sum of (x[i] - c)^2 over [0..n).
HWY_INLINE float row_sq_dev(const float* x, float c, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const auto vc = hn::Set(d, c);
  auto acc = hn::Zero(d);
  long i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::Sub(hn::LoadU(d, x + i), vc);
    acc = hn::MulAdd(v, v, acc);
  }
  if (i < n) {
    const auto v = hn::IfThenElseZero(hn::FirstN(d, std::size_t(n - i)), hn::Sub(load_n(d, x + i, n - i), vc));
    acc = hn::MulAdd(v, v, acc);
  }
  return hsum(d, acc);
}

/// Largest of x[0..n) (n ≥ 1). A NaN may be dropped here; the exp-sum that follows
/// every use turns it into a NaN loss all the same.
HWY_INLINE float row_max(const float* x, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  auto acc = hn::Set(d, -INFINITY);
  long i = 0;
  for (; i + N <= n; i += N)
    acc = hn::Max(acc, hn::LoadU(d, x + i));
  if (i < n)
    acc =
      hn::Max(acc, hn::IfThenElse(hn::FirstN(d, std::size_t(n - i)), load_n(d, x + i, n - i), hn::Set(d, -INFINITY)));
  return hn::GetLane(hn::MaxOfLanes(d, acc));
}

/// y[i] = exp(x[i] - c) and returns their sum, over [0..n).
HWY_INLINE float row_exp_sum(const float* x, float c, float* y, long n) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const auto vc = hn::Set(d, c);
  auto acc = hn::Zero(d);
  long i = 0;
  for (; i + N <= n; i += N) {
    const auto e = exp(d, hn::Sub(hn::LoadU(d, x + i), vc));
    hn::StoreU(e, d, y + i);
    acc = hn::Add(acc, e);
  }
  if (i < n) {
    const auto e = hn::IfThenElseZero(hn::FirstN(d, std::size_t(n - i)), exp(d, hn::Sub(load_n(d, x + i, n - i), vc)));
    store_n(e, d, y + i, n - i);
    acc = hn::Add(acc, e);
  }
  return hsum(d, acc);
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif // per-target include guard
