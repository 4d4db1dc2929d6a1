// Core attention: per (batch, head), each product is one small_gemm call whose causal
// triangle skips the masked half row group by row group; tiles stay in registers.
// The backward rebuilds each head's probabilities from the scores and the forward's lse.
// The softmax rows are written once with Highway for every SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h> // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/cpu/simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace troupe::kernels::cpu::HWY_NAMESPACE {
namespace {
/// Where a row's zeros end: small_gemm's k-mode triangles read rows up to the end of
/// their row group, so zeros go that far past the diagonal (not to T): to the next
/// multiple of tile_row_align, which every row group's size divides.
inline long zeros_end(long n, long seq) {
  return std::min(seq, (n + tile_row_align - 1) / tile_row_align * tile_row_align);
}

/// Masked softmax of one score row in place: [0, n) valid, [n, z) set to zero.
/// Returns the row's log Σ exp, what the backward rebuilds the row from.
inline float causal_softmax_row(float* p, long n, long z) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const float mx = row_max(p, n);
  const float sum = row_exp_sum(p, mx, p, n);
  const auto vinv = hn::Set(d, 1.0f / sum);
  for (long j = 0; j < z; j += N) {
    const long valid = std::clamp(n - j, 0L, N);
    store_n(hn::Mul(load_n(d, p + j, valid), vinv), d, p + j, std::min(N, z - j));
  }
  return mx + std::log(sum);
}

/// One row of the backward: the forward's probabilities again from the scores in `pr`
/// (exp(s - lse) on [0, n)), then dS = P ∘ (dP - rowsum(P ∘ dP)) · scale in `dr`;
/// both zero on [n, z).
inline void softmax_grad_row(float* pr, float* dr, float lse, float scale, long n, long z) {
  const hn::ScalableTag<float> d;
  const long N = long(hn::Lanes(d));
  const auto vl = hn::Set(d, lse);
  auto acc = hn::Zero(d);
  for (long j = 0; j < z; j += N) {
    const long valid = std::clamp(n - j, 0L, N), w = std::min(N, z - j);
    const auto m = hn::FirstN(d, std::size_t(valid));
    const auto e = hn::IfThenElseZero(m, exp(d, hn::Sub(load_n(d, pr + j, valid), vl)));
    store_n(e, d, pr + j, w);
    acc = hn::MulAdd(e, load_n(d, dr + j, valid), acc);
  }
  const auto vdot = hn::Set(d, hsum(d, acc)), vs = hn::Set(d, scale);
  for (long j = 0; j < z; j += N) {
    const long valid = std::clamp(n - j, 0L, N), w = std::min(N, z - j);
    const auto dv = hn::Mul(hn::Mul(load_n(d, pr + j, valid), hn::Sub(load_n(d, dr + j, valid), vdot)), vs);
    store_n(hn::IfThenElseZero(hn::FirstN(d, std::size_t(valid)), dv), d, dr + j, w);
  }
}
} // namespace

/// Rows [0, n) of scores `ld` apart, row i seeing keys [0, f + i + 1): softmax in place, lse[i].
void causal_softmax_rows_t(float* p, long ld, long n, long f, float* lse) {
  for (long i = 0; i < n; ++i)
    lse[i] = causal_softmax_row(p + i * ld, f + i + 1, f + zeros_end(i + 1, n));
}

/// The backward of causal_softmax_rows_t: probabilities back into p, dS into ds.
void softmax_grad_rows_t(float* p, float* ds, long ld, long n, long f, const float* lse, float scale) {
  for (long i = 0; i < n; ++i)
    softmax_grad_row(p + i * ld, ds + i * ld, lse[i], scale, f + i + 1, f + zeros_end(i + 1, n));
}

} // namespace troupe::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/small_gemm.hpp"
#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

namespace {
HWY_EXPORT(causal_softmax_rows_t);
HWY_EXPORT(softmax_grad_rows_t);

void causal_softmax_rows(float* p, long ld, long n, long f, float* lse) {
  TROUPE_DISPATCH(causal_softmax_rows_t)(p, ld, n, f, lse);
}
void softmax_grad_rows(float* p, float* ds, long ld, long n, long f, const float* lse, float scale) {
  TROUPE_DISPATCH(softmax_grad_rows_t)(p, ds, ld, n, f, lse, scale);
}
} // namespace

long attention_forward_scratch(attention_shape s) {
  return s.head_dim * s.seq + s.seq * s.seq;
}
long attention_backward_scratch(attention_shape s) {
  return 2 * s.seq * s.seq + 2 * s.head_dim * s.seq;
}

namespace {
/// Calls f(begin, end) for each document [begin, end) of row `b` (the whole row without masks).
template <class F>
void for_each_document(const std::int32_t* doc_start, long b, long T, F&& f) {
  if (!doc_start) {
    f(0L, T);
    return;
  }
  const std::int32_t* d = doc_start + b * T;
  for (long i = 0; i < T;) {
    long e = i + 1;
    while (e < T && d[e] != e)
      ++e;
    f(i, e);
    i = e;
  }
}

/// One head's causal attention over n tokens whose q, k, v rows are `ld` apart.
/// Each product is one small_gemm call whose triangle skips the masked half; the
/// probabilities are zero above the diagonal, as the k-mode triangles require.
void forward_causal(const float* q, const float* k, const float* v, long ld, float* o, long ldo, float* l, long n,
                    long hd, float scale, float* scratch) {
  float* kt = scratch;         // [hd, n]
  float* p = scratch + hd * n; // [n, n]: scores, then probabilities
  transpose(k, n, hd, ld, kt, n);
  small_gemm(n, n, hd, scale, q, ld, 1, kt, n, p, n, false, triangle::columns_to_row);
  causal_softmax_rows(p, n, n, 0, l);
  small_gemm(n, hd, n, 1.0f, p, n, 1, v, ld, o, ldo, false, triangle::k_to_row);
}

/// The backward of forward_causal: dq, dk, dv (rows `ld` apart) from dout.
void backward_causal(const float* q, const float* k, const float* v, long ld, const float* dout, long ldo,
                     const float* l, float* dq, float* dk, float* dv, long n, long hd, float scale, float* scratch) {
  float* p = scratch;              // [n, n]: probabilities, rebuilt from the scores and lse
  float* ds = scratch + n * n;     // [n, n]
  float* kt = scratch + 2 * n * n; // [hd, n]
  float* vt = kt + hd * n;         // [hd, n]
  transpose(k, n, hd, ld, kt, n);
  transpose(v, n, hd, ld, vt, n);
  // P exactly as the forward computed its scores, then dP = dO Vᵀ.
  small_gemm(n, n, hd, scale, q, ld, 1, kt, n, p, n, false, triangle::columns_to_row);
  small_gemm(n, n, hd, 1.0f, dout, ldo, 1, vt, n, ds, n, false, triangle::columns_to_row);
  softmax_grad_rows(p, ds, n, n, 0, l, scale);
  // dQ = dS K; dK = dSᵀ Q and dV = Pᵀ dO, where key row j collects query rows i ≥ j.
  small_gemm(n, hd, n, 1.0f, ds, n, 1, k, ld, dq, ld, false, triangle::k_to_row);
  small_gemm(n, hd, n, 1.0f, ds, 1, n, q, ld, dk, ld, false, triangle::k_from_row);
  small_gemm(n, hd, n, 1.0f, p, 1, n, dout, ldo, dv, ld, false, triangle::k_from_row);
}
} // namespace

bool documents_well_formed(const std::int32_t* doc_start, long batch, long seq) {
  for (long b = 0; b < batch; ++b) {
    const std::int32_t* d = doc_start + b * seq;
    for (long i = 0; i < seq; ++i)
      if (i == 0 ? d[0] != 0 : d[i] != d[i - 1] && d[i] != i)
        return false;
  }
  return true;
}

void attention_forward(const float* qkv, float* out, float* lse, float* scratch, attention_shape s,
                       const std::int32_t* doc_start) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (long b = 0; b < s.batch; ++b)
    for_each_document(doc_start, b, T, [&](long i0, long i1) {
      for (long h = 0; h < s.heads; ++h) {
        const float* q = qkv + (b * T + i0) * ld + h * hd;
        forward_causal(q, q + c, q + 2 * c, ld, out + (b * T + i0) * c + h * hd, c, lse + (b * s.heads + h) * T + i0,
                       i1 - i0, hd, scale, scratch);
      }
    });
}

void attention_backward(const float* dout, const float* qkv, const float* lse, float* dqkv, float* scratch,
                        attention_shape s, const std::int32_t* doc_start) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (long b = 0; b < s.batch; ++b)
    for_each_document(doc_start, b, T, [&](long i0, long i1) {
      for (long h = 0; h < s.heads; ++h) {
        const long row = (b * T + i0) * ld + h * hd;
        const float* q = qkv + row;
        float* dq = dqkv + row;
        backward_causal(q, q + c, q + 2 * c, ld, dout + (b * T + i0) * c + h * hd, c, lse + (b * s.heads + h) * T + i0,
                        dq, dq + c, dq + 2 * c, i1 - i0, hd, scale, scratch);
      }
    });
}

long attention_shard_forward_scratch(long nq, long nkv, long head_dim) {
  return head_dim * nkv + nq * nkv;
}
long attention_shard_backward_scratch(long nq, long nkv, long head_dim) {
  return 2 * head_dim * nkv + 2 * nq * nkv;
}

// Per head: scores P [nq, nkv] = the rectangle of keys [0, f) (every query sees
// them, f = nkv − nq) beside the triangle of keys [f, nkv), laid out as in
// forward_causal shifted right by f, so the triangle modes read what they read there.
void attention_shard_forward(const float* q, const float* k, const float* v, float* out, float* lse, float* scratch,
                             long nq, long nkv, long heads, long hd) {
  const long c = heads * hd, n = nq, m = nkv, f = nkv - nq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* kt = scratch;         // [hd, m]
  float* p = scratch + hd * m; // [n, m]
  for (long h = 0; h < heads; ++h) {
    const float *qh = q + h * hd, *kh = k + h * hd, *vh = v + h * hd;
    float* oh = out + h * hd;
    transpose(kh, m, hd, c, kt, m);
    if (f > 0)
      small_gemm(n, f, hd, scale, qh, c, 1, kt, m, p, m, false);
    small_gemm(n, n, hd, scale, qh, c, 1, kt + f, m, p + f, m, false, triangle::columns_to_row);
    causal_softmax_rows(p, m, n, f, lse + h * n);
    if (f > 0)
      small_gemm(n, hd, f, 1.0f, p, m, 1, vh, c, oh, c, false);
    small_gemm(n, hd, n, 1.0f, p + f, m, 1, vh + f * c, c, oh, c, f > 0, triangle::k_to_row);
  }
}

void attention_shard_backward(const float* dout, const float* q, const float* k, const float* v, const float* lse,
                              float* dq, float* dk, float* dv, float* scratch, long nq, long nkv, long heads, long hd) {
  const long c = heads * hd, n = nq, m = nkv, f = nkv - nq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* p = scratch;          // [n, m]: probabilities, rebuilt from the scores and lse
  float* ds = scratch + n * m; // [n, m]
  float* kt = ds + n * m;      // [hd, m]
  float* vt = kt + hd * m;     // [hd, m]
  for (long h = 0; h < heads; ++h) {
    const long o = h * hd;
    const float *qh = q + o, *kh = k + o, *vh = v + o, *doh = dout + o;
    transpose(kh, m, hd, c, kt, m);
    transpose(vh, m, hd, c, vt, m);
    if (f > 0) {
      small_gemm(n, f, hd, scale, qh, c, 1, kt, m, p, m, false);
      small_gemm(n, f, hd, 1.0f, doh, c, 1, vt, m, ds, m, false);
    }
    small_gemm(n, n, hd, scale, qh, c, 1, kt + f, m, p + f, m, false, triangle::columns_to_row);
    small_gemm(n, n, hd, 1.0f, doh, c, 1, vt + f, m, ds + f, m, false, triangle::columns_to_row);
    softmax_grad_rows(p, ds, m, n, f, lse + h * n, scale);
    // dQ = dS K; dK = dSᵀ Q and dV = Pᵀ dO: prefix keys collect every query, the triangle's those at or after them.
    if (f > 0) {
      small_gemm(n, hd, f, 1.0f, ds, m, 1, kh, c, dq + o, c, false);
      small_gemm(f, hd, n, 1.0f, ds, 1, m, qh, c, dk + o, c, false);
      small_gemm(f, hd, n, 1.0f, p, 1, m, doh, c, dv + o, c, false);
    }
    small_gemm(n, hd, n, 1.0f, ds + f, m, 1, kh + f * c, c, dq + o, c, f > 0, triangle::k_to_row);
    small_gemm(n, hd, n, 1.0f, ds + f, 1, m, qh, c, dk + f * c + o, c, false, triangle::k_from_row);
    small_gemm(n, hd, n, 1.0f, p + f, 1, m, doh, c, dv + f * c + o, c, false, triangle::k_from_row);
  }
}

namespace {
/// The first key query i of row b may attend (the reference's mask, per score).
long first_key(const std::int32_t* doc_start, long b, long T, long i) {
  return doc_start ? doc_start[b * T + i] : 0;
}
} // namespace

void attention_forward_reference(const float* qkv, float* out, float* lse, attention_shape s,
                                 const std::int32_t* doc_start) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> row(static_cast<std::size_t>(T));
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      for (long i = 0; i < T; ++i) {
        const long lo = first_key(doc_start, b, T, i);
        double mx = -INFINITY, sum = 0;
        for (long j = lo; j <= i; ++j) {
          double acc = 0;
          for (long d = 0; d < hd; ++d)
            acc += double(q[i * ld + d]) * double(q[j * ld + c + d]);
          row[std::size_t(j)] = acc * scale;
          mx = std::max(mx, row[std::size_t(j)]);
        }
        for (long j = lo; j <= i; ++j)
          sum += row[std::size_t(j)] = std::exp(row[std::size_t(j)] - mx);
        lse[(b * s.heads + h) * T + i] = float(mx + std::log(sum));
        for (long d = 0; d < hd; ++d) {
          double acc = 0;
          for (long j = lo; j <= i; ++j)
            acc += row[std::size_t(j)] / sum * double(q[j * ld + 2 * c + d]);
          out[b * T * c + i * c + h * hd + d] = float(acc);
        }
      }
    }
}

void attention_backward_reference(const float* dout, const float* qkv, float* dqkv, attention_shape s,
                                  const std::int32_t* doc_start) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto n = static_cast<std::size_t>(T * T);
  std::vector<double> p(n), ds(n);
  auto at = [T](std::vector<double>& m, long i, long j) -> double& { return m[std::size_t(i * T + j)]; };
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      const float* k = q + c;
      const float* v = q + 2 * c;
      const float* dO = dout + b * T * c + h * hd;
      float* dq = dqkv + b * T * ld + h * hd;
      std::fill(p.begin(), p.end(), 0.0);
      std::fill(ds.begin(), ds.end(), 0.0);
      for (long i = 0; i < T; ++i) {
        const long lo = first_key(doc_start, b, T, i);
        double mx = -INFINITY, sum = 0, dot = 0;
        for (long j = lo; j <= i; ++j) {
          double acc = 0;
          for (long d = 0; d < hd; ++d)
            acc += double(q[i * ld + d]) * double(k[j * ld + d]);
          at(p, i, j) = acc * scale;
          mx = std::max(mx, at(p, i, j));
        }
        for (long j = lo; j <= i; ++j)
          sum += at(p, i, j) = std::exp(at(p, i, j) - mx);
        for (long j = lo; j <= i; ++j) {
          at(p, i, j) /= sum;
          double acc = 0;
          for (long d = 0; d < hd; ++d)
            acc += double(dO[i * c + d]) * double(v[j * ld + d]);
          at(ds, i, j) = acc;
          dot += at(p, i, j) * acc;
        }
        for (long j = lo; j <= i; ++j)
          at(ds, i, j) = at(p, i, j) * (at(ds, i, j) - dot) * scale;
      }
      for (long r = 0; r < T; ++r)
        for (long d = 0; d < hd; ++d) {
          double gq = 0, gk = 0, gv = 0;
          for (long j = 0; j <= r; ++j)
            gq += at(ds, r, j) * double(k[j * ld + d]);
          for (long i = r; i < T; ++i) {
            gk += at(ds, i, r) * double(q[i * ld + d]);
            gv += at(p, i, r) * double(dO[i * c + d]);
          }
          dq[r * ld + d] = float(gq);
          dq[r * ld + c + d] = float(gk);
          dq[r * ld + 2 * c + d] = float(gv);
        }
    }
}

} // namespace troupe::kernels::cpu
#endif // HWY_ONCE
