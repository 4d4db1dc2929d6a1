// The cluster driver: every replica's router and stage cores as the actors hold
// them, messages delayed by their link, compute by the cost model, and each
// position's data-parallel ring all-reduce at the step boundary.
#include "schedulers/cluster_sim.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "schedulers/event_queue.hpp"
#include "schedulers/router.hpp"
#include "schedulers/skippipe_routing.hpp"
#include "schedulers/stage_core.hpp"

namespace troupe::sched {

double cluster_result::tflops_per_device() const {
  return iteration_s > 0 && devices > 0 ? flops_per_step / iteration_s / static_cast<double>(devices) / 1e12 : 0.0;
}

namespace {

/// The simulation's state; actor a of replica r is r * (p + 1) + a, where
/// a = 0 is the replica's router and a = 1 + s its stage s.
class cluster {
public:
  explicit cluster(const cluster_config& c) : c_(c), p_(static_cast<int>(c.stages.size())), d_(c.replicas) {}

  expected<cluster_result> run();

private:
  int actor(int replica, int position) const { return replica * (p_ + 1) + 1 + position; }
  int replica_of(int a) const { return a / (p_ + 1); }
  int position_of(int a) const { return a % (p_ + 1) - 1; }  // -1 for a router
  /// An actor's first device, devices numbered as Megatron ranks them:
  /// tensor-parallel fastest, then data-parallel, then pipeline.
  std::int64_t device_of(int a) const {
    int s = std::max(position_of(a), 0);
    return (static_cast<std::int64_t>(s) * d_ + replica_of(a)) * c_.costs.tensor_parallel;
  }
  std::int64_t node_of(int a) const { return c_.costs.network.node_of(device_of(a)); }
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
        return 0;  // the data loader sits with every start node
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
    return c_.on_span && static_cast<std::size_t>(replica) < c_.traced.size() && c_.traced[static_cast<std::size_t>(replica)];
  }
  /// The number of `route` among the routes seen so far (a replica's chain is
  /// one); `sender`'s last route is tried first (a stage sends along few).
  int intern(int sender, const route_t& route) {
    int& last = last_route_[static_cast<std::size_t>(sender)];
    if (last >= 0 && routes_[static_cast<std::size_t>(last)].route == route)
      return last;
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the hops
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
  void gradients_complete(int a);
  expected<void> start_work(int a);

  const cluster_config& c_;
  int p_, d_;
  double now_ = 0;
  event_queue events_;
  std::vector<std::unique_ptr<stage_core>> stages_;  ///< by actor (null for routers)
  std::vector<std::unique_ptr<router_core>> routers_;  ///< by replica
  std::vector<std::uint64_t> dirty_;  ///< bitmap: actors that heard something this instant
  std::size_t dirty_count_ = 0;
  std::vector<int> work_;              ///< the previous instant's dirty actors, being served
  std::vector<double> busy_;           ///< by actor
  std::vector<double> slowdown_;       ///< by actor: its compute's factor
  std::vector<int> forwards_;          ///< by actor
  bool least_loaded_ = c_.route == "least_loaded";
  bool skip_ = c_.skip.present;
  std::vector<int> peak_in_flight_;    ///< by actor
  std::vector<std::vector<chunk_costs>> costs_, head_costs_;  ///< by position, chunk
  std::vector<double> allreduce_;      ///< by position: one ring all-reduce
  std::vector<double> params_;         ///< by position: the stage's parameters (embeddings on the ends)
  std::vector<int> joined_;            ///< by position: replicas whose gradients are complete this step
  int positions_synced_ = 0;           ///< positions whose all-reduce finished this step
  std::int64_t synced_steps_ = 0;      ///< steps whose every all-reduce finished
  double last_complete_ = 0;           ///< when the step's last gradients completed
  double sync_wait_ = 0;
  double last_work_ = 0;  ///< when the last compute or all-reduce ended
  std::uint64_t messages_ = 0;
  std::deque<msg_meta> routes_;  ///< interned routes (a deque: meta() references stay valid as it grows)
  std::unordered_map<std::uint64_t, std::vector<int>> route_ids_;  ///< by hash
  std::vector<int> last_route_;  ///< by actor: the route it sent along last
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
      double work, left;  ///< seconds at full speed: in all, still to do
      event_fn done;
    };
    std::vector<job> jobs;
    double since = 0;  ///< when `left` was last brought up to date
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
  std::unordered_map<std::int64_t, std::size_t> host_of_node_;  ///< by node: index into hosts_
  std::vector<host> hosts_;
  std::vector<std::size_t> host_;      ///< by actor: its node's host (with cores)
  std::vector<double> optimizer_;      ///< by position: one optimizer step
  std::vector<char> updating_;         ///< by actor: its optimizer step runs
};

expected<void> cluster::build() {
  const auto& m = c_.model;
  message_bytes_ = c_.activation_bytes * m.microbatch * m.sequence * m.hidden;
  const int n = d_ * (p_ + 1);
  stages_.resize(static_cast<std::size_t>(n));
  dirty_.assign((static_cast<std::size_t>(n) + 63) / 64, 0);
  last_route_.assign(static_cast<std::size_t>(n), -1);
  busy_.assign(static_cast<std::size_t>(n), 0);
  slowdown_.assign(static_cast<std::size_t>(n), 1.0);
  forwards_.assign(static_cast<std::size_t>(n), 0);
  peak_in_flight_.assign(static_cast<std::size_t>(n), 0);
  joined_.assign(static_cast<std::size_t>(p_), 0);
  updating_.assign(static_cast<std::size_t>(n), 0);
  if (c_.costs.device.cores > 0) {
    host_.assign(static_cast<std::size_t>(n), 0);
    for (int a = 0; a < n; ++a) {
      auto [it, fresh] = host_of_node_.try_emplace(node_of(a), hosts_.size());
      if (fresh)
        hosts_.emplace_back();
      host_[static_cast<std::size_t>(a)] = it->second;
    }
  }
  for (int s = 0; s < p_; ++s) {
    std::vector<chunk_costs> plain, head;
    int layers = 0;
    for (auto [b, e] : c_.stages[static_cast<std::size_t>(s)].chunks) {
      plain.push_back(costs_of(m, c_.costs, e - b, false, b == 0));
      head.push_back(costs_of(m, c_.costs, e - b, true, b == 0));
      layers += e - b;
    }
    costs_.push_back(std::move(plain));
    head_costs_.push_back(std::move(head));
    bool embedding = std::any_of(c_.stages[static_cast<std::size_t>(s)].chunks.begin(),
                                 c_.stages[static_cast<std::size_t>(s)].chunks.end(),
                                 [&](auto ch) { return ch.first == 0 || ch.second == m.layers; });
    params_.push_back(stage_parameters(m, layers, embedding));
    optimizer_.push_back(params_.back() / c_.costs.tensor_parallel * c_.costs.device.optimizer_per_param);
    double grad = params_.back() * c_.gradient_bytes / c_.costs.tensor_parallel;
    // The ring of one tensor-parallel slice over the d replicas, whose devices
    // are consecutive: its slowest link is the level of the widest boundary
    // between the first replica and the last (a node's, then a site's).
    allreduce_.push_back(skip_ ? 0.0 : ring_allreduce_time(d_, grad, link(actor(0, s), actor(d_ - 1, s))));
  }
  if (auto ok = build_routers(); !ok)
    return ok;

  for (int r = 0; r < d_; ++r) {
    const route_t chain = routers_[skip_ ? 0 : static_cast<std::size_t>(r)]->eval_route();
    const int router = skip_ ? 0 : r * (p_ + 1);
    for (int s = 0; s < p_; ++s) {
      const int me = actor(r, s);
      const int v = static_cast<int>(c_.stages[static_cast<std::size_t>(s)].chunks.size());
      policy_params pp;
      pp.rank = s, pp.ranks = p_, pp.chunks = v, pp.options = c_.policy_options;
      if (auto own = c_.stage_policy_options.find(s); own != c_.stage_policy_options.end())
        for (const auto& [k, val] : own->second)  // a position's own options win, as a stage's `policy:` does
          pp.options[k] = val;
      auto policy = make_policy(c_.policy, pp);
      if (!policy)
        return policy.error();
      stage_core_config cc;
      cc.name = fmt::format("r{}s{}", r, s);
      cc.actor = me, cc.rank = s, cc.ranks = p_, cc.chunks = v, cc.router = router, cc.steps = c_.steps;
      cc.reduce_norm = c_.reduce_norm;
      cc.input_credits = chain_input_credits(chain, me, router, p_);  // as a graph without `credits:`
      if (skip_) {
        // A path may come from any node: every stage actor may send here, the router to stage 0.
        cc.input_credits.clear();
        for (int q = 0; q < d_ * (p_ + 1); ++q)
          if (position_of(q) >= 0 && q != me)
            cc.input_credits[q] = 0;
        if (s == 0)
          cc.input_credits[router] = 0;
      }
      if (least_loaded_) {
        // Any replica of the previous position may send here, and this one to any of the next.
        for (int q = 0; q < d_; ++q) {
          if (s > 0)
            cc.input_credits[actor(q, s - 1)] = 0;
          if (s + 1 < p_)
            cc.next_replicas.push_back(actor(q, s + 1));
        }
        cc.hop_reporters = s > 0 ? d_ : 0;
        cc.targets_travel = true;
      }
      if (auto f = c_.slowdown.find(cc.name); f != c_.slowdown.end())
        slowdown_[static_cast<std::size_t>(me)] = f->second;
      stage_core_hooks hk;
      hk.clock = [this] { return now_; };
      // Hooks capture at most 16 bytes (std::function keeps that in place) and
      // messages carry an interned route, not a copy: no allocation per message.
      hk.forward = [this, me](int to, const msg_meta& msg) {
        if (to == me)
          return;
        p2p_bytes_ += message_bytes_;
        deliver(me, to, message_bytes_, [this, to, step = msg.step, mb = msg.microbatch, hop = msg.hop,
                                         id = intern(me, msg.route)] {
          admitted(to, step,
                   [this, to, id, step, mb, hop] { stage(to).on_activation(meta(id, step, mb, hop)); });
        });
      };
      hk.backward = [this, me](int to, const msg_meta& msg) {
        if (to == me)
          return;
        p2p_bytes_ += message_bytes_;
        deliver(me, to, message_bytes_, [this, to, step = msg.step, mb = msg.microbatch, hop = msg.hop,
                                         id = intern(me, msg.route)] {
          admitted(to, step,
                   [this, to, id, step, mb, hop] { stage(to).on_gradient(meta(id, step, mb, hop)); });
        });
      };
      hk.credit = [this, me](int to, int count) {
        deliver(me, to, 0, [this, to, me, count, load = stage(me).load()] {
          if (position_of(to) < 0)
            routers_[static_cast<std::size_t>(replica_of(to))]->grant(me, count);
          else
            stage(to).on_credit(me, count, load);
        });
      };
      hk.hops = [this, me](int to, std::int64_t step, int count) {
        deliver(me, to, 0, [this, to, me, step, count] { stage(to).on_hops(step, me, count); });
      };
      hk.norm = [this, me](int reducer, std::int64_t step, double sq) {
        deliver(me, reducer, 0, [this, reducer, step, sq, me] { stage(reducer).on_norm(step, sq, me); });
      };
      hk.clip = [this, me](int to, std::int64_t step, double total) {
        deliver(me, to, 0, [this, to, step, total] { stage(to).on_clip(step, total); });
      };
      hk.gradients_complete = [this, me](std::int64_t) {
        gradients_complete(me);
        return 0.0;
      };
      // The optimizer step: the stage takes no other work until it is done.
      if (optimizer_[static_cast<std::size_t>(s)] > 0)
        hk.update = [this, me, s](std::int64_t, double) {
          updating_[static_cast<std::size_t>(me)] = 1;
          busy_[static_cast<std::size_t>(me)] += optimizer_[static_cast<std::size_t>(s)];
          compute(me, optimizer_[static_cast<std::size_t>(s)], [this, me] {
            updating_[static_cast<std::size_t>(me)] = 0;
            touch(me);
          });
        };
      stages_[static_cast<std::size_t>(me)] =
        std::make_unique<stage_core>(std::move(cc), std::move(*policy), std::move(hk));
    }
  }
  return {};
}

// Each replica's router on its own chain (by the routing policy); with skip one
// router for every node, its microbatches numbered across replicas.
expected<void> cluster::build_routers() {
  const auto& m = c_.model;
  for (int r = 0; r < (skip_ ? 1 : d_); ++r) {
    routing_params rp;
    rp.layers = m.layers;
    rp.paths = c_.paths;
    router_config rc;
    for (int q = skip_ ? 0 : r; q < (skip_ ? d_ : r + 1); ++q)
      for (int s = 0; s < p_; ++s) {
        auto st = c_.stages[static_cast<std::size_t>(s)];
        st.actor = actor(q, s);
        if (skip_)
          st.name = fmt::format("r{}s{}", q, s), st.replica = q;
        rp.stages.push_back(std::move(st));
        rc.stage_actors.push_back(actor(q, s));
      }
    if (skip_)
      rp.replicas = d_, rp.options["path_length"] = std::to_string(c_.skip.path_length);
    auto routing = skip_ ? make_skippipe_routing(rp) : make_routing(c_.routing, rp);
    if (!routing)
      return routing.error();
    rc.microbatches = c_.microbatches;
    rc.steps = c_.steps;
    rc.tokens_per_microbatch = static_cast<std::int64_t>(m.microbatch) * m.sequence;
    if (least_loaded_) {
      for (int s = 1; s < p_; ++s)
        rc.hops_from_messages.push_back(actor(r, s));
      rc.targets_with_tokens = true;
    }
    if (skip_)
      rc.replicas = d_, rc.across_replicas = true;
    routers_.push_back(std::make_unique<router_core>(rc, std::move(*routing)));
  }
  return {};
}

// A stage's gradients for the step are complete: it joins its position's ring.
// When the last replica joins, the ring runs; when every position's ring is
// done, the routers may start the next step (the optimizer step needs them all).
void cluster::gradients_complete(int a) {
  int s = position_of(a);
  last_complete_ = std::max(last_complete_, now_);
  if (++joined_[static_cast<std::size_t>(s)] < d_)
    return;
  joined_[static_cast<std::size_t>(s)] = 0;
  for (int r = 0; r < d_ && d_ > 1; ++r)
    if (traced(r))
      c_.on_span({r, s, 'S', stage(a).step(), -1, now_, now_ + allreduce_[static_cast<std::size_t>(s)]});
  events_.post(now_ + allreduce_[static_cast<std::size_t>(s)], [this] {
    if (++positions_synced_ < p_)
      return;
    positions_synced_ = 0;
    sync_wait_ += now_ - last_complete_;
    last_work_ = now_;
    ++synced_steps_;
    for (int r = 0; r < static_cast<int>(routers_.size()); ++r)
      touch(r * (p_ + 1));
  });
}

// The replica's router emits what its credits allow, for steps whose predecessor is synced.
void cluster::pump(int r) {
  auto& router = *routers_[static_cast<std::size_t>(r)];
  const int self = r * (p_ + 1);
  const int per_step = c_.microbatches * (skip_ ? d_ : 1);
  while (!router.done() && router.emitted() / per_step <= synced_steps_) {
    auto e = router.next();
    if (!e)
      break;
    for (const auto& [to, plan] : e->plans)
      deliver(self, to, 0, [this, to, plan] { stage(to).on_plan(plan); });
    // Routed across replicas, a microbatch needs a number unique in its step:
    // the step's k-th, k = microbatch × replicas + replica, as one router of all replicas numbers them.
    int id = intern(self, e->route);
    std::int64_t step = e->step;
    int mb = least_loaded_ ? e->microbatch * d_ + r : e->microbatch;
    int head = e->route.front().actor, tail = e->route.back().actor;
    deliver(self, head, 0, [this, head, id, step, mb, both = head == tail] {
      admitted(head, step,
               [this, head, id, step, mb, both] { stage(head).on_batch(meta(id, step, mb, 0), true, both); });
    });
    if (tail != head && !least_loaded_)
      deliver(self, tail, 0, [this, tail, id, step, mb] {
        admitted(tail, step,
                 [this, tail, id, step, mb] { stage(tail).on_batch(meta(id, step, mb, 0), false, true); });
      });
  }
}

void cluster::compute(int a, double work, event_fn done) {
  last_work_ = std::max(last_work_, now_ + work);  // exact on devices of their own (the skip case)
  if (hosts_.empty()) {
    events_.post(now_ + work, std::move(done));
    return;
  }
  const std::size_t node = host_[static_cast<std::size_t>(a)];
  auto& h = hosts_[node];
  advance(h);
  h.jobs.push_back({work, work, std::move(done)});
  replan(node);
}

void cluster::advance(host& h) {
  const double rate = host_rate(h);
  for (auto& j : h.jobs)
    j.left -= (now_ - h.since) * rate;
  h.since = now_;
}

void cluster::replan(std::size_t node) {
  auto& h = hosts_[node];
  if (h.jobs.empty())
    return;
  double first = h.jobs.front().left;
  for (const auto& j : h.jobs)
    first = std::min(first, j.left);
  events_.post(now_ + std::max(first, 0.0) / host_rate(h), [this, node, g = ++h.generation] {
    auto& h = hosts_[node];
    if (h.generation != g)
      return;  // a job started or ended since: replanned
    advance(h);
    // Every job within rounding of its end finishes now, in the order they started.
    std::vector<event_fn> done;
    std::erase_if(h.jobs, [&](host::job& j) {
      if (j.left > 1e-9 * j.work)
        return false;
      done.push_back(std::move(j.done));
      return true;
    });
    replan(node);
    for (auto& f : done)
      f();
  });
}

expected<void> cluster::start_work(int a) {
  auto& s = stage(a);
  if (updating_[static_cast<std::size_t>(a)])
    return {};
  auto task = s.begin();
  if (!task) {
    if (auto w = s.wake_in(); w && *w > 0)
      events_.post(now_ + *w, [this, a] { touch(a); });
    return {};
  }
  const auto& q = s.queue();
  int limit = s.policy().in_flight_limit();
  if (limit > 0 && q.in_flight() > limit)
    return make_sched_error(fmt::format("t={}: policy {} on {} holds {} activations, over its bound {}", now_,
                                        s.policy().name(), s.config().name, q.in_flight(), limit));
  auto& peak = peak_in_flight_[static_cast<std::size_t>(a)];
  peak = std::max(peak, q.in_flight());
  int pos = position_of(a);
  const auto& cc = (task->loss ? head_costs_ : costs_)[static_cast<std::size_t>(pos)][static_cast<std::size_t>(task->chunk)];
  double cost = 0;
  switch (task->what.kind) {
    case op_kind::forward: cost = cc.forward; break;
    case op_kind::backward: cost = cc.backward; break;
    case op_kind::input_grad: cost = cc.backward - cc.weight; break;
    case op_kind::weight_grad: cost = cc.weight; break;
  }
  if (c_.action_cost)
    cost = c_.action_cost(replica_of(a), pos, task->step, task->what.microbatch,
                          static_cast<char>(task->what.kind), cost);
  cost = cost * slowdown_[static_cast<std::size_t>(a)] + c_.costs.device.action_overhead;
  forwards_[static_cast<std::size_t>(a)] += task->what.kind == op_kind::forward;
  busy_[static_cast<std::size_t>(a)] += cost;
  // The span ends when the compute does: at once known on a device of its own, later on shared cores.
  compute(a, cost, [this, a, t = *task, begin = now_] {
    if (traced(replica_of(a)))
      c_.on_span({replica_of(a), position_of(a), static_cast<char>(t.what.kind), t.step, t.what.microbatch, begin,
                  now_});
    stage(a).finish(t);
    touch(a);
  });
  return {};
}

expected<cluster_result> cluster::run() {
  auto wall = std::chrono::steady_clock::now();
  if (auto b = build(); !b)
    return b.error();
  try {
    for (auto& s : stages_)
      if (s)
        s->start();
    for (int r = 0; r < static_cast<int>(routers_.size()); ++r)
      touch(r * (p_ + 1));
    while (!events_.empty() || dirty_count_ > 0) {
      if (dirty_count_ == 0) {
        now_ = events_.next_time();
        while (!events_.empty() && events_.next_time() == now_)
          events_.run_next();
      }
      // Routers first (their credits came in), then every stage that heard something.
      take_dirty();
      for (int a : work_)
        if (position_of(a) < 0)
          pump(replica_of(a));
      for (int a : work_)
        if (position_of(a) >= 0)
          if (auto ok = start_work(a); !ok)
            return ok.error();
    }
  } catch (const std::exception& e) {
    return make_sched_error(fmt::format("simulation at t={}: {}", now_, e.what()));
  }
  for (int a = 0; a < static_cast<int>(stages_.size()); ++a)
    if (stages_[static_cast<std::size_t>(a)] && !stage(a).training_done())
      return make_sched_error(fmt::format("the pipeline stalled with work left: {} at step {} ({} steps synced)",
                                          stage(a).config().name, stage(a).step(), synced_steps_));

  cluster_result out;
  const auto& m = c_.model;
  // With skip, credits still crossing slow links after the last step's work are no part of it.
  out.makespan = skip_ ? last_work_ : now_;
  out.iteration_s = now_ / static_cast<double>(c_.steps);
  out.stage_actors = p_ * d_;
  out.devices = static_cast<std::int64_t>(out.stage_actors) * c_.costs.tensor_parallel;
  std::int64_t batch = static_cast<std::int64_t>(m.microbatch) * c_.microbatches * d_;
  out.tokens_per_step = batch * m.sequence;
  out.flops_per_step = iteration_flops(m, batch, c_.costs.recompute);
  out.model_flops_per_step = iteration_flops(m, batch, false);
  out.parameters = parameter_count(m);
  out.peak_flops = c_.costs.device.peak(c_.costs.dtype);
  out.events = events_.ran();
  out.messages = messages_;
  out.p2p_bytes = p2p_bytes_ / static_cast<double>(c_.steps);
  out.sync_wait_s = sync_wait_ / static_cast<double>(c_.steps);
  const double t = c_.costs.tensor_parallel;
  for (int s = 0; s < p_; ++s) {
    position_result pr;
    pr.name = c_.stages[static_cast<std::size_t>(s)].name;
    for (auto [b, e] : c_.stages[static_cast<std::size_t>(s)].chunks)
      pr.layers += e - b;
    pr.parameters = params_[static_cast<std::size_t>(s)];
    for (int r = 0; r < d_; ++r) {
      pr.busy += busy_[static_cast<std::size_t>(actor(r, s))];
      pr.peak_in_flight = std::max(pr.peak_in_flight, peak_in_flight_[static_cast<std::size_t>(actor(r, s))]);
    }
    out.busy += pr.busy;
    // Mixed-precision Adam keeps 2 + 2 + 12 bytes a parameter (ZeRO, Rajbhandari
    // et al. 2020); activations: the peak in-flight microbatches' layers, or with
    // recomputation only each layer's input plus one layer's working set.
    // (SkipPipe's stage 0 holds its blocks in its first chunk, the head apart.)
    double per_chunk_layers =
      skip_ ? pr.layers : static_cast<double>(pr.layers) / static_cast<double>(costs_[0].size());
    double acts = c_.costs.recompute
                    ? pr.peak_in_flight * per_chunk_layers * 2.0 * m.microbatch * m.sequence * m.hidden / t +
                        layer_activation_bytes(m, c_.costs.tensor_parallel)
                    : pr.peak_in_flight * per_chunk_layers * layer_activation_bytes(m, c_.costs.tensor_parallel);
    pr.memory_bytes = 16.0 * pr.parameters / t + acts;
    pr.allreduce_s = allreduce_[static_cast<std::size_t>(s)];
    if (d_ > 1)
      out.allreduce_bytes += 2.0 * (d_ - 1) / d_ * pr.parameters * c_.gradient_bytes * d_;
    out.positions.push_back(std::move(pr));
  }
  for (int a = 0; a < static_cast<int>(stages_.size()); ++a)
    if (stages_[static_cast<std::size_t>(a)])
      out.forwards[stage(a).config().name] = forwards_[static_cast<std::size_t>(a)];
  out.bubble_fraction = out.makespan > 0 ? 1.0 - out.busy / (out.stage_actors * out.makespan) : 0.0;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return out;
}

} // namespace

double cluster_result::mfu() const {
  double denominator = iteration_s * static_cast<double>(devices) * peak_flops;
  return denominator > 0 ? model_flops_per_step / denominator : 0.0;
}

cluster_config equal_stage_cluster(int stages, int replicas, int microbatches, int steps) {
  cluster_config c;
  c.model = {2 * stages, 256, 4, 128, 256, 1};
  if (auto d = device_preset("a100_80gb"))
    c.costs.device = *d;
  c.costs.network = {8, {}, {}};
  c.costs.count_head = false;
  c.replicas = replicas;
  c.microbatches = microbatches;
  c.steps = steps;
  for (int s = 0; s < stages; ++s)
    c.stages.push_back({0, fmt::format("s{}", s), {{2 * s, 2 * s + 2}}});
  return c;
}

expected<cluster_result> simulate_cluster(const cluster_config& c) {
  if (c.stages.empty() || c.replicas < 1 || c.microbatches < 1 || c.steps < 1)
    return make_sched_error(fmt::format("simulate: stages ({}), replicas ({}), microbatches ({}) and steps ({}) must "
                                        "be at least 1", c.stages.size(), c.replicas, c.microbatches, c.steps));
  if (c.costs.tensor_parallel < 1 || c.costs.device.peak(c.costs.dtype) <= 0 || c.costs.device.memory_bandwidth <= 0)
    return make_sched_error("simulate: tensor_parallel must be at least 1 and the device's peak and memory "
                            "bandwidth positive");
  const auto slots = static_cast<std::size_t>(c.replicas) * c.stages.size();
  auto square = [&](const auto& row) { return row.size() == slots; };
  if (c.skip.present && (c.route != "own" || c.skip.links.size() != slots ||
                         !std::all_of(c.skip.links.begin(), c.skip.links.end(), square)))
    return make_sched_error(fmt::format("simulate: SkipPipe's nodes need route own and {} x {} links (a slot "
                                        "per stage actor)", slots, slots));
  if (c.route != "own" && c.route != "least_loaded")
    return make_sched_error(fmt::format("simulate: unknown route '{}' (known: own, least_loaded)", c.route));
  const auto v = c.stages.front().chunks.size();
  if (c.route == "least_loaded" && v != 1)
    return make_sched_error("simulate: least_loaded routes stages of one chunk each (no interleaving)");
  for (const auto& s : c.stages)
    if (s.chunks.size() != v && !c.skip.present)
      return make_sched_error(fmt::format("simulate: every stage needs the same number of chunks ({} has {}, {} has "
                                          "{})", c.stages.front().name, v, s.name, s.chunks.size()));
  return cluster{c}.run();
}

} // namespace troupe::sched
