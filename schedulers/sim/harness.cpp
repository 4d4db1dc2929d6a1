// The discrete-event driver: the stage actors' own scheduling cores and router
// under a simulated clock, messages taking `latency`, a cost model for compute.
#include "schedulers/sim/harness.hpp"

#include <algorithm>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "schedulers/sim/event_queue.hpp"
#include "schedulers/routing/router.hpp"
#include "schedulers/routing/routing_policy.hpp"
#include "schedulers/policies/stage_core.hpp"

namespace troupe::sched {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double factor(const std::vector<double>& f, int i) {
  return i >= 0 && i < static_cast<int>(f.size()) ? f[i] : 1.0;
}

} // namespace

double operation_cost(const sim_config& c, int rank, const action& a) {
  if (a.kind == op_kind::overlap) { // its parts' costs (slowdowns and jitter included), scaled to the F&B cost
    double sum = 0;
    for (const auto& x : parts(a))
      sum += operation_cost(c, rank, x);
    return c.overlap_cost > 0 ? sum * c.overlap_cost / (c.forward_cost + c.backward_cost) : sum;
  }
  double base = 0;
  switch (a.kind) {
  case op_kind::forward:
    base = c.forward_cost;
    break;
  case op_kind::backward:
    base = c.backward_cost;
    break;
  case op_kind::input_grad:
    base = c.backward_cost - c.weight_cost;
    break;
  case op_kind::weight_grad:
    base = c.weight_cost;
    break;
  case op_kind::overlap: // above
    break;
  }
  base /= std::max(c.chunks, 1);
  double cost = base * factor(c.rank_slowdown, rank) * factor(c.microbatch_slowdown, a.microbatch);
  if (c.jitter > 0) {
    std::uint64_t key = c.seed * 0x100000001b3ULL;
    key = splitmix64(key ^ static_cast<std::uint64_t>(a.stage));
    key = splitmix64(key ^ static_cast<std::uint64_t>(static_cast<unsigned char>(a.kind)));
    key = splitmix64(key ^ static_cast<std::uint64_t>(a.microbatch));
    double u = static_cast<double>(key >> 11) * 0x1.0p-53; // [0, 1)
    cost *= 1.0 + c.jitter * (2.0 * u - 1.0);
  }
  return cost;
}

double theoretical_bubble(int p, int m, int v) {
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
}

// The driver: a router (routing policy `chain`) and one stage_core per rank,
// exactly as the actors hold them, with messages delayed by `latency` and the
// cost model standing in for compute. Actor 0 is the router, rank r is actor r + 1.
expected<sim_result> simulate(const sim_config& c, const policy_maker& make) {
  const int p = c.ranks, m = c.microbatches, v = c.chunks;
  if (p < 1 || m < 1 || v < 1)
    return make_sched_error(
      fmt::format("simulate: ranks ({}), microbatches ({}) and chunks ({}) must be at least 1", p, m, v));
  if (c.forward_cost <= 0 || c.backward_cost <= 0 || c.weight_cost < 0 || c.overlap_cost < 0 || c.latency < 0 ||
      c.jitter < 0 || c.jitter >= 1)
    return make_sched_error(fmt::format("simulate: costs must be positive (F={} B={} W={} F&B={}), latency "
                                        "non-negative ({}) and jitter in [0, 1) ({})",
                                        c.forward_cost, c.backward_cost, c.weight_cost, c.overlap_cost, c.latency,
                                        c.jitter));
  std::vector<policy_ptr> policies;
  bool any_split = false;
  for (int r = 0; r < p; ++r) {
    auto pol = make(r);
    if (!pol)
      return pol.error();
    any_split |= (*pol)->splits_backward();
    policies.push_back(std::move(*pol));
  }
  if (any_split && c.weight_cost >= c.backward_cost)
    return make_sched_error(fmt::format("simulate: a split backward needs W < B so that I = B - W is positive "
                                        "(B={}, W={})",
                                        c.backward_cost, c.weight_cost));

  constexpr int router_actor = 0;
  auto actor_of = [](int rank) { return rank + 1; };
  routing_params rp;
  rp.layers = p * v;
  const auto placement = policies.front()->placement(); // layer s is virtual stage s
  for (int r = 0; r < p; ++r) {
    route_stage st{actor_of(r), fmt::format("s{}", r), {}};
    for (int k = 0; k < v; ++k)
      st.chunks.emplace_back(virtual_stage(r, p, k, placement), virtual_stage(r, p, k, placement) + 1);
    rp.stages.push_back(std::move(st));
  }
  auto routing = make_routing("chain", rp);
  if (!routing)
    return routing.error();
  const route_t chain = (*routing)->route(0, 0, 0);
  router_config rc;
  for (int r = 0; r < p; ++r)
    rc.stage_actors.push_back(actor_of(r));
  rc.microbatches = m;
  router_core router(rc, std::move(*routing));

  sim_result out;
  out.orders.resize(p);
  out.timeline.resize(p);
  out.peak_in_flight.assign(p, 0);
  out.peak_deferred_weight.assign(p, 0);
  for (auto& pol : policies)
    out.in_flight_limit.push_back(pol->in_flight_limit());

  event_queue events;
  double now = 0;
  std::vector<std::unique_ptr<stage_core>> stages;
  auto stage = [&](int actor) -> stage_core& { return *stages.at(static_cast<std::size_t>(actor - 1)); };
  // A message from `from` to `to`, delivered after the latency (at once to itself).
  auto send = [&](int from, int to, std::function<void()> deliver) {
    events.post(from == to ? now : now + c.latency, std::move(deliver));
  };
  for (int r = 0; r < p; ++r) {
    int me = actor_of(r);
    stage_core_config cc;
    cc.name = fmt::format("rank {}", r);
    cc.actor = me, cc.rank = r, cc.ranks = p, cc.chunks = v, cc.router = router_actor, cc.steps = 1;
    cc.reduce_norm = true;
    // Credits as a graph without `credits:` gets them.
    cc.input_credits = chain_input_credits(chain, me, router_actor, p);
    stage_core_hooks hk;
    hk.clock = [&now] { return now; };
    hk.forward = [&, me](int to, const msg_meta& msg) {
      if (to != me)
        ++out.pipeline_messages, send(me, to, [&, to, msg] { stage(to).on_activation(msg); });
    };
    hk.backward = [&, me](int to, const msg_meta& msg) {
      if (to != me)
        ++out.pipeline_messages, send(me, to, [&, to, msg] { stage(to).on_gradient(msg); });
    };
    hk.credit = [&, me](int to, int count) {
      send(me, to, [&, to, me, count] {
        if (to == router_actor)
          router.grant(me, count);
        else
          stage(to).on_credit(me, count);
      });
    };
    hk.norm = [&, me](int reducer, std::int64_t step, double sq) {
      send(me, reducer, [&, reducer, step, sq, me] { stage(reducer).on_norm(step, sq, me); });
    };
    hk.clip = [&, me](int to, std::int64_t step, double total) {
      send(me, to, [&, to, step, total] { stage(to).on_clip(step, total); });
    };
    stages.push_back(
      std::make_unique<stage_core>(std::move(cc), std::move(policies[static_cast<std::size_t>(r)]), std::move(hk)));
  }

  // The router emits what its credits allow: plans first, then tokens and targets.
  auto pump = [&] {
    while (auto e = router.next()) {
      for (const auto& [actor, plan] : e->plans)
        send(router_actor, actor, [&, actor, plan] { stage(actor).on_plan(plan); });
      msg_meta msg{e->step, e->microbatch, 0, e->route};
      int head = e->route.front().actor, tail = e->route.back().actor;
      send(router_actor, head, [&, head, msg, both = head == tail] { stage(head).on_batch(msg, true, both); });
      if (tail != head)
        send(router_actor, tail, [&, tail, msg] { stage(tail).on_batch(msg, false, true); });
    }
  };

  std::vector<double> wake(p, -1); // the wake-up each rank has pending
  try {
    for (auto& s : stages)
      s->start();
    while (!events.empty()) {
      now = events.next_time();
      while (!events.empty() && events.next_time() == now)
        events.run_next();
      pump();
      for (int r = 0; r < p; ++r) {
        auto& s = *stages[static_cast<std::size_t>(r)];
        auto task = s.begin();
        if (!task) {
          if (auto w = s.wake_in(); w && *w > 0 && now + *w != wake[r]) {
            wake[r] = now + *w;
            events.post(now + *w, [] {}); // only a reason to ask the policies again
          }
          continue;
        }
        const auto& q = s.queue();
        int limit = out.in_flight_limit[r];
        if (limit > 0 && q.in_flight() > limit)
          return make_sched_error(fmt::format("simulate at t={}: policy {} on rank {} holds {} activations, over "
                                              "its bound {}",
                                              now, s.policy().name(), r, q.in_flight(), limit));
        out.peak_in_flight[r] = std::max(out.peak_in_flight[r], q.in_flight());
        out.peak_deferred_weight[r] = std::max(out.peak_deferred_weight[r], q.deferred_weight_count());
        out.orders[r].push_back(task->what);
        double start = now;
        events.post(now + operation_cost(c, r, task->what), [&, r, start, t = *task] {
          out.timeline[r].push_back({t.what, start, now});
          out.busy += now - start;
          out.makespan = std::max(out.makespan, now);
          stages[static_cast<std::size_t>(r)]->finish(t);
        });
      }
    }
  } catch (const std::exception& e) {
    return make_sched_error(fmt::format("simulate at t={}: {}", now, e.what()));
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (!stages[static_cast<std::size_t>(r)]->training_done())
      stuck += fmt::format("{}rank {} after {} actions (last: {})", stuck.empty() ? "" : "; ", r, out.orders[r].size(),
                           out.orders[r].empty() ? std::string{"none"} : to_string(out.orders[r].back()));
  if (!stuck.empty())
    return make_sched_error(fmt::format("simulate: the pipeline stalled with work left: {}", stuck));
  out.bubble_fraction = out.makespan > 0 ? 1.0 - out.busy / (p * out.makespan) : 0.0;
  double longest = 0;
  for (const auto& t : out.timeline)
    if (!t.empty()) // finish order: the first action to end started first, a rank running one at a time
      longest = std::max(longest, t.back().end - t.front().start);
  out.bubble_rate = out.busy > 0 ? longest / (out.busy / p) - 1.0 : 0.0;
  return out;
}

expected<sim_result> simulate(const sim_config& c, std::string_view name, policy_params base) {
  base.ranks = c.ranks;
  base.chunks = c.chunks;
  base.microbatches = c.microbatches;
  return simulate(c, [&](int r) {
    policy_params params = base;
    params.rank = r;
    return make_policy(name, params);
  });
}

} // namespace troupe::sched
