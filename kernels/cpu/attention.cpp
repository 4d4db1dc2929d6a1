// Core attention: per (batch, head), row blocks of queries see only the keys up to
// the block's end (the causal mask), so the products skip the upper triangle.
// Products run through small_gemm, whose tiles stay in registers.
#include "kernels/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/reduce.hpp"
#include "kernels/cpu/small_gemm.hpp"

namespace troupe::kernels::cpu {

namespace {
constexpr long row_block = 8;

/// Masked softmax of row i (length seq, only [0, i] valid) in place.
inline void causal_softmax_row(float* p, long i, long seq) {
  long n = i + 1;
  float mx = row_max(p, n);
  float sum = row_exp_sum(p, mx, p, n);
  float inv = 1.0f / sum;
  for (long j = 0; j < n; ++j)
    p[j] *= inv;
  for (long j = n; j < seq; ++j)
    p[j] = 0.0f;
}
} // namespace

long attention_forward_scratch(attention_shape s) { return s.head_dim * s.seq; }
long attention_backward_scratch(attention_shape s) { return s.seq * s.seq + s.head_dim * s.seq; }

void attention_forward(const float* qkv, float* out, float* probs, float* scratch, attention_shape s) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* kt = scratch; // [hd, T]
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* p = probs + (b * s.heads + h) * T * T;
      float* o = out + b * T * c + h * hd;
      transpose(k, T, hd, ld, kt, T);
      for (long i0 = 0; i0 < T; i0 += row_block) {
        long i1 = std::min(T, i0 + row_block);
        small_gemm(i1 - i0, i1, hd, scale, q + i0 * ld, ld, 1, kt, T, p + i0 * T, T, false);
        for (long i = i0; i < i1; ++i)
          causal_softmax_row(p + i * T, i, T);
        small_gemm(i1 - i0, hd, i1, 1.0f, p + i0 * T, T, 1, v, ld, o + i0 * c, c, false);
      }
    }
}

void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv, float* scratch,
                        attention_shape s) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  float* ds = scratch;          // [T, T]
  float* vt = scratch + T * T; // [hd, T]
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      const float* k = q + c;
      const float* v = q + 2 * c;
      const float* p = probs + (b * s.heads + h) * T * T;
      const float* dout_bh = dout + b * T * c + h * hd;
      float* dq = dqkv + b * T * ld + h * hd;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      transpose(v, T, hd, ld, vt, T);
      for (long i0 = 0; i0 < T; i0 += row_block) {
        long i1 = std::min(T, i0 + row_block);
        // dP = dO Vᵀ for rows [i0, i1) and keys [0, i1), then dS = P ∘ (dP - rowsum(P ∘ dP)) · scale.
        small_gemm(i1 - i0, i1, hd, 1.0f, dout_bh + i0 * c, c, 1, vt, T, ds + i0 * T, T, false);
        for (long i = i0; i < i1; ++i) {
          const float* pr = p + i * T;
          float* dr = ds + i * T;
          long n = i + 1;
          float dot = row_dot(pr, dr, n);
          for (long j = 0; j < n; ++j)
            dr[j] = pr[j] * (dr[j] - dot) * scale;
          for (long j = n; j < i1; ++j)
            dr[j] = 0.0f;
        }
        small_gemm(i1 - i0, hd, i1, 1.0f, ds + i0 * T, T, 1, k, ld, dq + i0 * ld, ld, false);
      }
      // dK = dSᵀ Q and dV = Pᵀ dO: key row j collects query rows i >= j.
      for (long j0 = 0; j0 < T; j0 += row_block) {
        long j1 = std::min(T, j0 + row_block);
        small_gemm(j1 - j0, hd, T - j0, 1.0f, ds + j0 * T + j0, 1, T, q + j0 * ld, ld, dk + j0 * ld, ld, false);
        small_gemm(j1 - j0, hd, T - j0, 1.0f, p + j0 * T + j0, 1, T, dout_bh + j0 * c, c, dv + j0 * ld, ld, false);
      }
    }
}

void attention_forward_reference(const float* qkv, float* out, float* probs, attention_shape s) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> row(static_cast<std::size_t>(T));
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      float* p = probs + (b * s.heads + h) * T * T;
      for (long i = 0; i < T; ++i) {
        double mx = -INFINITY, sum = 0;
        for (long j = 0; j <= i; ++j) {
          double acc = 0;
          for (long d = 0; d < hd; ++d)
            acc += double(q[i * ld + d]) * double(q[j * ld + c + d]);
          row[std::size_t(j)] = acc * scale;
          mx = std::max(mx, row[std::size_t(j)]);
        }
        for (long j = 0; j <= i; ++j)
          sum += row[std::size_t(j)] = std::exp(row[std::size_t(j)] - mx);
        for (long j = 0; j < T; ++j)
          p[i * T + j] = j <= i ? float(row[std::size_t(j)] / sum) : 0.0f;
        for (long d = 0; d < hd; ++d) {
          double acc = 0;
          for (long j = 0; j <= i; ++j)
            acc += row[std::size_t(j)] / sum * double(q[j * ld + 2 * c + d]);
          out[b * T * c + i * c + h * hd + d] = float(acc);
        }
      }
    }
}

} // namespace troupe::kernels::cpu
