// Internals of gpt_range shared by its source files: parameter slots and the
// per-microbatch activation caches.
#pragma once

#include <vector>

#include "ops/core_attention.hpp"
#include "ops/gpt.hpp"
#include "ops/layer_norm.hpp"
#include "ops/rms_norm.hpp"
#include "ops/rope.hpp"

namespace troupe::ops {

/// Position of each parameter within a GPT-2 block's run of the parameter list.
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

/// Position of each parameter within a Llama block's run (gpt_param_specs lists their
/// names). q, k and v are rows of one fused [C + 2·KV, C] weight, gate and up of one
/// [2H, C] weight (gpt_range::impl::fused), so each takes one matrix product.
enum llama_slot : int { attn_norm_w, q_w, k_w, v_w, o_w, mlp_norm_w, gate_w, up_w, down_w, llama_slots };

/// A Llama block's fused weights: which of gpt_range::impl::fused's pair per layer.
enum fused_slot : int { fused_qkv, fused_gate_up, fused_slots };

/// What one block keeps between forward, backward_input and backward_weight.
struct layer_cache {
  // forward
  tensor_handle x, ln1, qkv, att, x_mid, ln2, fc, act;
  layer_norm_saved ln1s, ln2s;
  rms_norm_saved rn1, rn2; ///< llama's norms
  tensor_handle positions; ///< llama: each token's rotary position
  core_attention_saved attn;
  // backward_input, for backward_weight
  tensor_handle d_out, d_fc, d_ln2, d_mid, d_qkv, d_ln1;
  tensor_handle d_proj; ///< llama: the gradient of the fused q|k|v projection's output
};

/// What the final norm, head and loss keep.
struct head_cache {
  tensor_handle x, lnf, dlogits, d_lnf;
  layer_norm_saved s;
  rms_norm_saved rs; ///< llama's final norm
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
  tensor_handle documents;    ///< split forward: the document mask (llama's rotary positions), until the last layer
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
  /// llama: per local layer, fused_slots fused weights and their gradients, of which
  /// params and grads hold row slices (the names a checkpoint and export see).
  std::vector<tensor_handle> fused, fused_grads;
  rope_table rope; ///< llama's rotary table up to the context

  /// Zeroed gradient buffers again after release_grads, before a backward writes them.
  void ensure_grads() {
    if (released_grads.empty())
      return;
    alloc_grads();
    released_grads.clear();
  }

  /// Tells grads_done that parameters [first, end) have this call's gradient.
  void done(std::size_t first, std::size_t end) const {
    if (grads_done)
      grads_done(first, end);
  }

  bool first() const { return begin == 0; }
  bool last() const { return holds_head(cfg, begin, end); }
  bool llama() const { return cfg.family == model_family::llama; }
  int local_layers() const { return end - begin; }
  /// Parameters of the embedding (wte, wpe; llama: embed only), a block, the head
  /// (norm weight and bias, lm_head; llama: norm, and lm_head unless tied in this range).
  std::size_t embed_params() const { return llama() ? 1 : 2; }
  std::size_t block_params() const { return std::size_t(llama() ? int(llama_slots) : int(block_slots)); }
  std::size_t head_params() const { return llama() ? (tied_here() ? 1 : 2) : 3; }
  /// The head reads the embedding of this very range (tied, and the range holds both).
  bool tied_here() const { return llama() && cfg.tie_embeddings && first(); }
  std::size_t block_base(int li) const { return (first() ? embed_params() : 0) + std::size_t(li) * block_params(); }
  std::size_t head_base() const { return block_base(local_layers()); }
  const tensor_handle& p(int li, int s) const { return params[block_base(li) + std::size_t(s)].value; }
  tensor_handle& g(int li, int s) { return grads[block_base(li) + std::size_t(s)].value; }
  const tensor_handle& fp(int li, fused_slot s) const { return fused[std::size_t(li * fused_slots + s)]; }
  tensor_handle& fg(int li, fused_slot s) { return fused_grads[std::size_t(li * fused_slots + s)]; }
  /// The head's weight: lm_head, or with tied embeddings the token embedding (a
  /// range without the embedding holds a copy as lm_head, kept equal to it by
  /// the stages' exchange of their gradients, actors/boundary/tied_embeddings.cpp).
  const tensor_handle& head_w() const {
    return tied_here() ? params[0].value : params[head_base() + (llama() ? 1 : 2)].value;
  }
  tensor_handle& head_dw() { return tied_here() ? grads[0].value : grads[head_base() + (llama() ? 1 : 2)].value; }

  /// Creates and initialises this range's parameters and zeroed gradients.
  void init_params();
  /// Zeroed gradients for params (llama's fused weights' as slices of fused ones).
  void alloc_grads();
  /// The final norm of x (either family), saving into `hc` for backward.
  tensor_handle final_norm(const tensor_handle& x, head_cache& hc) const;

  /// One block forward; stores intermediates in `c` when non-null. `documents`: the attention mask.
  /// It runs in three parts, so core attention (which has no parameters) could
  /// run elsewhere, on a shard (DistCA's attention servers, ops/core_attention_shard.hpp):
  tensor_handle block_forward(int li, const tensor_handle& x, layer_cache* c, const tensor_handle& documents) const;
  /// pre-attention: layer norm and the q, k, v projection of x → qkv [B, T, 3C];
  tensor_handle block_pre_attention(int li, const tensor_handle& x, layer_cache& k,
                                    const tensor_handle& documents) const;
  /// post-attention: output projection and residual, layer norm, MLP and residual.
  tensor_handle block_post_attention(int li, const tensor_handle& att, layer_cache& k) const;
  /// Llama's block in the same parts (ops/llama_block.cpp); the block_* methods call
  /// them for a llama range. `documents` restart the rotary positions per document.
  tensor_handle llama_pre_attention(int li, const tensor_handle& x, layer_cache& k,
                                    const tensor_handle& documents) const;
  tensor_handle llama_post_attention(int li, const tensor_handle& att, layer_cache& k) const;
  tensor_handle llama_backward_post_attention(int li, const tensor_handle& dy, layer_cache& c) const;
  tensor_handle llama_backward_pre_attention(int li, layer_cache& c) const;
  void llama_backward_weight(int li, layer_cache& c);
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
  /// The embedding of tokens (GPT-2: token + position; Llama: token only).
  tensor_handle embed_tokens(const tensor_handle& tokens) const;
  /// The embedding's weight gradient from c.d_emb, then done() for its parameters.
  void embed_backward_weight(mb_cache& c);
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
