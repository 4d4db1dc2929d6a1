// Core attention op: shape checks and dispatch to the attention kernels.
#include "ops/core_attention.hpp"

#include "kernels/cpu/attention.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {
kernels::cpu::attention_shape shape_of(const tensor_handle& qkv, int heads, const char* op) {
  require_f32(qkv, op, "qkv");
  require(qkv.rank() == 3, op, "qkv must be [B, T, 3C]");
  const long c3 = qkv.dim(2);
  require(heads > 0 && c3 % (3L * heads) == 0, op, "qkv's last dimension must be 3 · heads · head_dim");
  return {qkv.dim(0), qkv.dim(1), heads, c3 / (3L * heads)};
}
} // namespace

tensor_handle core_attention_forward(const tensor_handle& qkv, int heads, core_attention_saved& saved) {
  constexpr auto op = "core_attention_forward";
  auto s = shape_of(qkv, heads, op);
  auto out = tensor_handle::empty({s.batch, s.seq, s.heads * s.head_dim}, dtype::f32, qkv.device());
  saved.lse = tensor_handle::empty({s.batch, s.heads, s.seq}, dtype::f32, qkv.device());
  switch (qkv.device().kind) {
    case device::kind_t::cpu: {
      auto scratch = tensor_handle::empty({kernels::cpu::attention_forward_scratch(s)});
      kernels::cpu::attention_forward(qkv.data<float>(), out.data<float>(), saved.lse.data<float>(),
                                      scratch.data<float>(), s);
      return out;
    }
    case device::kind_t::cuda: break; // kernels/cuda launchers go here
  }
  unsupported_device(op, qkv.device());
}

tensor_handle core_attention_backward(const tensor_handle& dout, const tensor_handle& qkv,
                                      const core_attention_saved& saved, int heads) {
  constexpr auto op = "core_attention_backward";
  auto s = shape_of(qkv, heads, op);
  require_f32(dout, op, "dout", s.heads * s.head_dim);
  require(dout.numel() == s.batch * s.seq * s.heads * s.head_dim, op, "dout must be [B, T, C]");
  require(saved.lse.defined() && saved.lse.numel() == s.batch * s.heads * s.seq, op,
          "saved softmax statistics do not match qkv");
  auto dqkv = tensor_handle::empty(qkv.shape(), dtype::f32, qkv.device());
  switch (qkv.device().kind) {
    case device::kind_t::cpu: {
      auto scratch = tensor_handle::empty({kernels::cpu::attention_backward_scratch(s)});
      kernels::cpu::attention_backward(dout.data<float>(), qkv.data<float>(), saved.lse.data<float>(),
                                       dqkv.data<float>(), scratch.data<float>(), s);
      return dqkv;
    }
    case device::kind_t::cuda: break;
  }
  unsupported_device(op, qkv.device());
}

} // namespace troupe::ops
