// Core attention: per (batch, head) two matrix products around a masked softmax.
// Products use row blocks so the causal upper triangle is mostly skipped.
#include "kernels/cpu/attention.hpp"

#include <cmath>
#include <vector>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/reduce.hpp"

namespace troupe::kernels::cpu {

namespace {
constexpr long row_block = 32;

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

void attention_forward(const float* qkv, float* out, float* probs, attention_shape s) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (long b = 0; b < s.batch; ++b)
    for (long h = 0; h < s.heads; ++h) {
      const float* q = qkv + b * T * ld + h * hd;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* p = probs + (b * s.heads + h) * T * T;
      float* o = out + b * T * c + h * hd;
      for (long i0 = 0; i0 < T; i0 += row_block) {
        long i1 = std::min(T, i0 + row_block);
        // Scores for rows [i0, i1) need keys [0, i1) only.
        sgemm(false, true, int(i1 - i0), int(i1), int(hd), scale, q + i0 * ld, int(ld), k, int(ld), 0.0f,
              p + i0 * T, int(T));
        for (long i = i0; i < i1; ++i)
          causal_softmax_row(p + i * T, i, T);
        sgemm(false, false, int(i1 - i0), int(hd), int(i1), 1.0f, p + i0 * T, int(T), v, int(ld), 0.0f,
              o + i0 * c, int(c));
      }
    }
}

void attention_backward(const float* dout, const float* qkv, const float* probs, float* dqkv,
                        float* scratch, attention_shape s) {
  const long c = s.heads * s.head_dim, ld = 3 * c, T = s.seq, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
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
      float* ds = scratch;
      for (long i0 = 0; i0 < T; i0 += row_block) {
        long i1 = std::min(T, i0 + row_block);
        // dP = dO Vᵀ for rows [i0, i1), keys [0, i1).
        sgemm(false, true, int(i1 - i0), int(i1), int(hd), 1.0f, dout_bh + i0 * c, int(c), v, int(ld), 0.0f,
              ds + i0 * T, int(T));
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
        // dQ rows [i0, i1) = dS[i0:i1, 0:i1] K[0:i1].
        sgemm(false, false, int(i1 - i0), int(hd), int(i1), 1.0f, ds + i0 * T, int(T), k, int(ld), 0.0f,
              dq + i0 * ld, int(ld));
      }
      // dK = dSᵀ Q and dV = Pᵀ dO; key row j gets contributions from query rows i >= j.
      for (long j0 = 0; j0 < T; j0 += row_block) {
        long j1 = std::min(T, j0 + row_block);
        int rows = int(T - j0);
        sgemm(true, false, int(j1 - j0), int(hd), rows, 1.0f, ds + j0 * T + j0, int(T), q + j0 * ld, int(ld),
              0.0f, dk + j0 * ld, int(ld));
        sgemm(true, false, int(j1 - j0), int(hd), rows, 1.0f, p + j0 * T + j0, int(T), dout_bh + j0 * c, int(c),
              0.0f, dv + j0 * ld, int(ld));
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
