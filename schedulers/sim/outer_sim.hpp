// Local-update exchanges under the simulated clock (#13, #25): every stage of
// every replica follows its method's schedule and runs an outer_sync peer
// (schedulers/sync/sync_peer.hpp, the actor's own code) whose parts cross
// emulated links that serialise them as the transport's link pacer does.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "schedulers/sim/cluster_sim.hpp"
#include "schedulers/sim/event_queue.hpp"
#include "schedulers/sim/link_pacer.hpp"
#include "schedulers/sync/sync_peer.hpp"

namespace troupe::sched::detail {

/// The outer_sync peers of a cluster and the links between them.
class outer_sim {
public:
  struct hooks : helper_hooks {
    /// The exchanges stage (replica, position) waited for are applied: it takes its next step.
    std::function<void(int replica, int position)> exchanged;
  };
  /// For `replicas` replicas of the positions whose parameters `params` counts
  /// (the cost model's, when c.outer.tensors has no list for a position).
  outer_sim(const cluster_config& c, const std::vector<double>& params, hooks h);
  ~outer_sim();

  /// The schedule's events after the update that completes `steps_done` on stage
  /// (replica, position); true when one is a perform (the stage waits for exchanged).
  bool due(int replica, int position, std::int64_t steps_done);
  /// Runs the events due() found, once the update's compute has ended.
  void run(int replica, int position);
  /// The outer steps, bytes and times into `out`.
  void report(cluster_result& out) const;

private:
  struct peer;
  peer& at(int replica, int position);
  void send(int replica, int position, std::vector<sync_part> parts);
  void try_apply(int replica, int position);

  const cluster_config& c_;
  hooks h_;
  int p_, group_;
  std::vector<std::unique_ptr<peer>> peers_; ///< by replica * positions + position
  std::vector<double> scale_;                ///< by position: real values per simulated value
  link_pacer links_;                         ///< by link key
  double exchange_s_ = 0, wait_s_ = 0;
  long exchanges_timed_ = 0, waits_ = 0;
};

} // namespace troupe::sched::detail
