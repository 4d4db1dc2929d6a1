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

/// The mask's rows, or null for plain causal attention; checks shape and form.
const std::int32_t* documents_of(const tensor_handle& documents, kernels::cpu::attention_shape s, const char* op) {
  if (!documents.defined())
    return nullptr;
  require(documents.type() == dtype::i32 && documents.rank() == 2 && documents.dim(0) == s.batch &&
            documents.dim(1) == s.seq,
          op, "documents must be i32 [B, T] like the tokens");
  require(documents.device().kind == device::kind_t::cpu, op, "documents must be a host tensor");
  const auto* d = documents.data<std::int32_t>();
  require(kernels::cpu::documents_well_formed(d, s.batch, s.seq), op,
          "documents must give each token its document's first position (0 first, then repeated or its own)");
  return d;
}
} // namespace

tensor_handle core_attention_forward(const tensor_handle& qkv, int heads, core_attention_saved& saved,
                                     const tensor_handle& documents) {
  constexpr auto op = "core_attention_forward";
  auto s = shape_of(qkv, heads, op);
  const auto* docs = documents_of(documents, s, op);
  saved.documents = documents;
  auto out = tensor_handle::empty({s.batch, s.seq, s.heads * s.head_dim}, dtype::f32, qkv.device());
  saved.lse = tensor_handle::empty({s.batch, s.heads, s.seq}, dtype::f32, qkv.device());
  switch (qkv.device().kind) {
  case device::kind_t::cpu: {
    auto scratch = tensor_handle::empty({kernels::cpu::attention_forward_scratch(s)});
    kernels::cpu::attention_forward(qkv.data<float>(), out.data<float>(), saved.lse.data<float>(),
                                    scratch.data<float>(), s, docs);
    return out;
  }
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
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
  const auto* docs = documents_of(saved.documents, s, op);
  auto dqkv = tensor_handle::empty(qkv.shape(), dtype::f32, qkv.device());
  switch (qkv.device().kind) {
  case device::kind_t::cpu: {
    auto scratch = tensor_handle::empty({kernels::cpu::attention_backward_scratch(s)});
    kernels::cpu::attention_backward(dout.data<float>(), qkv.data<float>(), saved.lse.data<float>(), dqkv.data<float>(),
                                     scratch.data<float>(), s, docs);
    return dqkv;
  }
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, qkv.device());
}

} // namespace troupe::ops
