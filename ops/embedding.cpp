// Embedding op: token range checks, then gather / scatter-add kernels.
#include "ops/embedding.hpp"

#include <fmt/format.h>

#include "kernels/cpu/embedding.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {
void check_tokens(const tensor_handle& tokens, long vocab, long context, const char* op) {
  require(tokens.defined() && tokens.type() == dtype::i32 && tokens.rank() == 2, op, "tokens must be i32 [B, T]");
  require(tokens.dim(1) <= context, op,
          fmt::format("sequence length {} exceeds the context {}", tokens.dim(1), context));
  if (tokens.device().is_cpu()) {
    const auto* t = tokens.data<std::int32_t>();
    for (long i = 0; i < tokens.numel(); ++i)
      require(t[i] >= 0 && t[i] < vocab, op, fmt::format("token {} at position {} is outside [0, {})", t[i], i, vocab));
  }
}
} // namespace

tensor_handle embedding_forward(const tensor_handle& tokens, const tensor_handle& wte, const tensor_handle& wpe) {
  constexpr auto op = "embedding_forward";
  require_f32(wte, op, "wte");
  const long channels = wte.dim(1);
  if (wpe.defined())
    require_f32(wpe, op, "wpe", channels);
  check_tokens(tokens, wte.dim(0), wpe.defined() ? wpe.dim(0) : tokens.dim(1), op);
  const long b = tokens.dim(0), t = tokens.dim(1);
  auto out = tensor_handle::empty({b, t, channels}, dtype::f32, wte.device());
  switch (wte.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::embedding_forward(tokens.data<std::int32_t>(), wte.data<float>(),
                                    wpe.defined() ? wpe.data<float>() : nullptr, out.data<float>(), b, t, channels);
    return out;
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, wte.device());
}

void embedding_backward_weight(const tensor_handle& dout, const tensor_handle& tokens, tensor_handle& dwte,
                               tensor_handle& dwpe) {
  constexpr auto op = "embedding_backward_weight";
  require_f32(dwte, op, "dwte");
  const long channels = dwte.dim(1);
  if (dwpe.defined())
    require_f32(dwpe, op, "dwpe", channels);
  check_tokens(tokens, dwte.dim(0), dwpe.defined() ? dwpe.dim(0) : tokens.dim(1), op);
  require_f32(dout, op, "dout", channels);
  require(dout.numel() == tokens.numel() * channels, op, "dout must be [B, T, C] for tokens [B, T]");
  switch (dwte.device().kind) {
  case device::kind_t::cpu:
    kernels::cpu::embedding_backward(dout.data<float>(), tokens.data<std::int32_t>(), dwte.data<float>(),
                                     dwpe.defined() ? dwpe.data<float>() : nullptr, tokens.dim(0), tokens.dim(1),
                                     channels);
    return;
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, dwte.device());
}

} // namespace troupe::ops
