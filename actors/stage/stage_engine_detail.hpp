// Helpers the stage engine's source files share (actors/stage_engine*.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "runtime/trace/trace.hpp"
#include "runtime/tensor/tensor_handle.hpp"
#include "schedulers/policies/action.hpp"

namespace troupe::detail {

inline span_kind span_of(sched::op_kind k) {
  switch (k) {
  case sched::op_kind::forward:
    return span_kind::forward;
  case sched::op_kind::backward:
    return span_kind::backward;
  case sched::op_kind::input_grad:
    return span_kind::backward_input;
  case sched::op_kind::weight_grad:
    return span_kind::backward_weight;
  case sched::op_kind::overlap:
    return span_kind::forward_backward;
  }
  return span_kind::other;
}

/// Empties a slot and returns what it held.
template <class Slot>
Slot take(Slot& slot, const char* what, const std::string& who) {
  if (!slot.defined())
    throw std::runtime_error(fmt::format("{}: no {} for the action the policy chose", who, what));
  return std::exchange(slot, Slot{});
}

/// d(step loss)/d(a microbatch's mean loss): its share of the step's tokens, as f32 [1].
inline tensor_handle loss_grad(std::int64_t microbatch_tokens, std::int64_t step_tokens) {
  auto g = tensor_handle::empty({1});
  g.data<float>()[0] = static_cast<float>(static_cast<double>(microbatch_tokens) / static_cast<double>(step_tokens));
  return g;
}

/// A host f32 tensor rounded to bf16 (nearest even) for the wire; anything else as it is.
inline tensor_handle narrow_bf16(const tensor_handle& t) {
  if (!t.defined() || t.type() != dtype::f32 || !t.device().is_cpu())
    return t;
  auto out = tensor_handle::empty(t.shape(), dtype::bf16);
  const auto* src = t.data<float>();
  auto* dst = out.data<std::uint16_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, src + i, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu)) // NaN stays NaN
      bits |= 0x10000u;
    else
      bits += 0x7fffu + ((bits >> 16) & 1u);
    dst[i] = static_cast<std::uint16_t>(bits >> 16);
  }
  return out;
}

} // namespace troupe::detail
