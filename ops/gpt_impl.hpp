// Internals of gpt_range shared by its source files: parameter slots and the
// per-microbatch activation caches.
#pragma once

#include <vector>

#include "ops/core_attention.hpp"
#include "ops/gpt.hpp"
#include "ops/layer_norm.hpp"

namespace troupe::ops {

/// Position of each parameter within a block's run of the parameter list.
enum block_slot : int {
  ln1_w,
  ln1_b,
  attn_w,
  attn_b,
  proj_w,
  proj_b,
  ln2_w,
  ln2_b,
  fc_w,
  fc_b,
  mlp_w,
  mlp_b,
  block_slots
};

/// What one block keeps between forward, backward_input and backward_weight.
struct layer_cache {
  // forward
  tensor_handle x, ln1, qkv, att, x_mid, ln2, fc, act;
  layer_norm_saved ln1s, ln2s;
  core_attention_saved attn;
  // backward_input, for backward_weight
  tensor_handle d_out, d_fc, d_ln2, d_mid, d_qkv, d_ln1;
};

/// What the final norm, head and loss keep.
struct head_cache {
  tensor_handle x, lnf, dlogits, d_lnf;
  layer_norm_saved s;
};

/// One microbatch's cache slot; slots are reused so a steady state allocates nothing.
struct mb_cache {
  int mb = -1;
  bool used = false;
  bool input_done = false;
  long batch = 0, seq = 0;    ///< the forward's input shape, which backward's gradient must match
  int layer = -1;             ///< split forward or backward (gpt_range::forward_begin): the layer waiting for attention
  bool weights_later = false; ///< a backward in pieces that leaves the weight gradients to backward_weight
  tensor_handle targets;      ///< split forward of the last range: the loss's targets, until the head runs
  tensor_handle tokens, d_emb;
  std::vector<layer_cache> layers;
  head_cache head;
};

/// Checks that x is an f32 activation [B, T ≤ context, d_model] (`op` names the caller).
void check_activation(const tensor_handle& x, const gpt_config& cfg, const char* op);

struct gpt_range::impl {
  gpt_config cfg;
  int begin = 0, end = 0;
  std::vector<named_tensor> params, grads;
  std::vector<mb_cache> slots;
  std::function<void(std::size_t, std::size_t)> grads_done; ///< gpt_range::on_grads_done
  /// gpt_range::release_grads: the gradients' shapes while their storage is given back.
  std::vector<shape_t> released_grads;

  /// Zeroed gradient buffers again after release_grads, before a backward writes them.
  void ensure_grads() {
    if (released_grads.empty())
      return;
    for (std::size_t i = 0; i < grads.size(); ++i)
      grads[i].value = tensor_handle::zeros(released_grads[i]);
    released_grads.clear();
  }

  /// Tells grads_done that parameters [first, end) have this call's gradient.
  void done(std::size_t first, std::size_t end) const {
    if (grads_done)
      grads_done(first, end);
  }

  bool first() const { return begin == 0; }
  bool last() const { return holds_head(cfg, begin, end); }
  int local_layers() const { return end - begin; }
  std::size_t block_base(int li) const { return (first() ? 2 : 0) + std::size_t(li) * block_slots; }
  std::size_t head_base() const { return block_base(local_layers()); }
  const tensor_handle& p(int li, block_slot s) const { return params[block_base(li) + s].value; }
  tensor_handle& g(int li, block_slot s) { return grads[block_base(li) + s].value; }

  /// Creates and initialises this range's parameters and zeroed gradients.
  void init_params();

  /// One block forward; stores intermediates in `c` when non-null. `documents`: the attention mask.
  /// It runs in three parts, so core attention (which has no parameters) could
  /// run elsewhere, on a shard (DistCA's attention servers, ops/core_attention_shard.hpp):
  tensor_handle block_forward(int li, const tensor_handle& x, layer_cache* c, const tensor_handle& documents) const;
  /// pre-attention: layer norm and the q, k, v projection of x → qkv [B, T, 3C];
  tensor_handle block_pre_attention(int li, const tensor_handle& x, layer_cache& k) const;
  /// post-attention: output projection and residual, layer norm, MLP and residual.
  tensor_handle block_post_attention(int li, const tensor_handle& att, layer_cache& k) const;
  /// The backward in the same parts: post-attention from dy to d_att, core
  /// attention, then pre-attention from d_qkv to dx.
  tensor_handle block_backward_input(int li, const tensor_handle& dy, layer_cache& c) const;
  tensor_handle block_backward_post_attention(int li, const tensor_handle& dy, layer_cache& c) const;
  tensor_handle block_backward_pre_attention(int li, layer_cache& c) const;
  void block_backward_weight(int li, layer_cache& c);
  /// A training forward's start: its input and targets checked (`op` names the
  /// caller), a cache slot taken for `mb` with the input's shape.
  mb_cache& begin_forward(int mb, const tensor_handle& input, const tensor_handle& targets, const char* op);
  /// The first block's input: the embedding of the tokens (first range, which keeps
  /// them for backward) or the input activation itself.
  tensor_handle embed(mb_cache& c, const tensor_handle& input);
  /// The last range's final norm, head and loss on x: returns the loss [1].
  tensor_handle head_forward(mb_cache& c, const tensor_handle& x, const tensor_handle& targets);
  /// The head's backward from the loss gradient (undefined: 1); weight gradients with `weights`.
  tensor_handle head_backward(mb_cache& c, const tensor_handle& grad_out, bool weights);
  /// Checks a backward's gradient against the forward of `c`.
  void check_grad_out(const mb_cache& c, const tensor_handle& grad_out, const char* op) const;
  void head_backward_weight(mb_cache& c);
  /// backward_input, and with `weights` each part's weight-gradient half right after
  /// its input-gradient half (the fused backward, which then releases the cache).
  tensor_handle backward(int mb, const tensor_handle& grad_out, bool weights, const char* op);

  mb_cache& acquire(int mb, const char* op);
  mb_cache& find(int mb, const char* op);
  void release(mb_cache& c);
};

} // namespace troupe::ops
