// gpt_cuda's transformer block and head on the GPU: forward and fused backward.
#include <cmath>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/layer_norm.hpp"
#include "ops/cuda/gpt_cuda_impl.hpp"
#include "ops/cuda/heads.hpp"
#include "ops/gpt_impl.hpp"

namespace troupe::ops {

namespace {
constexpr float ln_eps = 1e-5f;
}

gpu::status gpt_cuda::impl::mm(int m, int n, int k, bool ta, bool tb, const bf16* a, const bf16* b, bf16* c,
                               float beta) {
  return gpu::gemm(blas.get(), stream, gpu::gemm_shape{m, n, k, ta, tb, 1.0f, beta}, a, b, c);
}

gpu::status gpt_cuda::impl::mm(int m, int n, int k, bool ta, bool tb, const bf16* a, const bf16* b, float* c,
                               float alpha, float beta) {
  return gpu::gemm(blas.get(), stream, gpu::gemm_shape{m, n, k, ta, tb, alpha, beta}, a, b, c);
}

gpu::status gpt_cuda::impl::block_forward(cuda_slot& s, int li) {
  const int C = cfg.d_model, H = cfg.heads, D = C / H, BT = s.batch * s.seq;
  auto& L = s.layers[std::size_t(li)];
  const bf16* x = s.resid[std::size_t(li)];
  bf16* y = s.resid[std::size_t(li) + 1];
  auto* qkv = scratch.qkv;
  TROUPE_GPU_TRY(
    gpu::layer_norm_forward(L.ln1, L.mean1, L.rstd1, x, bw(li, ln1_w), bw(li, ln1_b), BT, C, ln_eps, stream));
  if (fused) {
    TROUPE_GPU_TRY(lt.run({BT, 3 * C, C, false, true, 0.0f, cuda::lt_epilogue::bias, L.ln1, bw(li, attn_w), nullptr,
                           qkv, bw(li, attn_b), nullptr},
                          stream));
  } else {
    TROUPE_GPU_TRY(mm(BT, 3 * C, C, false, true, L.ln1, bw(li, attn_w), qkv));
    TROUPE_GPU_TRY(gpu::bias_add(qkv, bw(li, attn_b), BT, 3 * C, stream));
  }
  cuda::heads_shape hs{s.batch, H, s.seq, D, 3 * C, 0};
  TROUPE_GPU_TRY(cuda::rows_to_heads(L.q, qkv, hs, stream));
  hs.col = C;
  TROUPE_GPU_TRY(cuda::rows_to_heads(L.k, qkv, hs, stream));
  hs.col = 2 * C;
  TROUPE_GPU_TRY(cuda::rows_to_heads(L.v, qkv, hs, stream));
  gpu::attention_shape as{s.batch, H, s.seq, D, 0.0f};
  TROUPE_GPU_TRY(gpu::attention_forward(L.o, L.lse, L.q, L.k, L.v, as, stream));
  TROUPE_GPU_TRY(cuda::heads_to_rows(L.att, L.o, cuda::heads_shape{s.batch, H, s.seq, D, C, 0}, stream));
  // x_mid = x + att Wᵀ + b: the residual enters as C (beta = 1).
  if (fused) {
    TROUPE_GPU_TRY(lt.run({BT, C, C, false, true, 1.0f, cuda::lt_epilogue::bias, L.att, bw(li, proj_w), x, L.x_mid,
                           bw(li, proj_b), nullptr},
                          stream));
  } else {
    TROUPE_CUDA_CHECK(
      cudaMemcpyAsync(L.x_mid, x, std::size_t(BT) * C * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    TROUPE_GPU_TRY(mm(BT, C, C, false, true, L.att, bw(li, proj_w), L.x_mid, 1.0f));
    TROUPE_GPU_TRY(gpu::bias_add(L.x_mid, bw(li, proj_b), BT, C, stream));
  }

  TROUPE_GPU_TRY(
    gpu::layer_norm_forward(L.ln2, L.mean2, L.rstd2, L.x_mid, bw(li, ln2_w), bw(li, ln2_b), BT, C, ln_eps, stream));
  if (fused) {
    TROUPE_GPU_TRY(lt.run({BT, 4 * C, C, false, true, 0.0f, cuda::lt_epilogue::gelu_bias, L.ln2, bw(li, fc_w), nullptr,
                           L.act, bw(li, fc_b), L.fc},
                          stream));
    return lt.run({BT, C, 4 * C, false, true, 1.0f, cuda::lt_epilogue::bias, L.act, bw(li, mlp_w), L.x_mid, y,
                   bw(li, mlp_b), nullptr},
                  stream);
  }
  TROUPE_GPU_TRY(mm(BT, 4 * C, C, false, true, L.ln2, bw(li, fc_w), L.fc));
  TROUPE_GPU_TRY(gpu::bias_add(L.fc, bw(li, fc_b), BT, 4 * C, stream));
  TROUPE_GPU_TRY(gpu::gelu_forward(L.act, L.fc, std::int64_t(BT) * 4 * C, stream));
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(y, L.x_mid, std::size_t(BT) * C * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
  TROUPE_GPU_TRY(mm(BT, C, 4 * C, false, true, L.act, bw(li, mlp_w), y, 1.0f));
  return gpu::bias_add(y, bw(li, mlp_b), BT, C, stream);
}

gpu::status gpt_cuda::impl::block_backward(cuda_slot& s, int li, const bf16* dy, bf16* dx, const cuda_grad_bufs& k,
                                           bool weights) {
  const int C = cfg.d_model, H = cfg.heads, D = C / H, BT = s.batch * s.seq;
  auto& L = s.layers[std::size_t(li)];
  const bf16* x = s.resid[std::size_t(li)];
  auto& S = scratch;
  // MLP: y = x_mid + act W_mlpᵀ + b; d_fc = (dy W_mlp) · gelu'(fc).
  if (fused) {
    TROUPE_GPU_TRY(lt.run(
      {BT, 4 * C, C, false, false, 0.0f, cuda::lt_epilogue::dgelu, dy, bw(li, mlp_w), nullptr, k.dbig, nullptr, L.fc},
      stream));
  } else {
    TROUPE_GPU_TRY(mm(BT, 4 * C, C, false, false, dy, bw(li, mlp_w), k.dbig));
    TROUPE_GPU_TRY(gpu::gelu_backward(k.dbig, L.fc, k.dbig, std::int64_t(BT) * 4 * C, stream));
  }
  TROUPE_GPU_TRY(mm(BT, C, 4 * C, false, false, k.dbig, bw(li, fc_w), S.dln));
  TROUPE_GPU_TRY(gpu::layer_norm_backward(k.dmid, bg(li, ln2_w), bg(li, ln2_b), S.dln, L.x_mid, bw(li, ln2_w), L.mean2,
                                          L.rstd2, BT, C, stream));
  TROUPE_GPU_TRY(gpu::accumulate(k.dmid, dy, std::int64_t(BT) * C, stream)); // residual branch
  // Attention: x_mid = x + att W_projᵀ + b.
  TROUPE_GPU_TRY(mm(BT, C, C, false, false, k.dmid, bw(li, proj_w), S.datt));
  TROUPE_GPU_TRY(cuda::rows_to_heads(S.dO, S.datt, cuda::heads_shape{s.batch, H, s.seq, D, C, 0}, stream));
  gpu::attention_shape as{s.batch, H, s.seq, D, 0.0f};
  TROUPE_GPU_TRY(gpu::attention_backward(S.dQ, S.dK, S.dV, S.attn_ws, S.dO, L.q, L.k, L.v, L.o, L.lse, as, stream));
  cuda::heads_shape hs{s.batch, H, s.seq, D, 3 * C, 0};
  TROUPE_GPU_TRY(cuda::heads_to_rows(k.dqkv, S.dQ, hs, stream));
  hs.col = C;
  TROUPE_GPU_TRY(cuda::heads_to_rows(k.dqkv, S.dK, hs, stream));
  hs.col = 2 * C;
  TROUPE_GPU_TRY(cuda::heads_to_rows(k.dqkv, S.dV, hs, stream));
  TROUPE_GPU_TRY(mm(BT, C, 3 * C, false, false, k.dqkv, bw(li, attn_w), S.dln));
  TROUPE_GPU_TRY(gpu::layer_norm_backward(dx, bg(li, ln1_w), bg(li, ln1_b), S.dln, x, bw(li, ln1_w), L.mean1, L.rstd1,
                                          BT, C, stream));
  TROUPE_GPU_TRY(gpu::accumulate(dx, k.dmid, std::int64_t(BT) * C, stream)); // residual branch
  return weights ? block_backward_weight(s, li, dy, k) : gpu::status{};
}

gpu::status gpt_cuda::impl::block_backward_weight(cuda_slot& s, int li, const bf16* dy, const cuda_grad_bufs& k) {
  const int C = cfg.d_model, BT = s.batch * s.seq;
  auto& L = s.layers[std::size_t(li)];
  TROUPE_GPU_TRY(mm(C, 4 * C, BT, true, false, dy, L.act, bg(li, mlp_w), 1.0f, 1.0f));
  TROUPE_GPU_TRY(gpu::bias_grad(bg(li, mlp_b), dy, BT, C, stream));
  TROUPE_GPU_TRY(mm(4 * C, C, BT, true, false, k.dbig, L.ln2, bg(li, fc_w), 1.0f, 1.0f));
  TROUPE_GPU_TRY(gpu::bias_grad(bg(li, fc_b), k.dbig, BT, 4 * C, stream));
  TROUPE_GPU_TRY(mm(C, C, BT, true, false, k.dmid, L.att, bg(li, proj_w), 1.0f, 1.0f));
  TROUPE_GPU_TRY(gpu::bias_grad(bg(li, proj_b), k.dmid, BT, C, stream));
  TROUPE_GPU_TRY(mm(3 * C, C, BT, true, false, k.dqkv, L.ln1, bg(li, attn_w), 1.0f, 1.0f));
  return gpu::bias_grad(bg(li, attn_b), k.dqkv, BT, 3 * C, stream);
}

gpu::status gpt_cuda::impl::head_forward(cuda_slot& s) {
  const int C = cfg.d_model, V = vocab_pad, BT = s.batch * s.seq;
  const auto h = head_base();
  const bf16* x = s.resid[std::size_t(local_layers())];
  TROUPE_GPU_TRY(gpu::layer_norm_forward(s.lnf, s.meanf, s.rstdf, x, w(h), w(h + 1), BT, C, ln_eps, stream));
  TROUPE_GPU_TRY(mm(BT, V, C, false, true, s.lnf, w(h + 2), s.logits));
  TROUPE_GPU_TRY(cuda::fill_tail_columns(s.logits, BT, V, cfg.vocab, -INFINITY, stream));
  gpu::cross_entropy_out out{s.loss, s.row_loss, s.count};
  return gpu::cross_entropy_forward_backward(out, s.logits, s.logits, s.targets, BT, V, cfg.ignore_index, 1.0f, stream);
}

gpu::status gpt_cuda::impl::head_backward(cuda_slot& s, float scale, bf16* dx, bool weights) {
  const int C = cfg.d_model, V = vocab_pad, BT = s.batch * s.seq;
  const auto h = head_base();
  const bf16* x = s.resid[std::size_t(local_layers())];
  // s.logits holds d(loss)/d(logits); the loss scale rides on alpha.
  if (weights)
    TROUPE_GPU_TRY(head_backward_weight(s, scale));
  TROUPE_GPU_TRY(gpu::gemm(blas.get(), stream, gpu::gemm_shape{BT, C, V, false, false, scale, 0.0f}, s.logits, w(h + 2),
                           scratch.dln));
  return gpu::layer_norm_backward(dx, g(h), g(h + 1), scratch.dln, x, w(h), s.meanf, s.rstdf, BT, C, stream);
}

gpu::status gpt_cuda::impl::head_backward_weight(cuda_slot& s, float scale) {
  const int C = cfg.d_model, V = vocab_pad, BT = s.batch * s.seq;
  return mm(V, C, BT, true, false, s.logits, s.lnf, g(head_base() + 2), scale, 1.0f);
}

} // namespace troupe::ops
