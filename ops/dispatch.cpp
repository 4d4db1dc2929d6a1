// Argument checks and the unsupported-device error shared by all ops.
#include "ops/dispatch.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::ops {

void unsupported_device(std::string_view op, device dev) {
  throw std::invalid_argument(fmt::format("{}: no kernel for device {}", op, to_string(dev)));
}

void require(bool ok, std::string_view op, std::string_view what) {
  if (!ok)
    throw std::invalid_argument(fmt::format("{}: {}", op, what));
}

void require_f32(const tensor_handle& t, std::string_view op, std::string_view name, long last) {
  if (!t.defined())
    throw std::invalid_argument(fmt::format("{}: {} is undefined", op, name));
  if (t.type() != dtype::f32)
    throw std::invalid_argument(fmt::format("{}: {} must be f32, got {}", op, name, to_string(t.type())));
  if (last >= 0 && (t.rank() == 0 || t.dim(t.rank() - 1) != last))
    throw std::invalid_argument(
      fmt::format("{}: {} must have last dimension {}, got shape {}", op, name, last, to_string(t.shape())));
}

} // namespace troupe::ops
