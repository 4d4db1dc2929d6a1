// gpt_cuda's public calls: forward, evaluation and backward of a microbatch,
// refreshing the bf16 weights after an optimizer step and reading the loss back.
#include <fmt/format.h>

#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/embedding.hpp"
#include "ops/cuda/gpt_cuda_impl.hpp"

namespace troupe::ops {

namespace {

/// Checks a [B, T] (rank 2) or [B, T, C] (rank 3) tensor of type `t`.
gpu::status check_input(const char* op, const char* what, const tensor_handle& x, dtype t, int rank,
                        const gpt_config& cfg, int max_batch) {
  if (!x.defined() || x.type() != t || x.rank() != rank)
    return fail(op, fmt::format("{} must be a {} tensor of rank {}", what, to_string(t), rank));
  if (x.dim(0) < 1 || x.dim(0) > max_batch || x.dim(1) < 1 || x.dim(1) > cfg.context ||
      (rank == 3 && x.dim(2) != cfg.d_model))
    return fail(op, fmt::format("{} has shape {}; want batch ≤ {}, sequence ≤ {}{}", what, to_string(x.shape()),
                                max_batch, cfg.context, rank == 3 ? fmt::format(", width {}", cfg.d_model) : ""));
  return {};
}

} // namespace

gpu::status gpt_cuda::impl::check_forward(const char* op, const tensor_handle& input,
                                          const tensor_handle& targets) const {
  if (!ready)
    return fail(op, "init() has not succeeded");
  TROUPE_GPU_TRY(check_input(op, "input", input, first() ? dtype::i32 : dtype::bf16, first() ? 2 : 3, cfg, max_batch));
  if (last()) {
    TROUPE_GPU_TRY(check_input(op, "targets", targets, dtype::i32, 2, cfg, max_batch));
    if (targets.dim(0) != input.dim(0) || targets.dim(1) != input.dim(1))
      return fail(
        op, fmt::format("targets {} do not match the input {}", to_string(targets.shape()), to_string(input.shape())));
  }
  return {};
}

gpu::status gpt_cuda::impl::run_forward(cuda_slot& s, const tensor_handle& input, const tensor_handle& targets) {
  if (!scratch.qkv)
    TROUPE_GPU_TRY(make_scratch());
  s.batch = int(input.dim(0));
  s.seq = int(input.dim(1));
  const int BT = s.batch * s.seq, C = cfg.d_model;
  if (first()) {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(s.tokens, input.raw(), input.nbytes(), cudaMemcpyDefault, stream));
    TROUPE_GPU_TRY(gpu::embedding_forward(s.resid[0], s.tokens, w(0), w(1), BT, s.seq, cfg.vocab, C, stream));
  } else {
    TROUPE_CUDA_CHECK(cudaMemcpyAsync(s.resid[0], input.raw(), input.nbytes(), cudaMemcpyDefault, stream));
  }
  for (int li = 0; li < local_layers(); ++li)
    TROUPE_GPU_TRY(block_forward(s, li));
  if (!last())
    return {};
  TROUPE_CUDA_CHECK(cudaMemcpyAsync(s.targets, targets.raw(), targets.nbytes(), cudaMemcpyDefault, stream));
  return head_forward(s);
}

namespace {

/// What a forward in slot `s` hands out: the loss [1] or the activations [B, T, C].
tensor_handle forward_output(const gpt_cuda::impl& m, const cuda_slot& s) {
  if (m.last())
    return s.loss_t;
  const std::int64_t C = m.cfg.d_model;
  return s.out_t.slice(0, std::int64_t(s.batch) * s.seq * C).reshape({s.batch, s.seq, C});
}

} // namespace

gpu::status gpt_cuda::forward(int mb, const tensor_handle& input, const tensor_handle& targets, tensor_handle& out) {
  constexpr auto op = "gpt_cuda::forward";
  auto& m = *impl_;
  TROUPE_GPU_TRY(m.check_forward(op, input, targets));
  cuda_slot* s = nullptr;
  for (auto& c : m.slots) {
    if (c.used && c.mb == mb)
      return fail(op, fmt::format("microbatch {} is already in flight", mb));
    if (!c.used && !s)
      s = &c;
  }
  if (!s) {
    m.slots.emplace_back();
    TROUPE_GPU_TRY(m.make_slot(m.slots.back()));
    s = &m.slots.back();
  }
  TROUPE_GPU_TRY(m.run_forward(*s, input, targets)); // on failure the slot stays free
  s->mb = mb;
  s->used = true;
  s->input_done = false;
  if (m.last())
    m.last_loss = s->loss;
  out = forward_output(m, *s);
  return {};
}

gpu::status gpt_cuda::evaluate(const tensor_handle& input, const tensor_handle& targets, tensor_handle& out) {
  auto& m = *impl_;
  TROUPE_GPU_TRY(m.check_forward("gpt_cuda::evaluate", input, targets));
  if (m.eval_slot.resid.empty())
    TROUPE_GPU_TRY(m.make_slot(m.eval_slot));
  TROUPE_GPU_TRY(m.run_forward(m.eval_slot, input, targets));
  out = forward_output(m, m.eval_slot);
  return {};
}

int gpt_cuda::in_flight() const noexcept {
  int n = 0;
  for (const auto& s : impl_->slots)
    n += s.used;
  return n;
}

gpu::status gpt_cuda::backward(int mb, const tensor_handle& grad_out, float loss_scale, tensor_handle& dx) {
  constexpr auto op = "gpt_cuda::backward";
  auto& m = *impl_;
  cuda_slot* s = nullptr;
  for (auto& c : m.slots)
    if (c.used && c.mb == mb)
      s = &c;
  if (!s)
    return fail(op, fmt::format("microbatch {} has no forward in flight", mb));
  if (s->input_done)
    return fail(op, fmt::format("backward_input of microbatch {} already ran: call backward_weight", mb));
  const int BT = s->batch * s->seq, C = m.cfg.d_model;
  auto& S = m.scratch;
  const cuda_grad_bufs shared{S.dbig, S.dmid, S.dqkv};
  int cur = 0;
  auto run = [&]() -> gpu::status {
    if (m.last()) {
      TROUPE_GPU_TRY(m.head_backward(*s, loss_scale, S.dres[0], true));
    } else {
      if (!grad_out.defined() || grad_out.type() != dtype::bf16 || grad_out.rank() != 3 ||
          grad_out.dim(0) != s->batch || grad_out.dim(1) != s->seq || grad_out.dim(2) != C)
        return fail(op, fmt::format("gradient must be bf16 [{}, {}, {}]", s->batch, s->seq, C));
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(S.dres[0], grad_out.raw(), grad_out.nbytes(), cudaMemcpyDefault, m.stream));
    }
    for (int li = m.local_layers() - 1; li >= 0; --li) {
      TROUPE_GPU_TRY(m.block_backward(*s, li, S.dres[cur], S.dres[1 - cur], shared, true));
      cur = 1 - cur;
    }
    if (m.first())
      return gpu::embedding_backward(m.g(0), m.g(1), S.dres[cur], s->tokens, BT, s->seq, m.cfg.vocab, C, m.stream);
    return {};
  };
  auto st = run();
  s->used = false; // a half-done backward cannot be resumed: the microbatch is dropped
  s->mb = -1;
  if (!st.ok())
    return st;
  dx = m.first() ? tensor_handle{} : S.dres_t[cur].slice(0, std::int64_t(BT) * C).reshape({s->batch, s->seq, C});
  return {};
}

gpu::status gpt_cuda::backward_input(int mb, const tensor_handle& grad_out, float loss_scale, tensor_handle& dx) {
  constexpr auto op = "gpt_cuda::backward_input";
  auto& m = *impl_;
  cuda_slot* s = nullptr;
  for (auto& c : m.slots)
    if (c.used && c.mb == mb)
      s = &c;
  if (!s)
    return fail(op, fmt::format("microbatch {} has no forward in flight", mb));
  if (s->input_done)
    return fail(op, fmt::format("backward_input of microbatch {} already ran", mb));
  if (s->dgrad.empty())
    TROUPE_GPU_TRY(m.make_split(*s));
  const int C = m.cfg.d_model, layers = m.local_layers();
  auto run = [&]() -> gpu::status {
    bf16* top = s->dgrad[std::size_t(layers)];
    if (m.last()) {
      s->loss_scale = loss_scale;
      TROUPE_GPU_TRY(m.head_backward(*s, loss_scale, top, false));
    } else {
      if (!grad_out.defined() || grad_out.type() != dtype::bf16 || grad_out.rank() != 3 ||
          grad_out.dim(0) != s->batch || grad_out.dim(1) != s->seq || grad_out.dim(2) != C)
        return fail(op, fmt::format("gradient must be bf16 [{}, {}, {}]", s->batch, s->seq, C));
      TROUPE_CUDA_CHECK(cudaMemcpyAsync(top, grad_out.raw(), grad_out.nbytes(), cudaMemcpyDefault, m.stream));
    }
    for (int li = layers - 1; li >= 0; --li)
      TROUPE_GPU_TRY(m.block_backward(*s, li, s->dgrad[std::size_t(li) + 1], s->dgrad[std::size_t(li)],
                                      s->kept[std::size_t(li)], false));
    return {};
  };
  auto st = run();
  if (!st.ok()) { // a half-done backward cannot be resumed: the microbatch is dropped
    s->used = false;
    s->mb = -1;
    return st;
  }
  s->input_done = true;
  dx = m.first() ? tensor_handle{}
                 : s->dgrad0_t.slice(0, std::int64_t(s->batch) * s->seq * C).reshape({s->batch, s->seq, C});
  return {};
}

gpu::status gpt_cuda::backward_weight(int mb) {
  constexpr auto op = "gpt_cuda::backward_weight";
  auto& m = *impl_;
  cuda_slot* s = nullptr;
  for (auto& c : m.slots)
    if (c.used && c.mb == mb)
      s = &c;
  if (!s)
    return fail(op, fmt::format("microbatch {} has no forward in flight", mb));
  if (!s->input_done)
    return fail(op, fmt::format("backward_input of microbatch {} has not run", mb));
  auto run = [&]() -> gpu::status {
    if (m.last())
      TROUPE_GPU_TRY(m.head_backward_weight(*s, s->loss_scale));
    for (int li = m.local_layers() - 1; li >= 0; --li)
      TROUPE_GPU_TRY(m.block_backward_weight(*s, li, s->dgrad[std::size_t(li) + 1], s->kept[std::size_t(li)]));
    if (m.first())
      return gpu::embedding_backward(m.g(0), m.g(1), s->dgrad[0], s->tokens, s->batch * s->seq, s->seq, m.cfg.vocab,
                                     m.cfg.d_model, m.stream);
    return {};
  };
  auto st = run();
  s->used = false;
  s->mb = -1;
  s->input_done = false;
  return st;
}

gpu::status gpt_cuda::zero_grads() {
  if (!impl_->ready)
    return fail("gpt_cuda::zero_grads", "init() has not succeeded");
  TROUPE_CUDA_CHECK(cudaMemsetAsync(impl_->grad.raw(), 0, impl_->grad.nbytes(), impl_->stream));
  return {};
}

gpu::status gpt_cuda::params_updated() {
  auto& m = *impl_;
  if (!m.ready)
    return fail("gpt_cuda::params_updated", "init() has not succeeded");
  // One pass over the whole buffer: the padding between parameters is zero in
  // both copies. The same rounding as the fused AdamW kernel's bf16 copy.
  TROUPE_GPU_TRY(gpu::convert(m.wbf.data<bf16>(), m.master.data<float>(), m.total, m.stream));
  return {};
}

gpu::status gpt_cuda::synchronize() {
  if (impl_->stream)
    TROUPE_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return {};
}

gpu::status gpt_cuda::loss(float& out) {
  if (!impl_->last_loss)
    return fail("gpt_cuda::loss", "no loss: the last range has run no forward");
  TROUPE_GPU_TRY(synchronize());
  TROUPE_CUDA_CHECK(cudaMemcpy(&out, impl_->last_loss, sizeof(float), cudaMemcpyDeviceToHost));
  return {};
}

} // namespace troupe::ops
