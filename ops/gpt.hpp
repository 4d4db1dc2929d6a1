// The GPT-2 style model, cut into contiguous layer ranges: what a pipeline stage
// computes. A range keeps one activation cache per microbatch in flight.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ops/named_tensor.hpp"
#include "ops/precision.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// The block design a gpt_config describes.
enum class model_family {
  gpt2,  ///< layer norms, learned positions, GELU MLP, biases (Radford et al. 2019)
  llama, ///< RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases (Touvron et al. 2023)
};

/// "gpt2" or "llama".
std::string_view to_string(model_family f) noexcept;

/// Shape and seed of a GPT: pre-norm blocks (norm, causal attention, norm, MLP,
/// residuals), final norm, linear head, cross-entropy. `family` picks GPT-2's
/// parts or Llama's (ops/llama_block.cpp); the fields after it are Llama's only.
struct gpt_config {
  int layers = 4;
  int d_model = 128;
  int heads = 4;
  int context = 64;
  int vocab = 256;
  ops::precision precision = precision::f32; ///< bf16: bf16 products, f32 weights and state
  std::uint64_t seed = 1337;                 ///< initialisation seed; each parameter derives its own
  std::int32_t ignore_index = -1;            ///< target value that the loss skips
  /// SkipPipe (#14): the final norm, head and loss are a range of their own,
  /// [layers, layers), which stage 0 holds beside the embedding so that every
  /// path ends where it began (Blagoev et al. 2025, arXiv 2502.19913; in
  /// gensyn-ai/skippipe communications/llm_subp.py the first stage runs `embed`
  /// and `forward_end` + the loss). The range ending at `layers` then holds blocks only.
  bool head_apart = false;
  model_family family = model_family::gpt2;
  int kv_heads = 0;            ///< llama: key/value heads (grouped-query attention), dividing heads; 0: heads
  int ffn_hidden = 0;          ///< llama: SwiGLU's hidden width; 0: llama_ffn_hidden(d_model)
  double rope_theta = 10000.0; ///< llama: the rotary base θ
  bool tie_embeddings = false; ///< llama: the head is the token embedding (a range apart keeps a copy)
  float norm_eps = 1e-5f;      ///< llama: RMSNorm's epsilon
};

/// Llama's default SwiGLU width for `d_model`: 2/3 of 4·d (keeping the MLP's
/// parameters those of a 4·d GELU MLP), rounded up to a multiple of 32. Meta's
/// reference (meta-llama/llama, model.py FeedForward: `int(2 * hidden_dim / 3)` then
/// rounded up to `multiple_of`) rounds to 256; 32 keeps a small model's width near 8d/3.
int llama_ffn_hidden(int d_model);

/// cfg.kv_heads, or heads when it is 0.
inline int kv_heads_of(const gpt_config& cfg) {
  return cfg.kv_heads > 0 ? cfg.kv_heads : cfg.heads;
}
/// cfg.ffn_hidden, or Llama's default width when it is 0.
inline int ffn_hidden_of(const gpt_config& cfg) {
  return cfg.ffn_hidden > 0 ? cfg.ffn_hidden : llama_ffn_hidden(cfg.d_model);
}

/// Whether layers [begin, end) of `cfg` hold the final norm, head and loss:
/// the range ending at `layers`, or with head_apart only the empty range there.
inline bool holds_head(const gpt_config& cfg, int begin, int end) {
  return end == cfg.layers && (!cfg.head_apart || begin == end);
}

/// Layers [begin, end) of a GPT, plus the embeddings when begin == 0 and the final
/// norm, head and loss when end == layers (holds_head: with head_apart, the empty
/// range [layers, layers) holds them alone).
///
/// Parameters are initialised as in GPT-2 (normal 0.02, biases 0, norms 1/0, the two
/// residual projections per block scaled by 1/√(2·layers)) from a seed derived from
/// (config.seed, parameter name), so a range holds exactly the weights the whole
/// model holds for its layers.
///
/// Inputs and outputs: the first range takes i32 tokens [B, T]; the others take f32
/// activations [B, T, d_model]. The last range's forward returns the mean loss as an
/// f32 tensor [1]; the others return activations [B, T, d_model]. Up to any number of
/// microbatches may be in flight, each with its own cache taken from the storage
/// pool; caches are released after backward, so a steady state allocates nothing new.
///
/// Errors (bad shapes, unknown or duplicate microbatch ids, token ids out of range)
/// throw std::invalid_argument naming the method; actors catch them at their boundary.
/// A microbatch whose backward throws half-way is dropped (its cache released).
///
/// Threads: one range is used by one thread at a time; different ranges may run on
/// different threads at once. Matrix products use one BLAS thread per call by default
/// (kernels::cpu::set_blas_threads or TROUPE_BLAS_THREADS change that, process-wide).
/// Inputs and gradients passed in are kept by reference until the microbatch's
/// backward finishes: do not write into them meanwhile.
class gpt_range {
public:
  gpt_range(const gpt_config& cfg, int begin, int end);
  gpt_range(const gpt_range&) = delete;
  gpt_range& operator=(const gpt_range&) = delete;
  gpt_range(gpt_range&&) noexcept;
  gpt_range& operator=(gpt_range&&) noexcept;
  ~gpt_range();

  const gpt_config& config() const noexcept;
  int begin() const noexcept;
  int end() const noexcept;
  bool is_first() const noexcept { return begin() == 0; }
  bool is_last() const noexcept { return holds_head(config(), begin(), end()); }

  /// Training forward of microbatch `mb`, caching what backward needs. The last
  /// range needs `targets` (i32 [B, T]) and returns the loss [1]. `documents`
  /// (i32 [B, T], ops/core_attention.hpp) makes every layer's attention
  /// document-causal; undefined: causal over the whole sequence.
  tensor_handle forward(int mb, const tensor_handle& input, const tensor_handle& targets = {},
                        const tensor_handle& documents = {});

  /// Fused backward of `mb`: accumulates weight gradients and returns the gradient
  /// wrt the input activation (undefined for the first range). For the last range
  /// `grad_out` is the loss gradient: undefined means 1, else an f32 [1] tensor
  /// (e.g. 1/microbatches). Releases the microbatch's cache.
  tensor_handle backward(int mb, const tensor_handle& grad_out = {});

  /// Input-gradient half of backward (zero-bubble "I"): returns what backward
  /// returns and keeps what backward_weight needs in the cache.
  tensor_handle backward_input(int mb, const tensor_handle& grad_out = {});

  /// Weight-gradient half (zero-bubble "W"), after backward_input of the same `mb`.
  /// backward_input + backward_weight accumulates exactly what backward does.
  void backward_weight(int mb);

  /// Attention disaggregation (DistCA, #15): the training forward and the fused
  /// backward in pieces that stop at each layer's core attention, so it can run
  /// elsewhere (an attention server) while this range runs other work. The pieces
  /// compute exactly what forward and backward do. forward_begin runs the
  /// embedding (first range) and the first local layer's pre-attention and returns
  /// its qkv [B, T, 3C]; the last range keeps `targets` for the loss. A range
  /// without layers (SkipPipe's head alone) has no attention and is refused.
  /// `documents`: as forward's (Llama's rotary positions restart per document).
  tensor_handle forward_begin(int mb, const tensor_handle& input, const tensor_handle& targets = {},
                              const tensor_handle& documents = {});
  /// Takes the waiting layer's core-attention output att [B, T, C], runs its
  /// post-attention and then either the next layer's pre-attention (returns its
  /// qkv, `done` false) or ends the forward (returns what forward returns, `done` true).
  tensor_handle forward_resume(int mb, const tensor_handle& att, bool& done);
  /// The backward's first piece: the head (last range) and the top layer's
  /// post-attention; returns that layer's gradient wrt core attention's output [B, T, C].
  /// `weights`: the fused backward, weight gradients in each piece; false: the
  /// input-gradient half in pieces (zero-bubble "I"), backward_weight(mb) after it.
  tensor_handle backward_begin(int mb, const tensor_handle& grad_out = {}, bool weights = true);
  /// Takes the waiting layer's d_qkv [B, T, 3C] (core attention's backward), runs
  /// its pre-attention backward and (fused) weight gradients, then either the next
  /// lower layer's post-attention (returns its d_att, `done` false) or ends the
  /// backward (returns what backward returns, `done` true; the cache is released,
  /// or kept for backward_weight after the input-gradient half).
  tensor_handle backward_resume(int mb, const tensor_handle& d_qkv, bool& done);

  /// Forward without caching (evaluation). The last range returns the loss [1] when
  /// `targets` is given, else the logits [B, T, vocab].
  tensor_handle evaluate(const tensor_handle& input, const tensor_handle& targets = {},
                         const tensor_handle& documents = {}) const;

  /// Microbatches whose forward ran and whose backward has not finished.
  int in_flight() const noexcept;

  /// Sets every gradient to zero.
  void zero_grads();
  /// Gives the gradient buffers' storage back (grads() then holds undefined
  /// tensors) until the next backward, which starts from zeroed ones: ZeRO-2,
  /// whose optimizer shards keep the reduced slices between steps.
  void release_grads();
  /// Parameters and gradients, in the same order with the same names. The handles
  /// share the range's storage: writing into a parameter (an optimizer's step,
  /// loading a checkpoint, averaging replicas) changes the model.
  const std::vector<named_tensor>& params() const noexcept;
  const std::vector<named_tensor>& grads() const noexcept;
  /// Σ g² over this range's gradients (combine across ranges for global-norm clipping).
  double grad_sq_norm() const;
  /// Multiplies every gradient by `factor`.
  void scale_grads(float factor);

  /// Called during every backward that computes weight gradients (backward,
  /// backward_weight), each time the gradients of parameters [first, end) have
  /// had this call's contribution: the head, each block from the top down, the
  /// embeddings. Where data-parallel buckets start their all-reduce while the
  /// rest of the backward runs. Empty: nothing is called.
  void on_grads_done(std::function<void(std::size_t first, std::size_t end)> f);

  /// Bytes of activation cache one microbatch of [batch, seq] keeps until its backward.
  std::size_t cache_bytes(int batch, int seq) const;

  struct impl;

private:
  impl* impl_;
};

/// One parameter of a layer range: its name and shape, and how it is initialised
/// (normal with `stddev` when that is positive, else every element `fill`).
struct gpt_param_spec {
  std::string name;
  shape_t shape;
  double stddev = 0;
  float fill = 0;
};

/// The parameters of layers [begin, end) of `cfg`, in the order and with the
/// names and shapes gpt_range holds them, without allocating: what a range
/// creates, and what a checkpoint of it must hold.
std::vector<gpt_param_spec> gpt_param_specs(const gpt_config& cfg, int begin, int end);

/// Parameters of layers [begin, end) of `cfg`, with the embeddings when begin == 0
/// and the final norm and head when end == cfg.layers, counted from the shapes
/// without allocating: Σ numel of gpt_param_specs. A block has 12·d² + 13·d
/// (Megatron's 12·l·h² plus biases and norms).
std::int64_t gpt_parameter_count(const gpt_config& cfg, int begin, int end);

/// Number of floating-point operations of one forward + backward of `cfg` on
/// [batch, seq] tokens: 3× the forward's matrix products, causal attention counted in full.
double gpt_step_flops(const gpt_config& cfg, int batch, int seq);

} // namespace troupe::ops
