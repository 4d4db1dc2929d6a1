// gpt_range's training forward and fused backward in pieces that stop at each
// layer's core attention (DistCA's attention servers run it elsewhere, #15).
#include <fmt/format.h>

#include "ops/dispatch.hpp"
#include "ops/gpt_impl.hpp"

namespace troupe::ops {

tensor_handle gpt_range::forward_begin(int mb, const tensor_handle& input, const tensor_handle& targets,
                                       const tensor_handle& documents) {
  constexpr auto op = "gpt_range::forward_begin";
  auto& m = *impl_;
  require(m.local_layers() > 0, op, "a range without layers has no core attention to run apart");
  auto& c = m.begin_forward(mb, input, targets, op);
  try {
    auto x = m.embed(c, input);
    c.targets = targets;
    c.documents = documents;
    c.layer = 0;
    return m.block_pre_attention(0, x, c.layers[0], documents);
  } catch (...) {
    m.release(c);
    throw;
  }
}

namespace {
void check_piece(const mb_cache& c, const tensor_handle& t, long width, const char* what, const char* op) {
  require_f32(t, op, what, width);
  require(t.rank() == 3 && t.dim(0) == c.batch && t.dim(1) == c.seq, op,
          fmt::format("{} must be [{}, {}, {}], got {}", what, c.batch, c.seq, width, to_string(t.shape())));
}
} // namespace

tensor_handle gpt_range::forward_resume(int mb, const tensor_handle& att, bool& done) {
  constexpr auto op = "gpt_range::forward_resume";
  auto& m = *impl_;
  auto& c = m.find(mb, op);
  require(c.layer >= 0 && !c.input_done, op, fmt::format("microbatch {} is not waiting for attention", mb));
  check_piece(c, att, m.cfg.d_model, "att", op);
  try {
    const int li = c.layer;
    auto x = m.block_post_attention(li, att, c.layers[std::size_t(li)]);
    done = li + 1 == m.local_layers();
    if (!done) {
      c.layer = li + 1;
      return m.block_pre_attention(li + 1, x, c.layers[std::size_t(li + 1)], c.documents);
    }
    c.layer = -1;
    c.documents = {};
    if (!m.last())
      return x;
    auto loss = m.head_forward(c, x, c.targets);
    c.targets = {};
    return loss;
  } catch (...) {
    m.release(c);
    throw;
  }
}

tensor_handle gpt_range::backward_begin(int mb, const tensor_handle& grad_out, bool weights) {
  constexpr auto op = "gpt_range::backward_begin";
  auto& m = *impl_;
  if (weights)
    m.ensure_grads();
  auto& c = m.find(mb, op);
  require(c.layer < 0 && !c.input_done, op,
          fmt::format("microbatch {} has no finished forward to go back through", mb));
  m.check_grad_out(c, grad_out, op);
  try {
    c.weights_later = !weights;
    auto dx = m.last() ? m.head_backward(c, grad_out, weights) : grad_out;
    c.layer = m.local_layers() - 1;
    return m.block_backward_post_attention(c.layer, dx, c.layers[std::size_t(c.layer)]);
  } catch (...) {
    m.release(c);
    throw;
  }
}

tensor_handle gpt_range::backward_resume(int mb, const tensor_handle& d_qkv, bool& done) {
  constexpr auto op = "gpt_range::backward_resume";
  auto& m = *impl_;
  auto& c = m.find(mb, op);
  require(c.layer >= 0 && !c.input_done, op, fmt::format("microbatch {} is not waiting for attention's backward", mb));
  check_piece(c, d_qkv, 3L * m.cfg.d_model, "d_qkv", op);
  try {
    const int li = c.layer;
    auto& lc = c.layers[std::size_t(li)];
    lc.d_qkv = d_qkv;
    auto dx = m.block_backward_pre_attention(li, lc);
    if (!c.weights_later) {
      m.block_backward_weight(li, lc);
      m.done(m.block_base(li), m.block_base(li + 1));
    }
    done = li == 0;
    if (!done) {
      c.layer = li - 1;
      return m.block_backward_post_attention(li - 1, dx, c.layers[std::size_t(li - 1)]);
    }
    if (c.weights_later) { // as backward_input ends: backward_weight takes it from here
      c.layer = -1;
      c.input_done = true;
      if (m.first())
        c.d_emb = dx, dx = {};
      return dx;
    }
    if (m.first()) {
      c.d_emb = dx;
      m.embed_backward_weight(c);
      dx = {};
    }
    m.release(c);
    return dx;
  } catch (...) {
    m.release(c);
    throw;
  }
}

} // namespace troupe::ops
