// For kernel tests: run a check once on every SIMD target this processor supports.
#pragma once

#include <doctest/doctest.h>

#include "kernels/cpu/target.hpp"

namespace troupe::kernels::cpu {

/// Runs `body` on each target of supported_kernel_targets() (best first), the target's
/// name in every failure message, then lifts the cap again.
template <class F>
void for_each_target(F&& body) {
  for (const auto& t : supported_kernel_targets()) {
    INFO("kernel target " << t);
    REQUIRE(!set_kernel_target(t));
    REQUIRE(kernel_target() == t);
    body();
  }
  REQUIRE(!set_kernel_target("best"));
}

} // namespace troupe::kernels::cpu
