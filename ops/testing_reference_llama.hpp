// Double-precision reference forwards of Llama's ops and of the whole Llama-family
// model, for tests: written from the definitions (Hugging Face's modeling_llama),
// sharing nothing with the kernels but the generic linear, attention and loss.
#pragma once

#include "ops/testing_reference.hpp"

namespace troupe::ops::reference {

/// RMSNorm over rows of `cols`: x / √(mean(x²) + eps) · w.
inline vec rms_norm(const vec& x, const vec& w, long rows, long cols, double eps = 1e-5) {
  vec y(x.size());
  for (long r = 0; r < rows; ++r) {
    double ss = 0;
    for (long i = 0; i < cols; ++i)
      ss += x[std::size_t(r * cols + i)] * x[std::size_t(r * cols + i)];
    const double rs = 1.0 / std::sqrt(ss / double(cols) + eps);
    for (long i = 0; i < cols; ++i)
      y[std::size_t(r * cols + i)] = x[std::size_t(r * cols + i)] * rs * w[std::size_t(i)];
  }
  return y;
}

/// silu(gate) · up, from separate gate and up.
inline vec swiglu(const vec& gate, const vec& up) {
  vec y(gate.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

/// HF's apply_rotary_pos_emb on `heads` heads of hd per row of x [rows, heads·hd]:
/// x·cos + rotate_half(x)·sin, angle pos · θ^(-2i/hd) for i < hd/2 (repeated for the second half).
inline vec rope(const vec& x, const std::vector<std::int32_t>& pos, long heads, long hd, double theta) {
  vec y(x.size());
  const long half = hd / 2, w = heads * hd;
  for (std::size_t r = 0; r < pos.size(); ++r)
    for (long h = 0; h < heads; ++h)
      for (long i = 0; i < hd; ++i) {
        const double a = pos[r] * std::pow(theta, -2.0 * double(i % half) / double(hd));
        const auto k = r * std::size_t(w) + std::size_t(h * hd + i);
        const double rot = i < half ? -x[k + std::size_t(half)] : x[k - std::size_t(half)];
        y[k] = x[k] * std::cos(a) + rot * std::sin(a);
      }
  return y;
}

/// Positions: t, or t - the token's document start.
inline std::vector<std::int32_t> positions(long batch, long seq, const std::int32_t* doc_start = nullptr) {
  std::vector<std::int32_t> p;
  for (long b = 0; b < batch; ++b)
    for (long t = 0; t < seq; ++t)
      p.push_back(std::int32_t(t - (doc_start ? doc_start[b * seq + t] : 0)));
  return p;
}

/// Columns [from, from + n) of rows of width w.
inline vec columns(const vec& x, long w, long from, long n) {
  vec y;
  for (std::size_t r = 0; r < x.size() / std::size_t(w); ++r)
    y.insert(y.end(), x.begin() + long(r) * w + from, x.begin() + long(r) * w + from + n);
  return y;
}

/// q [rows, C], k and v [rows, KV] → [rows, 3C] for attention(): q and k turned, each
/// kv head repeated for its group (HF's repeat_kv).
inline vec rope_pack(const vec& q0, const vec& k0, const vec& v, const std::vector<std::int32_t>& pos, long rows,
                     long c, long heads, long kv_heads, double theta) {
  const long hd = c / heads, kv = kv_heads * hd, group = heads / kv_heads;
  auto q = rope(q0, pos, heads, hd, theta);
  auto k = rope(k0, pos, kv_heads, hd, theta);
  vec qkv(std::size_t(rows * 3 * c));
  for (long r = 0; r < rows; ++r)
    for (long h = 0; h < heads; ++h)
      for (long i = 0; i < hd; ++i) {
        const auto o = std::size_t(r * 3 * c + h * hd + i), s = std::size_t(r * kv + (h / group) * hd + i);
        qkv[o] = q[std::size_t(r * c + h * hd + i)];
        qkv[o + std::size_t(c)] = k[s];
        qkv[o + std::size_t(2 * c)] = v[s];
      }
  return qkv;
}

/// Llama attention's input: q, k, v projected separately, then rope_pack.
inline vec llama_qkv(const vec& ln, const vec& wq, const vec& wk, const vec& wv, const std::vector<std::int32_t>& pos,
                     long rows, long c, long heads, long kv_heads, double theta) {
  const long kv = kv_heads * (c / heads);
  return rope_pack(linear(ln, wq, {}, rows, c, c), linear(ln, wk, {}, rows, c, kv), linear(ln, wv, {}, rows, c, kv),
                   pos, rows, c, heads, kv_heads, theta);
}

/// The whole Llama-family model's mean loss in double precision (`doc_start`: the
/// document mask and restarting positions).
inline double llama_loss(const gpt_config& cfg, const param_map& p, const std::vector<std::int32_t>& tokens,
                         const std::vector<std::int32_t>& targets, long batch, long seq,
                         const std::int32_t* doc_start = nullptr) {
  const long c = cfg.d_model, n = batch * seq, hd = c / cfg.heads, h = ffn_hidden_of(cfg);
  const auto& emb = p.at("embed_tokens.weight");
  vec x;
  for (auto t : tokens)
    x.insert(x.end(), emb.begin() + t * c, emb.begin() + (t + 1) * c);
  const auto pos = positions(batch, seq, doc_start);
  for (int l = 0; l < cfg.layers; ++l) {
    auto q = [&](const char* s) -> const vec& { return p.at("layers." + std::to_string(l) + "." + s); };
    auto ln1 = rms_norm(x, q("input_layernorm.weight"), n, c, cfg.norm_eps);
    auto qkv = llama_qkv(ln1, q("self_attn.q_proj.weight"), q("self_attn.k_proj.weight"), q("self_attn.v_proj.weight"),
                         pos, n, c, cfg.heads, kv_heads_of(cfg), cfg.rope_theta);
    auto o = linear(attention(qkv, batch, seq, cfg.heads, hd, doc_start), q("self_attn.o_proj.weight"), {}, n, c, c);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += o[i];
    auto ln2 = rms_norm(x, q("post_attention_layernorm.weight"), n, c, cfg.norm_eps);
    auto act =
      swiglu(linear(ln2, q("mlp.gate_proj.weight"), {}, n, c, h), linear(ln2, q("mlp.up_proj.weight"), {}, n, c, h));
    auto m = linear(act, q("mlp.down_proj.weight"), {}, n, h, c);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += m[i];
  }
  auto lnf = rms_norm(x, p.at("norm.weight"), n, c, cfg.norm_eps);
  auto logits = linear(lnf, p.at(cfg.tie_embeddings ? "embed_tokens.weight" : "lm_head.weight"), {}, n, c, cfg.vocab);
  return cross_entropy(logits, targets, cfg.vocab, cfg.ignore_index);
}

} // namespace troupe::ops::reference
