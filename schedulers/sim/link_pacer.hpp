// Emulated links that serialise what crosses them, as the transport's link
// pacer does: a message waits behind the link's earlier ones, takes its bytes
// over the bandwidth, then the latency. The ring and the outer exchanges share it.
#pragma once

#include <algorithm>
#include <map>
#include <string>

#include "schedulers/sim/cost_model.hpp"

namespace troupe::sched::detail {

class link_pacer {
public:
  /// The link of `key`: when its last queued byte leaves (references stay valid).
  double& link(const std::string& key) { return busy_until_[key]; }
  /// When `bytes` sent at `now` over `spec`, whose last queued byte leaves at `busy`, arrive.
  static double arrival(double& busy, const link_spec& spec, double now, double bytes) {
    busy = std::max(now, busy) + (spec.bandwidth > 0 ? bytes / spec.bandwidth : 0.0);
    return busy + spec.latency;
  }

private:
  std::map<std::string, double> busy_until_;
};

} // namespace troupe::sched::detail
