// Double-precision reference forwards of every op and of the whole GPT, for tests:
// finite differences of these are what the f32 backward passes are checked against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/gpt.hpp"

namespace troupe::ops::reference {

using vec = std::vector<double>;

/// Layer norm over rows of `cols` (eps 1e-5).
inline vec layer_norm(const vec& x, const vec& g, const vec& b, long rows, long cols) {
  vec y(x.size());
  for (long r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (long i = 0; i < cols; ++i)
      mu += x[std::size_t(r * cols + i)];
    mu /= double(cols);
    for (long i = 0; i < cols; ++i)
      var += (x[std::size_t(r * cols + i)] - mu) * (x[std::size_t(r * cols + i)] - mu);
    double rs = 1.0 / std::sqrt(var / double(cols) + 1e-5);
    for (long i = 0; i < cols; ++i) {
      auto k = std::size_t(r * cols + i);
      y[k] = (x[k] - mu) * rs * g[std::size_t(i)] + b[std::size_t(i)];
    }
  }
  return y;
}

/// y = x Wᵀ + b with W [out, in]; `b` may be empty.
inline vec linear(const vec& x, const vec& w, const vec& b, long rows, long in, long out) {
  vec y(std::size_t(rows * out));
  for (long r = 0; r < rows; ++r)
    for (long o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[std::size_t(o)];
      for (long i = 0; i < in; ++i)
        acc += x[std::size_t(r * in + i)] * w[std::size_t(o * in + i)];
      y[std::size_t(r * out + o)] = acc;
    }
  return y;
}

/// GELU, tanh approximation.
inline vec gelu(const vec& x) {
  vec y(x.size());
  const double k0 = std::sqrt(2.0 / M_PI);
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(k0 * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

/// Causal attention on packed qkv [B, T, 3C] → [B, T, C]; with `doc_start` ([B, T],
/// kernels/cpu/attention.hpp) query i sees keys doc_start[i] ≤ j ≤ i only.
inline vec attention(const vec& qkv, long batch, long seq, long heads, long hd,
                     const std::int32_t* doc_start = nullptr) {
  const long c = heads * hd, ld = 3 * c;
  vec out(std::size_t(batch * seq * c));
  vec row(static_cast<std::size_t>(seq));
  for (long b = 0; b < batch; ++b)
    for (long h = 0; h < heads; ++h)
      for (long i = 0; i < seq; ++i) {
        const long lo = doc_start ? doc_start[b * seq + i] : 0;
        double mx = -1e300, sum = 0;
        for (long j = lo; j <= i; ++j) {
          double acc = 0;
          for (long d = 0; d < hd; ++d)
            acc +=
              qkv[std::size_t((b * seq + i) * ld + h * hd + d)] * qkv[std::size_t((b * seq + j) * ld + c + h * hd + d)];
          row[std::size_t(j)] = acc / std::sqrt(double(hd));
          mx = std::max(mx, row[std::size_t(j)]);
        }
        for (long j = lo; j <= i; ++j)
          sum += row[std::size_t(j)] = std::exp(row[std::size_t(j)] - mx);
        for (long d = 0; d < hd; ++d) {
          double acc = 0;
          for (long j = lo; j <= i; ++j)
            acc += row[std::size_t(j)] / sum * qkv[std::size_t((b * seq + j) * ld + 2 * c + h * hd + d)];
          out[std::size_t((b * seq + i) * c + h * hd + d)] = acc;
        }
      }
  return out;
}

/// Mean cross-entropy over rows whose target is not `ignore`.
inline double cross_entropy(const vec& logits, const std::vector<std::int32_t>& targets, long vocab,
                            std::int32_t ignore) {
  double total = 0;
  long n = 0;
  for (std::size_t r = 0; r < targets.size(); ++r) {
    if (targets[r] == ignore)
      continue;
    const double* x = logits.data() + r * std::size_t(vocab);
    double mx = *std::max_element(x, x + vocab), sum = 0;
    for (long j = 0; j < vocab; ++j)
      sum += std::exp(x[j] - mx);
    total += std::log(sum) + mx - x[targets[r]];
    ++n;
  }
  return n ? total / double(n) : 0.0;
}

/// Token + position embedding.
inline vec embedding(const std::vector<std::int32_t>& tokens, const vec& wte, const vec& wpe, long batch, long seq,
                     long c) {
  vec out(std::size_t(batch * seq * c));
  for (long b = 0; b < batch; ++b)
    for (long t = 0; t < seq; ++t)
      for (long i = 0; i < c; ++i)
        out[std::size_t((b * seq + t) * c + i)] =
          wte[std::size_t(tokens[std::size_t(b * seq + t)] * c + i)] + wpe[std::size_t(t * c + i)];
  return out;
}

/// Parameters by name, in double.
using param_map = std::map<std::string, vec>;

/// The whole GPT's mean loss in double precision.
inline double gpt_loss(const gpt_config& cfg, const param_map& p, const std::vector<std::int32_t>& tokens,
                       const std::vector<std::int32_t>& targets, long batch, long seq) {
  const long c = cfg.d_model, n = batch * seq, hd = c / cfg.heads;
  auto x = embedding(tokens, p.at("wte"), p.at("wpe"), batch, seq, c);
  for (int l = 0; l < cfg.layers; ++l) {
    auto q = [&](const char* s) -> const vec& { return p.at("h." + std::to_string(l) + "." + s); };
    auto ln1 = layer_norm(x, q("ln_1.weight"), q("ln_1.bias"), n, c);
    auto qkv = linear(ln1, q("attn.c_attn.weight"), q("attn.c_attn.bias"), n, c, 3 * c);
    auto att = attention(qkv, batch, seq, cfg.heads, hd);
    auto proj = linear(att, q("attn.c_proj.weight"), q("attn.c_proj.bias"), n, c, c);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += proj[i];
    auto ln2 = layer_norm(x, q("ln_2.weight"), q("ln_2.bias"), n, c);
    auto fc = gelu(linear(ln2, q("mlp.c_fc.weight"), q("mlp.c_fc.bias"), n, c, 4 * c));
    auto m = linear(fc, q("mlp.c_proj.weight"), q("mlp.c_proj.bias"), n, 4 * c, c);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += m[i];
  }
  auto lnf = layer_norm(x, p.at("ln_f.weight"), p.at("ln_f.bias"), n, c);
  auto logits = linear(lnf, p.at("lm_head.weight"), {}, n, c, cfg.vocab);
  return cross_entropy(logits, targets, cfg.vocab, cfg.ignore_index);
}

} // namespace troupe::ops::reference
