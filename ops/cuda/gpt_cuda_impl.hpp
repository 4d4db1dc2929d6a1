// Internals of gpt_cuda shared by its source files: the flat parameter buffers,
// the per-microbatch activation slots and the backward scratch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <fmt/format.h>

#include "kernels/cuda/gemm.hpp"
#include "ops/cuda/gpt_cuda.hpp"
#include "ops/cuda/lt_gemm.hpp"

namespace troupe::ops {

using bf16 = __nv_bfloat16;

/// The failure of gpt_cuda's call `op`: "op: what".
inline gpu::status fail(const char* op, const std::string& what) {
  return gpu::status::failure(fmt::format("{}: {}", op, what));
}

/// One parameter inside the flat buffers: elements [offset, offset + numel).
struct cuda_param {
  std::string name;
  shape_t shape;
  std::int64_t offset = 0, numel = 0;
  bool decay = false; ///< rank ≥ 2: AdamW weight decay applies
};

/// What one block keeps from its forward for its backward (device pointers into
/// the slot's arena; all bf16 except the f32 statistics).
struct cuda_layer {
  bf16 *ln1, *q, *k, *v, *o, *att, *x_mid, *ln2, *fc, *act;
  float *mean1, *rstd1, *mean2, *rstd2, *lse;
};

/// Where one block's backward puts the gradients its weight half reads: the
/// shared scratch for a fused backward, the slot's own buffers for a split one.
struct cuda_grad_bufs {
  bf16 *dbig = nullptr, *dmid = nullptr, *dqkv = nullptr;
};

/// One microbatch in flight: its buffers are sized for [max_batch, context] once.
struct cuda_slot {
  int mb = -1;
  bool used = false;
  int batch = 0, seq = 0;
  std::vector<tensor_handle> arena; ///< owns every buffer below
  std::vector<bf16*> resid;         ///< resid[l]: block l's input; resid[layers]: the range's output
  std::vector<cuda_layer> layers;
  std::int32_t *tokens = nullptr, *targets = nullptr;
  bf16 *lnf = nullptr, *logits = nullptr; ///< logits become the loss gradient in place
  float *meanf = nullptr, *rstdf = nullptr, *loss = nullptr, *row_loss = nullptr;
  std::int32_t* count = nullptr;
  // Split backward (backward_input now, backward_weight later): per-layer gradient
  // buffers, allocated at the first split use. dgrad[l] is d(loss)/d(resid[l]).
  std::vector<tensor_handle> split_arena;
  std::vector<bf16*> dgrad;
  std::vector<cuda_grad_bufs> kept;
  bool input_done = false;
  float loss_scale = 1.0f;
  tensor_handle dgrad0_t;      ///< handle of dgrad[0]
  tensor_handle loss_t, out_t; ///< handles of loss [1] and of resid[layers] (whole buffers)
};

/// Shared scratch of the forward's projections and of backward.
struct cuda_scratch {
  std::vector<tensor_handle> arena;
  bf16 *qkv = nullptr, *dres[2] = {nullptr, nullptr}, *dbig = nullptr, *dln = nullptr, *dmid = nullptr, *datt = nullptr,
       *dO = nullptr, *dQ = nullptr, *dK = nullptr, *dV = nullptr, *dqkv = nullptr;
  float* attn_ws = nullptr;
  tensor_handle dres_t[2]; ///< handles of dres[0], dres[1]
};

struct gpt_cuda::impl {
  gpt_config cfg;
  int begin = 0, end = 0, max_batch = 0, device = 0;
  /// Logit columns: a large vocabulary rounded up to 64 so the head's products stay
  /// aligned. The extra rows of lm_head stay zero and their logits are set to −∞,
  /// so softmax, loss and every gradient are those of the real vocabulary.
  int vocab_pad = 0;
  bool ready = false;
  cudaStream_t stream = nullptr;
  gpu::blas_handle blas;
  cuda::lt_gemm lt;
  tensor_handle lt_workspace;
  bool fused = true; ///< cuBLASLt epilogues (bias, GELU, residual) instead of separate passes
  std::vector<cuda_param> params;
  std::int64_t total = 0;
  tensor_handle master, grad, wbf;                   ///< f32 ×2 and the bf16 compute copy, [total] each
  std::vector<named_tensor> param_views, grad_views; ///< per parameter, into master and grad
  std::vector<cuda_slot> slots;
  cuda_slot eval_slot; ///< evaluate()'s buffers, allocated at its first call
  cuda_scratch scratch;
  float* last_loss = nullptr;
  double* norm = nullptr; ///< grad_sq_norm's device accumulator (in norm_t)
  tensor_handle norm_t;

  bool first() const { return begin == 0; }
  bool last() const { return end == cfg.layers; }
  int local_layers() const { return end - begin; }
  std::size_t block_base(int li) const { return (first() ? 2 : 0) + std::size_t(li) * 12; }
  std::size_t head_base() const { return block_base(local_layers()); }
  /// bf16 weights, f32 master and f32 gradient of parameter index i.
  bf16* w(std::size_t i) const { return wbf.data<bf16>() + params[i].offset; }
  float* g(std::size_t i) const { return grad.data<float>() + params[i].offset; }
  bf16* bw(int li, int s) const { return w(block_base(li) + std::size_t(s)); }
  float* bg(int li, int s) const { return g(block_base(li) + std::size_t(s)); }

  /// Device buffer of n elements of `t`, kept alive in `arena`.
  gpu::status alloc(std::vector<tensor_handle>& arena, std::int64_t n, dtype t, void** out);
  gpu::status make_slot(cuda_slot& s);
  gpu::status make_scratch();

  /// Checks a forward's input (and targets, for the last range) against the config.
  gpu::status check_forward(const char* op, const tensor_handle& input, const tensor_handle& targets) const;
  /// Runs the forward of `input` in slot `s` (its buffers already made).
  gpu::status run_forward(cuda_slot& s, const tensor_handle& input, const tensor_handle& targets);
  gpu::status block_forward(cuda_slot& s, int li);
  gpu::status make_split(cuda_slot& s);

  gpu::status block_backward(cuda_slot& s, int li, const bf16* dy, bf16* dx, const cuda_grad_bufs& k, bool weights);
  gpu::status block_backward_weight(cuda_slot& s, int li, const bf16* dy, const cuda_grad_bufs& k);
  gpu::status head_forward(cuda_slot& s);
  gpu::status head_backward(cuda_slot& s, float scale, bf16* dx, bool weights);
  gpu::status head_backward_weight(cuda_slot& s, float scale);

  /// Product C[m,n] = alpha·op(A)·op(B) + beta·C on this range's stream.
  gpu::status mm(int m, int n, int k, bool ta, bool tb, const bf16* a, const bf16* b, bf16* c, float beta = 0.0f);
  gpu::status mm(int m, int n, int k, bool ta, bool tb, const bf16* a, const bf16* b, float* c, float alpha,
                 float beta);
};

} // namespace troupe::ops
