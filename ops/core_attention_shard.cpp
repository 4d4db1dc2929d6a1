// Shard attention on the CPU: row by row per head, each query over its causal
// prefix, in f32 with the row's max subtracted (no [q, kv] matrix is kept: the
// backward rebuilds each row from the forward's lse, as core attention does).
#include "ops/core_attention_shard.hpp"

#include <cmath>
#include <cstring>
#include <vector>

#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {

struct shard_shape {
  long nq, nkv, heads, hd, c;
};

shard_shape check(const tensor_handle& q, const tensor_handle& k, const tensor_handle& v, int heads, const char* op) {
  require_f32(q, op, "q");
  require_f32(k, op, "k");
  require_f32(v, op, "v");
  require(q.rank() == 2 && k.rank() == 2 && v.rank() == 2, op, "q, k and v must be [tokens, C]");
  const long c = q.dim(1);
  require(k.dim(1) == c && v.dim(1) == c && k.dim(0) == v.dim(0), op, "k and v must be [kv, C] with q's C");
  require(q.dim(0) >= 1 && q.dim(0) <= k.dim(0), op, "a shard has 1 to kv queries");
  require(heads > 0 && c % heads == 0, op, "C must be heads · head_dim");
  require(q.device().is_cpu(), op, "shard attention runs on the CPU");
  return {q.dim(0), k.dim(0), heads, c / heads, c};
}

} // namespace

tensor_handle shard_attention_forward(const tensor_handle& q, const tensor_handle& k, const tensor_handle& v,
                                      int heads, shard_attention_saved& saved) {
  constexpr auto op = "shard_attention_forward";
  auto s = check(q, k, v, heads, op);
  auto out = tensor_handle::empty({s.nq, s.c});
  saved.lse = tensor_handle::empty({s.heads, s.nq});
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  const float *Q = q.data<float>(), *K = k.data<float>(), *V = v.data<float>();
  float *O = out.data<float>(), *L = saved.lse.data<float>();
  std::vector<float> row(static_cast<std::size_t>(s.nkv));
  const long first = s.nkv - s.nq; // position of query 0
  for (long h = 0; h < s.heads; ++h)
    for (long i = 0; i < s.nq; ++i) {
      const long n = first + i + 1; // keys 0 … first + i
      const float* qi = Q + i * s.c + h * s.hd;
      float mx = -INFINITY;
      for (long j = 0; j < n; ++j) {
        float acc = 0;
        for (long d = 0; d < s.hd; ++d)
          acc += qi[d] * K[j * s.c + h * s.hd + d];
        row[std::size_t(j)] = acc * scale;
        mx = std::max(mx, row[std::size_t(j)]);
      }
      float sum = 0;
      for (long j = 0; j < n; ++j)
        sum += row[std::size_t(j)] = std::exp(row[std::size_t(j)] - mx);
      float* oi = O + i * s.c + h * s.hd;
      std::memset(oi, 0, sizeof(float) * std::size_t(s.hd));
      for (long j = 0; j < n; ++j) {
        const float p = row[std::size_t(j)] / sum;
        for (long d = 0; d < s.hd; ++d)
          oi[d] += p * V[j * s.c + h * s.hd + d];
      }
      L[h * s.nq + i] = mx + std::log(sum);
    }
  return out;
}

shard_attention_grads shard_attention_backward(const tensor_handle& dout, const tensor_handle& q,
                                               const tensor_handle& k, const tensor_handle& v,
                                               const shard_attention_saved& saved, int heads) {
  constexpr auto op = "shard_attention_backward";
  auto s = check(q, k, v, heads, op);
  require_f32(dout, op, "dout", s.c);
  require(dout.numel() == s.nq * s.c, op, "dout must be [q, C]");
  require(saved.lse.defined() && saved.lse.numel() == s.heads * s.nq, op, "saved statistics do not match q");
  shard_attention_grads g{tensor_handle::empty({s.nq, s.c}), tensor_handle::empty({s.nkv, s.c}),
                          tensor_handle::empty({s.nkv, s.c})};
  std::memset(g.dq.raw(), 0, g.dq.nbytes());
  std::memset(g.dk.raw(), 0, g.dk.nbytes());
  std::memset(g.dv.raw(), 0, g.dv.nbytes());
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  const float *Q = q.data<float>(), *K = k.data<float>(), *V = v.data<float>(), *dO = dout.data<float>();
  const float* L = saved.lse.data<float>();
  float *dQ = g.dq.data<float>(), *dK = g.dk.data<float>(), *dV = g.dv.data<float>();
  std::vector<float> p(static_cast<std::size_t>(s.nkv)), dp(p.size());
  const long first = s.nkv - s.nq;
  for (long h = 0; h < s.heads; ++h)
    for (long i = 0; i < s.nq; ++i) {
      const long n = first + i + 1, off = h * s.hd;
      const float *qi = Q + i * s.c + off, *doi = dO + i * s.c + off;
      float dot = 0;
      for (long j = 0; j < n; ++j) { // P from the scores and lse, dP = dO Vᵀ
        float sc = 0, g2 = 0;
        for (long d = 0; d < s.hd; ++d) {
          sc += qi[d] * K[j * s.c + off + d];
          g2 += doi[d] * V[j * s.c + off + d];
        }
        p[std::size_t(j)] = std::exp(sc * scale - L[h * s.nq + i]);
        dp[std::size_t(j)] = g2;
        dot += p[std::size_t(j)] * g2;
      }
      float* dqi = dQ + i * s.c + off;
      for (long j = 0; j < n; ++j) {
        const float pj = p[std::size_t(j)], ds = pj * (dp[std::size_t(j)] - dot) * scale;
        for (long d = 0; d < s.hd; ++d) {
          dqi[d] += ds * K[j * s.c + off + d];
          dK[j * s.c + off + d] += ds * qi[d];
          dV[j * s.c + off + d] += pj * doi[d];
        }
      }
    }
  return g;
}

} // namespace troupe::ops
