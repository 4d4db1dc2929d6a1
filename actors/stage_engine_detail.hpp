// Helpers the stage engine's source files share (actors/stage_engine*.cpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "runtime/trace/trace.hpp"
#include "runtime/tensor/tensor_handle.hpp"
#include "schedulers/action.hpp"

namespace troupe::detail {

inline span_kind span_of(sched::op_kind k) {
  switch (k) {
    case sched::op_kind::forward: return span_kind::forward;
    case sched::op_kind::backward: return span_kind::backward;
    case sched::op_kind::input_grad: return span_kind::backward_input;
    case sched::op_kind::weight_grad: return span_kind::backward_weight;
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

} // namespace troupe::detail
