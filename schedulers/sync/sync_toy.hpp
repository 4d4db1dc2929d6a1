// `troupe sync`'s toy model and what a run of it records: each method that
// has a toy run (sync_method::toy) fills the record its own way (#13).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "runtime/graph/local_update_spec.hpp"

namespace troupe::sched {

/// The toy model: each replica holds `fragments` fragments of `values` weights
/// starting at `start`; every inner step is plain SGD at `inner_lr` on a fixed
/// gradient `grad` (torchft/diloco_regression_test.py: MockLinear's gradient 2,
/// MockOptimizer's `p -= lr·g`).
struct sync_sim_config {
  /// Replica r's fixed gradient.
  float grad_for(int r) const {
    auto it = grad_of.find(r);
    return it != grad_of.end() ? it->second : grad + static_cast<float>(r) * grad_spread;
  }
  local_update_spec spec; ///< the method and its settled options
  int replicas = 2;
  int values = 1; ///< weights per fragment (1: torchft's 1×1 layers)
  float start = 1.0f;
  float inner_lr = 1.0f;
  float grad = 2.0f;
  float grad_spread = 0.0f;     ///< replica r's gradient is grad + r·grad_spread (so replicas drift apart)
  std::map<int, float> grad_of; ///< replicas whose gradient is given here instead
  int steps = 16;               ///< inner steps
  std::uint64_t seed = 1;       ///< seeds a method's random choices (NoLoCo's groups)
};

struct sync_sim_result {
  /// [replica][inner step][fragment]: the first weight of each fragment before the step.
  std::vector<std::vector<std::vector<float>>> history;
  /// [replica]: inner step -> each fragment's saved global (at step 0 and after each exchange).
  std::vector<std::map<int, std::vector<float>>> global;
  /// Bytes each replica put on the wire for its pseudo-gradients (quantized form).
  std::vector<std::int64_t> bytes_sent;
  long exchanges = 0;
  /// Methods that exchange within groups: inner step -> the groups of the exchange after it.
  std::map<int, std::vector<std::vector<int>>> groups;
};

/// A record for `replicas` replicas with nothing in it yet.
sync_sim_result toy_result(std::size_t replicas);

} // namespace troupe::sched
