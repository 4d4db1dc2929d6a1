// One pre-norm transformer block in three parts (pre-attention, core attention,
// post-attention): forward, input-gradient and weight-gradient halves.
#include "ops/core_attention.hpp"
#include "ops/gelu.hpp"
#include "ops/gpt_impl.hpp"
#include "ops/linear.hpp"
#include "ops/output_projection.hpp"
#include "ops/qkv_projection.hpp"
#include "ops/residual.hpp"

namespace troupe::ops {

tensor_handle gpt_range::impl::block_forward(int li, const tensor_handle& x, layer_cache* c,
                                             const tensor_handle& documents) const {
  layer_cache local;
  layer_cache& k = c ? *c : local;
  auto qkv = block_pre_attention(li, x, k, documents);
  k.att = core_attention_forward(qkv, cfg.heads, k.attn, documents);
  return block_post_attention(li, k.att, k);
}

tensor_handle gpt_range::impl::block_pre_attention(int li, const tensor_handle& x, layer_cache& k,
                                                   const tensor_handle& documents) const {
  if (llama())
    return llama_pre_attention(li, x, k, documents);
  k.x = x;
  k.ln1 = layer_norm_forward(x, p(li, ln1_w), p(li, ln1_b), k.ln1s);
  k.qkv = qkv_projection_forward(k.ln1, p(li, attn_w), p(li, attn_b), cfg.precision);
  return k.qkv;
}

tensor_handle gpt_range::impl::block_post_attention(int li, const tensor_handle& att, layer_cache& k) const {
  if (llama())
    return llama_post_attention(li, att, k);
  const auto pr = cfg.precision;
  k.att = att;
  k.x_mid = output_projection_forward(att, p(li, proj_w), p(li, proj_b), k.x, pr); // + residual
  k.ln2 = layer_norm_forward(k.x_mid, p(li, ln2_w), p(li, ln2_b), k.ln2s);
  k.fc = linear_forward(k.ln2, p(li, fc_w), p(li, fc_b), {}, pr);
  k.act = gelu_forward(k.fc);
  return linear_forward(k.act, p(li, mlp_w), p(li, mlp_b), k.x_mid, pr); // + residual
}

tensor_handle gpt_range::impl::block_backward_input(int li, const tensor_handle& dy, layer_cache& c) const {
  auto d_att = block_backward_post_attention(li, dy, c);
  c.d_qkv = core_attention_backward(d_att, c.qkv, c.attn, cfg.heads);
  return block_backward_pre_attention(li, c);
}

tensor_handle gpt_range::impl::block_backward_post_attention(int li, const tensor_handle& dy, layer_cache& c) const {
  if (llama())
    return llama_backward_post_attention(li, dy, c);
  const auto pr = cfg.precision;
  c.d_out = dy;
  auto d_act = linear_backward_input(dy, p(li, mlp_w), pr);
  c.d_fc = gelu_backward(d_act, c.fc);
  c.d_ln2 = linear_backward_input(c.d_fc, p(li, fc_w), pr);
  c.d_mid = layer_norm_backward_input(c.d_ln2, c.x_mid, c.ln2s, p(li, ln2_w), dy); // + residual branch
  return output_projection_backward_input(c.d_mid, p(li, proj_w), pr);
}

tensor_handle gpt_range::impl::block_backward_pre_attention(int li, layer_cache& c) const {
  if (llama())
    return llama_backward_pre_attention(li, c);
  c.d_ln1 = qkv_projection_backward_input(c.d_qkv, p(li, attn_w), cfg.precision);
  auto dx = layer_norm_backward_input(c.d_ln1, c.x, c.ln1s, p(li, ln1_w), c.d_mid); // + residual branch
  // Only backward_weight's inputs stay alive.
  c.qkv = {};
  c.attn = {};
  c.fc = {};
  return dx;
}

void gpt_range::impl::block_backward_weight(int li, layer_cache& c) {
  if (llama())
    return llama_backward_weight(li, c);
  const auto pr = cfg.precision;
  linear_backward_weight(c.d_out, c.act, g(li, mlp_w), g(li, mlp_b), 1.0f, pr);
  linear_backward_weight(c.d_fc, c.ln2, g(li, fc_w), g(li, fc_b), 1.0f, pr);
  layer_norm_backward_weight(c.d_ln2, c.x_mid, c.ln2s, g(li, ln2_w), g(li, ln2_b));
  output_projection_backward_weight(c.d_mid, c.att, g(li, proj_w), g(li, proj_b), pr);
  qkv_projection_backward_weight(c.d_qkv, c.ln1, g(li, attn_w), g(li, attn_b), pr);
  layer_norm_backward_weight(c.d_ln1, c.x, c.ln1s, g(li, ln1_w), g(li, ln1_b));
  c = layer_cache{};
}

} // namespace troupe::ops
