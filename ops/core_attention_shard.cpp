// Shard attention on the CPU: the register-blocked kernels of core attention
// (kernels/cpu/attention.hpp), a rectangle of prefix keys beside a causal triangle;
// the backward rebuilds the probabilities from the forward's lse.
#include "ops/core_attention_shard.hpp"

#include "kernels/cpu/attention.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {

struct shard_shape {
  long nq, nkv, heads, hd, c;
};

shard_shape check(const tensor_handle& q, const tensor_handle& k, const tensor_handle& v, int heads, const char* op) {
  require_f32(q, op, "q");
  require_f32(k, op, "k");
  require_f32(v, op, "v");
  require(q.rank() == 2 && k.rank() == 2 && v.rank() == 2, op, "q, k and v must be [tokens, C]");
  const long c = q.dim(1);
  require(k.dim(1) == c && v.dim(1) == c && k.dim(0) == v.dim(0), op, "k and v must be [kv, C] with q's C");
  require(q.dim(0) >= 1 && q.dim(0) <= k.dim(0), op, "a shard has 1 to kv queries");
  require(heads > 0 && c % heads == 0, op, "C must be heads · head_dim");
  require(q.device().is_cpu(), op, "shard attention runs on the CPU");
  return {q.dim(0), k.dim(0), heads, c / heads, c};
}

} // namespace

tensor_handle shard_attention_forward(const tensor_handle& q, const tensor_handle& k, const tensor_handle& v, int heads,
                                      shard_attention_saved& saved) {
  constexpr auto op = "shard_attention_forward";
  auto s = check(q, k, v, heads, op);
  auto out = tensor_handle::empty({s.nq, s.c});
  saved.lse = tensor_handle::empty({s.heads, s.nq});
  // From the storage pool, uninitialised (a value-initialised vector would clear q·kv floats every call).
  auto scratch = tensor_handle::empty({kernels::cpu::attention_shard_forward_scratch(s.nq, s.nkv, s.hd)});
  kernels::cpu::attention_shard_forward(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                                        saved.lse.data<float>(), scratch.data<float>(), s.nq, s.nkv, s.heads, s.hd);
  return out;
}

shard_attention_grads shard_attention_backward(const tensor_handle& dout, const tensor_handle& q,
                                               const tensor_handle& k, const tensor_handle& v,
                                               const shard_attention_saved& saved, int heads) {
  constexpr auto op = "shard_attention_backward";
  auto s = check(q, k, v, heads, op);
  require_f32(dout, op, "dout", s.c);
  require(dout.numel() == s.nq * s.c, op, "dout must be [q, C]");
  require(saved.lse.defined() && saved.lse.numel() == s.heads * s.nq, op, "saved statistics do not match q");
  shard_attention_grads g{tensor_handle::empty({s.nq, s.c}), tensor_handle::empty({s.nkv, s.c}),
                          tensor_handle::empty({s.nkv, s.c})};
  auto scratch = tensor_handle::empty({kernels::cpu::attention_shard_backward_scratch(s.nq, s.nkv, s.hd)});
  kernels::cpu::attention_shard_backward(dout.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(),
                                         saved.lse.data<float>(), g.dq.data<float>(), g.dk.data<float>(),
                                         g.dv.data<float>(), scratch.data<float>(), s.nq, s.nkv, s.heads, s.hd);
  return g;
}

} // namespace troupe::ops
