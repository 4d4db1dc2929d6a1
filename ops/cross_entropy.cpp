// Cross-entropy op: target checks and dispatch to the fused softmax kernels.
#include "ops/cross_entropy.hpp"

#include <fmt/format.h>

#include "kernels/cpu/cross_entropy.hpp"
#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {
void check(const tensor_handle& logits, const tensor_handle& targets, std::int32_t ignore, const char* op) {
  require_f32(logits, op, "logits");
  require(targets.defined() && targets.type() == dtype::i32, op, "targets must be i32");
  const long vocab = logits.dim(logits.rank() - 1);
  require(targets.numel() == rows_of(logits), op, "targets must have one entry per row of logits");
  if (targets.device().is_cpu()) {
    const auto* t = targets.data<std::int32_t>();
    for (long i = 0; i < targets.numel(); ++i)
      require(t[i] == ignore || (t[i] >= 0 && t[i] < vocab), op,
              fmt::format("target {} at position {} is outside [0, {})", t[i], i, vocab));
  }
}
} // namespace

float cross_entropy_forward(const tensor_handle& logits, const tensor_handle& targets, std::int32_t ignore_index) {
  constexpr auto op = "cross_entropy_forward";
  check(logits, targets, ignore_index, op);
  switch (logits.device().kind) {
  case device::kind_t::cpu:
    return kernels::cpu::cross_entropy_forward(logits.data<float>(), targets.data<std::int32_t>(), rows_of(logits),
                                               logits.dim(logits.rank() - 1), ignore_index, nullptr);
  case device::kind_t::cuda:
    break; // kernels/cuda launchers go here
  }
  unsupported_device(op, logits.device());
}

tensor_handle cross_entropy_backward(const tensor_handle& logits, const tensor_handle& targets, float dloss,
                                     std::int32_t ignore_index, float* loss) {
  constexpr auto op = "cross_entropy_backward";
  check(logits, targets, ignore_index, op);
  auto d = tensor_handle::empty(logits.shape(), dtype::f32, logits.device());
  switch (logits.device().kind) {
  case device::kind_t::cpu: {
    float l = kernels::cpu::cross_entropy_backward(logits.data<float>(), targets.data<std::int32_t>(), d.data<float>(),
                                                   rows_of(logits), logits.dim(logits.rank() - 1), ignore_index, dloss);
    if (loss)
      *loss = l;
    return d;
  }
  case device::kind_t::cuda:
    break;
  }
  unsupported_device(op, logits.device());
}

} // namespace troupe::ops
