// What a stage's helpers under the simulated clock (the ring, the outer
// exchanges) share: the cluster's clock, compute and network, and emulated
// links that serialise what crosses them, as the transport's link pacer does.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "schedulers/sim/cost_model.hpp"
#include "schedulers/sim/event_queue.hpp"

namespace troupe::sched::detail {

/// The cluster as a helper beside each stage sees it.
struct helper_hooks {
  std::function<double()> now;
  std::function<void(double at, event_fn)> post;
  /// `work` seconds of the helper's compute beside stage (replica, position), then `done`.
  std::function<void(int replica, int position, double work, event_fn done)> compute;
  /// The network's link between the devices of stages (from, position) and (to, position).
  std::function<link_spec(int position, int from, int to)> network;
};

/// A message waits behind the link's earlier ones, takes its bytes over the
/// bandwidth, then the latency.
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
