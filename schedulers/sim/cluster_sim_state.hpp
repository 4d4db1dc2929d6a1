// The cluster driver's state (schedulers/sim/cluster_sim.cpp runs it,
// schedulers/sim/cluster_sim_build.cpp builds it): private to those two files.
#pragma once

#include <algorithm>
#include <bit>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "schedulers/sim/cluster_sim.hpp"
#include "schedulers/sim/event_queue.hpp"
#include "schedulers/sim/outer_sim.hpp"
#include "schedulers/sim/ring_sim.hpp"
#include "schedulers/routing/router.hpp"
#include "schedulers/routing/skippipe_routing.hpp"
#include "schedulers/policies/stage_core.hpp"

namespace troupe::sched::detail {

/// The simulation's state; actor a of replica r is r * (p + 1) + a, where
/// a = 0 is the replica's router and a = 1 + s its stage s.
class cluster {
public:
  explicit cluster(const cluster_config& c) : c_(c), p_(static_cast<int>(c.stages.size())), d_(c.replicas) {}

  expected<cluster_result> run();

private:
  int actor(int replica, int position) const { return replica * (p_ + 1) + 1 + position; }
  int replica_of(int a) const { return a / (p_ + 1); }
  int position_of(int a) const { return a % (p_ + 1) - 1; } // -1 for a router
  /// An actor's first device, devices numbered as Megatron ranks them:
  /// tensor-parallel fastest, then data-parallel, then pipeline.
  std::int64_t device_of(int a) const {
    int s = std::max(position_of(a), 0);
    return (static_cast<std::int64_t>(s) * d_ + replica_of(a)) * c_.costs.tensor_parallel;
  }
  std::int64_t node_of(int a) const {
    if (!c_.nodes.empty() && position_of(a) >= 0)
      return c_.nodes[slot(a)];
    return c_.costs.network.node_of(device_of(a));
  }
  /// A stage actor's place on the grid, replica by replica (its network node's, with skip).
  std::size_t slot(int a) const { return static_cast<std::size_t>(replica_of(a) * p_ + position_of(a)); }
  const link_spec& link(int from, int to) const { return c_.costs.network.between(device_of(from), device_of(to)); }
  /// A message of `bytes` from `from` to `to`: its delay on their link. Between
  /// nodes the t tensor-parallel devices each send a 1/t slice over their own
  /// NIC (Narayanan et al. 2021, §4.1, scatter/gather).
  double delay(int from, int to, double bytes) const {
    if (from == to)
      return 0;
    if (skip_) {
      if (position_of(from) < 0 || position_of(to) < 0)
        return 0; // the data loader sits with every start node
      return c_.skip.links[slot(from)][slot(to)].time(bytes) + (bytes > 0 ? c_.skip.hop_overhead : 0.0);
    }
    bool remote = node_of(from) != node_of(to);
    return link(from, to).time(remote ? bytes / c_.costs.tensor_parallel : bytes);
  }
  /// Runs `f` (the receiver's handler) after the message's delay; the receiver then looks for work.
  template <class F>
  void deliver(int from, int to, double bytes, F f) {
    ++messages_;
    events_.post(now_ + delay(from, to, bytes), [this, to, f = std::move(f)]() mutable {
      f();
      touch(to);
    });
  }
  /// Runs `f` on stage `to` now, or, when it carries a later step than the
  /// stage is in, once the stage gets there (as the actor holds it:
  /// stage_core::admit): a path's next step may reach a node before that node's
  /// norm reduction over slow links has ended its step.
  template <class F>
  void admitted(int to, std::int64_t step, F f) {
    auto& st = stage(to);
    if (step <= st.step() || st.admit(step, false, [this, to, f] {
          f();
          touch(to);
        }))
      f();
  }
  void touch(int a) {
    auto& word = dirty_[static_cast<std::size_t>(a) >> 6];
    std::uint64_t bit = std::uint64_t{1} << (a & 63);
    dirty_count_ += (word & bit) == 0;
    word |= bit;
  }
  /// Moves the dirty actors into work_, in actor order (memory order of their
  /// state), without a sort: a bitmap scan costs actors / 64 words an instant.
  void take_dirty() {
    work_.clear();
    for (std::size_t w = 0; w < dirty_.size(); ++w)
      for (std::uint64_t x = std::exchange(dirty_[w], 0); x; x &= x - 1)
        work_.push_back(static_cast<int>(w * 64 + static_cast<std::size_t>(std::countr_zero(x))));
    dirty_count_ = 0;
  }
  stage_core& stage(int a) { return *stages_[static_cast<std::size_t>(a)]; }
  bool traced(int replica) const {
    return c_.on_span && static_cast<std::size_t>(replica) < c_.traced.size() &&
           c_.traced[static_cast<std::size_t>(replica)];
  }
  /// The number of `route` among the routes seen so far (a replica's chain is
  /// one); `sender`'s last route is tried first (a stage sends along few).
  int intern(int sender, const route_t& route) {
    int& last = last_route_[static_cast<std::size_t>(sender)];
    if (last >= 0 && routes_[static_cast<std::size_t>(last)].route == route)
      return last;
    std::uint64_t h = 1469598103934665603ull; // FNV-1a over the hops
    for (const auto& x : route)
      h = (h ^ static_cast<std::uint32_t>(x.actor) ^ (static_cast<std::uint64_t>(x.chunk) << 32)) * 1099511628211ull;
    auto& ids = route_ids_[h];
    for (int id : ids)
      if (routes_[static_cast<std::size_t>(id)].route == route)
        return last = id;
    routes_.push_back(msg_meta{0, 0, 0, route});
    ids.push_back(static_cast<int>(routes_.size()) - 1);
    return last = ids.back();
  }
  /// A message's metadata on interned route `id` (valid until the next meta()).
  const msg_meta& meta(int id, std::int64_t step, int mb, int hop) {
    auto& m = routes_[static_cast<std::size_t>(id)];
    m.step = step, m.microbatch = mb, m.hop = hop;
    return m;
  }
  expected<void> build();
  expected<void> build_routers();
  void pump(int replica);
  void step_ready(int a);
  /// Stage actor `a` is done with its step's boundary (its ring, or ZeRO's
  /// gather): when every stage of its replica group is, the routers go on.
  void boundary_done(int a);
  /// The clock, compute (counted as the stage's busy time with `busy`) and network for a stage's helpers.
  helper_hooks helpers(bool busy);
  /// Every bucket of stage actor `a` is back for `step` (ZeRO: reduce-scattered).
  void synced_here(int a, std::int64_t step);
  /// The same, after the stage waited for it: it goes on.
  void ring_back(int a, std::int64_t step);
  /// Its optimizer step ended (and, with ZeRO, the gather; update_done ends its boundary too).
  void end_update(int a);
  void update_done(int a);
  /// Before a compute task: tells the ring when it is the step's last weight-gradient pass over its chunk.
  void weight_pass(int a, const stage_task& t, double seconds);
  expected<void> start_work(int a);

  const cluster_config& c_;
  int p_, d_;
  double now_ = 0;
  event_queue events_;
  std::vector<std::unique_ptr<stage_core>> stages_;   ///< by actor (null for routers)
  std::vector<std::unique_ptr<router_core>> routers_; ///< by replica
  std::vector<std::uint64_t> dirty_;                  ///< bitmap: actors that heard something this instant
  std::size_t dirty_count_ = 0;
  std::vector<int> work_;        ///< the previous instant's dirty actors, being served
  std::vector<double> busy_;     ///< by actor
  std::vector<double> slowdown_; ///< by actor: its compute's factor
  std::vector<int> forwards_;    ///< by actor
  bool least_loaded_ = c_.route == "least_loaded";
  bool skip_ = c_.skip.present;
  std::vector<int> peak_in_flight_;                          ///< by actor
  std::vector<std::vector<chunk_costs>> costs_, head_costs_; ///< by position, chunk
  std::vector<double> params_; ///< by position: the stage's parameters (embeddings on the ends)
  /// Replicas that all-reduce every step: all of them, or a replica group's under local_update.
  int group_ = c_.outer.present ? std::max(c_.outer.group, 1) : d_;
  int group_of(int a) const { return replica_of(a) / group_; }
  std::vector<int> joined_;                         ///< by group: stage actors done with this step's boundary
  std::vector<std::int64_t> synced_steps_;          ///< by group: steps whose every all-reduce finished
  std::vector<double> last_complete_;               ///< by group: when the step's last gradients completed
  std::unique_ptr<outer_sim> outer_;                ///< local-update exchanges
  std::unique_ptr<ring_sim> ring_;                  ///< the data-parallel rings (ZeRO's shards)
  std::vector<double> sync_since_;                  ///< by actor: when its step's gradients were complete
  std::vector<std::int64_t> passes_step_;           ///< by actor: the step its weight_passes_ count
  std::vector<std::vector<int>> weight_passes_;     ///< by actor, chunk: weight-gradient passes begun this step
  std::vector<std::vector<event_fn>> after_update_; ///< by actor: what waits for its optimizer step to end
  /// Runs `f` once actor `a`'s optimizer step has ended (now when none runs).
  void after_update(int a, event_fn f) {
    if (updating_[static_cast<std::size_t>(a)])
      after_update_[static_cast<std::size_t>(a)].push_back(std::move(f));
    else
      f();
  }
  double sync_wait_ = 0;
  double last_work_ = 0; ///< when the last compute or all-reduce ended
  std::uint64_t messages_ = 0;
  std::deque<msg_meta> routes_; ///< interned routes (a deque: meta() references stay valid as it grows)
  std::unordered_map<std::uint64_t, std::vector<int>> route_ids_; ///< by hash
  std::vector<int> last_route_;                                   ///< by actor: the route it sent along last
  double p2p_bytes_ = 0;
  double message_bytes_ = 0;

  /// A node's cores, shared by its stage actors' compute when device.cores > 0:
  /// with n jobs running on C cores each advances at min(1, C/n) seconds of its
  /// work per second (processor sharing, as the OS and an actor runtime's worker
  /// threads share a CPU among actors), less the device's shared_slowdown while
  /// several cores are busy. Only the earliest finisher has an event;
  /// a start or an end re-plans it (the generation drops the stale one).
  struct host {
    struct job {
      double work, left; ///< seconds at full speed: in all, still to do
      event_fn done;
    };
    std::vector<job> jobs;
    double since = 0; ///< when `left` was last brought up to date
    std::uint64_t generation = 0;
  };
  double host_rate(const host& h) const {
    const auto& d = c_.costs.device;
    const double n = static_cast<double>(std::max<std::size_t>(h.jobs.size(), 1)), busy = std::min<double>(n, d.cores);
    const double slower = d.cores > 1 ? 1 + d.shared_slowdown * (busy - 1) / (d.cores - 1) : 1.0;
    return std::min(1.0, d.cores / n) / slower;
  }
  /// Runs `work` seconds of compute for actor `a`, then `done`: at once on its
  /// own device, or shared with the other jobs of its node's cores.
  void compute(int a, double work, event_fn done);
  void advance(host& h);
  void replan(std::size_t node);
  std::unordered_map<std::int64_t, std::size_t> host_of_node_; ///< by node: index into hosts_
  std::vector<host> hosts_;
  std::vector<std::size_t> host_; ///< by actor: its node's host (with cores)
  std::vector<double> optimizer_; ///< by position: one optimizer step
  std::vector<char> updating_;    ///< by actor: its optimizer step runs
};

} // namespace troupe::sched::detail
