// A Llama block in the three parts the GPT-2 block has (pre-attention, core
// attention, post-attention), with forward, input-gradient and weight-gradient
// halves: RMSNorm → fused q|k|v projection → rotary q, k and grouped k, v repeated
// into the qkv layout core attention takes; o projection + residual → RMSNorm →
// SwiGLU MLP (down(silu(gate) · up)) + residual. No biases.
#include "ops/gpt_impl.hpp"
#include "ops/linear.hpp"
#include "ops/swiglu.hpp"

namespace troupe::ops {

tensor_handle gpt_range::impl::llama_pre_attention(int li, const tensor_handle& x, layer_cache& k,
                                                   const tensor_handle& documents) const {
  k.x = x;
  k.ln1 = rms_norm_forward(x, p(li, attn_norm_w), k.rn1, cfg.norm_eps);
  auto proj = linear_forward(k.ln1, fp(li, fused_qkv), {}, {}, cfg.precision); // [B, T, C + 2 KV]
  k.positions = rope_positions(x.dim(0), x.dim(1), documents);
  k.qkv = rope_pack_forward(proj, cfg.heads, kv_heads_of(cfg), k.positions, rope);
  return k.qkv;
}

tensor_handle gpt_range::impl::llama_post_attention(int li, const tensor_handle& att, layer_cache& k) const {
  const auto pr = cfg.precision;
  k.att = att;
  k.x_mid = linear_forward(att, p(li, o_w), {}, k.x, pr); // + residual
  k.ln2 = rms_norm_forward(k.x_mid, p(li, mlp_norm_w), k.rn2, cfg.norm_eps);
  k.fc = linear_forward(k.ln2, fp(li, fused_gate_up), {}, {}, pr); // gate | up [B, T, 2H]
  k.act = swiglu_forward(k.fc);
  return linear_forward(k.act, p(li, down_w), {}, k.x_mid, pr); // + residual
}

tensor_handle gpt_range::impl::llama_backward_post_attention(int li, const tensor_handle& dy, layer_cache& c) const {
  const auto pr = cfg.precision;
  c.d_out = dy;
  auto d_act = linear_backward_input(dy, p(li, down_w), pr);
  c.d_fc = swiglu_backward(d_act, c.fc);
  c.d_ln2 = linear_backward_input(c.d_fc, fp(li, fused_gate_up), pr);
  c.d_mid = rms_norm_backward_input(c.d_ln2, c.x_mid, c.rn2, p(li, mlp_norm_w), dy); // + residual branch
  return linear_backward_input(c.d_mid, p(li, o_w), pr);
}

tensor_handle gpt_range::impl::llama_backward_pre_attention(int li, layer_cache& c) const {
  c.d_proj = rope_pack_backward(c.d_qkv, cfg.heads, kv_heads_of(cfg), c.positions, rope);
  c.d_ln1 = linear_backward_input(c.d_proj, fp(li, fused_qkv), cfg.precision);
  auto dx = rms_norm_backward_input(c.d_ln1, c.x, c.rn1, p(li, attn_norm_w), c.d_mid); // + residual branch
  // Only backward_weight's inputs stay alive.
  c.qkv = {};
  c.attn = {};
  c.fc = {};
  c.d_qkv = {};
  c.positions = {};
  return dx;
}

void gpt_range::impl::llama_backward_weight(int li, layer_cache& c) {
  const auto pr = cfg.precision;
  tensor_handle no_bias;
  linear_backward_weight(c.d_out, c.act, g(li, down_w), no_bias, 1.0f, pr);
  linear_backward_weight(c.d_fc, c.ln2, fg(li, fused_gate_up), no_bias, 1.0f, pr);
  rms_norm_backward_weight(c.d_ln2, c.x_mid, c.rn2, g(li, mlp_norm_w));
  linear_backward_weight(c.d_mid, c.att, g(li, o_w), no_bias, 1.0f, pr);
  linear_backward_weight(c.d_proj, c.ln1, fg(li, fused_qkv), no_bias, 1.0f, pr);
  rms_norm_backward_weight(c.d_ln1, c.x, c.rn1, g(li, attn_norm_w));
  c = layer_cache{};
}

} // namespace troupe::ops
