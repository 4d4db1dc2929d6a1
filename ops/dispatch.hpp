// How ops pick a kernel by device, and the errors they raise for bad arguments.
// Each op switches on `device().kind`; the CUDA kernels plug in at the `cuda` case.
#pragma once

#include <string_view>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe::ops {

/// Throws std::invalid_argument: "<op>: no kernel for device <dev>".
[[noreturn]] void unsupported_device(std::string_view op, device dev);

/// Throws std::invalid_argument "<op>: <what>" unless `ok`.
void require(bool ok, std::string_view op, std::string_view what);

/// Requires a defined f32 tensor whose last dimension is `last` (skipped when < 0).
void require_f32(const tensor_handle& t, std::string_view op, std::string_view name, long last = -1);

/// Rows of a tensor seen as [rows, last dimension].
inline long rows_of(const tensor_handle& t) {
  return t.numel() / t.dim(t.rank() - 1);
}

} // namespace troupe::ops
