// The data-parallel ring under the simulated clock (#25): each stage's gradient
// buckets leave as its last backward pass over each chunk completes them (the
// stage's gradient hooks, actors/boundary/grad_buckets.hpp), and every ring
// member runs the actors' bookkeeping (schedulers/sync/ring_peer.hpp) with its
// chunks crossing emulated links paced as the transport paces them. With ZeRO
// the members are optimizer shards: reduce-scatter, the shard's step, all-gather.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "schedulers/sim/cluster_sim.hpp"
#include "schedulers/sim/event_queue.hpp"
#include "schedulers/sim/link_pacer.hpp"
#include "schedulers/sync/ring_peer.hpp"

namespace troupe::sched::detail {

class ring_sim {
public:
  struct hooks : helper_hooks { // compute: the shard's step
    /// Every bucket of stage (replica, position) is back (ZeRO: reduce-scattered) for `step`.
    std::function<void(int replica, int position, std::int64_t step)> synced;
    /// ZeRO: every bucket's updated parameters of `step` are back in stage (replica, position).
    std::function<void(int replica, int position, std::int64_t step)> updated;
  };
  /// Rings of `group` consecutive replicas over the positions whose parameters
  /// `params` counts (the cost model's, when c.ring.tensors has no list).
  ring_sim(const cluster_config& c, int group, const std::vector<double>& params, hooks h);
  ~ring_sim();

  /// Stage (replica, position) starts a weight-gradient pass over `chunk` in
  /// `step`, of `seconds`; `last` when no other follows over that chunk in the
  /// step: its buckets leave as the pass completes them (with overlap).
  void pass(int replica, int position, std::int64_t step, int chunk, bool last, double seconds);
  /// The pass of a `last` pass() ended: the buckets it completed last leave.
  void pass_done(int replica, int position, std::int64_t step, int chunk);
  /// Stage (replica, position)'s work of `step` is done: every bucket not yet
  /// sent leaves. True when every bucket is already back.
  bool flush(int replica, int position, std::int64_t step);
  /// ZeRO: the stage's update of `step`: its shard steps, then every bucket is gathered.
  void update(int replica, int position, std::int64_t step);
  /// One optimizer step of a position's shard (ZeRO: its slice).
  double shard_step_s(int position) const;
  /// Bytes and ring times into `out`.
  void report(cluster_result& out) const;

private:
  struct unit {}; ///< a chunk under the simulated clock: only its size travels, and the plan has it
  using book = ring_peer<unit>;
  struct position_layout;
  struct member;
  struct stage_state;
  member& member_of(int replica, int position);
  stage_state& stage(int replica, int position);
  void release(int replica, int position, std::int64_t step, int bucket);
  void run(int group, int position, int j, std::vector<book::event> events);
  void done(int group, int position, int j, const book::event& e);

  const cluster_config& c_;
  hooks h_;
  int p_, n_, k_;                                        ///< positions, replicas a ring, members simulated a ring
  std::vector<std::unique_ptr<position_layout>> layout_; ///< by position
  std::vector<std::unique_ptr<member>> members_;         ///< by (group · p + position) · k + j
  std::vector<std::unique_ptr<stage_state>> stages_;     ///< by replica · p + position
  link_pacer links_;
  std::vector<std::pair<double, double>> ring_s_; ///< by position: ring times summed, and their count
};

} // namespace troupe::sched::detail
