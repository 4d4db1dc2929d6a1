// The discrete-event pipeline simulation: ranks run one action at a time,
// messages take `latency`, and every idle rank asks its policy what to run.
#include "schedulers/harness.hpp"

#include <algorithm>
#include <queue>

#include <fmt/format.h>

#include "schedulers/stage_queue.hpp"

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

enum class event_kind { arrive_forward, arrive_backward, complete, wake };

struct event {
  double time;
  std::uint64_t seq;  // ties keep the order events were made in
  event_kind kind;
  int rank;
  action what;
  bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

} // namespace

double operation_cost(const sim_config& c, int rank, const action& a) {
  double base = 0;
  switch (a.kind) {
    case op_kind::forward: base = c.forward_cost; break;
    case op_kind::backward: base = c.backward_cost; break;
    case op_kind::input_grad: base = c.backward_cost - c.weight_cost; break;
    case op_kind::weight_grad: base = c.weight_cost; break;
  }
  base /= std::max(c.chunks, 1);
  double cost = base * factor(c.rank_slowdown, rank) * factor(c.microbatch_slowdown, a.microbatch);
  if (c.jitter > 0) {
    std::uint64_t key = c.seed * 0x100000001b3ULL;
    key = splitmix64(key ^ static_cast<std::uint64_t>(a.stage));
    key = splitmix64(key ^ static_cast<std::uint64_t>(static_cast<unsigned char>(a.kind)));
    key = splitmix64(key ^ static_cast<std::uint64_t>(a.microbatch));
    double u = static_cast<double>(key >> 11) * 0x1.0p-53;  // [0, 1)
    cost *= 1.0 + c.jitter * (2.0 * u - 1.0);
  }
  return cost;
}

double theoretical_bubble(int p, int m, int v) {
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
}

expected<sim_result> simulate(const sim_config& c, const policy_maker& make) {
  const int p = c.ranks, m = c.microbatches, v = c.chunks;
  if (p < 1 || m < 1 || v < 1)
    return make_sched_error(fmt::format("simulate: ranks ({}), microbatches ({}) and chunks ({}) must be at least 1",
                                        p, m, v));
  if (c.forward_cost <= 0 || c.backward_cost <= 0 || c.weight_cost < 0 || c.latency < 0 || c.jitter < 0 ||
      c.jitter >= 1)
    return make_sched_error(fmt::format("simulate: costs must be positive (F={} B={} W={}), latency non-negative "
                                        "({}) and jitter in [0, 1) ({})",
                                        c.forward_cost, c.backward_cost, c.weight_cost, c.latency, c.jitter));
  std::vector<policy_ptr> policies;
  std::vector<stage_queue> queues;
  bool any_split = false;
  for (int r = 0; r < p; ++r) {
    auto pol = make(r);
    if (!pol)
      return pol.error();
    any_split |= (*pol)->splits_backward();
    policies.push_back(std::move(*pol));
    queues.emplace_back(r, p, m, v);
  }
  if (any_split && c.weight_cost >= c.backward_cost)
    return make_sched_error(fmt::format("simulate: a split backward needs W < B so that I = B - W is positive "
                                        "(B={}, W={})", c.backward_cost, c.weight_cost));

  sim_result out;
  out.orders.resize(p);
  out.timeline.resize(p);
  out.peak_in_flight.assign(p, 0);
  out.peak_deferred_weight.assign(p, 0);
  for (auto& pol : policies)
    out.in_flight_limit.push_back(pol->in_flight_limit());

  std::priority_queue<event, std::vector<event>, std::greater<>> events;
  std::uint64_t seq = 0;
  auto post = [&](double t, event_kind k, int rank, action a) { events.push({t, seq++, k, rank, a}); };
  auto send = [&](double t, int from, event_kind k, action a) {
    int to = a.stage % p;
    post(to == from ? t : t + c.latency, k, to, a);
  };
  for (int mb = 0; mb < m; ++mb)  // the data loader has every microbatch ready
    post(0, event_kind::arrive_forward, 0, fwd(0, mb));

  const int last = p * v - 1;
  std::vector<double> started(p, 0);
  std::vector<double> wake(p, -1);  // the wake-up each rank has pending
  while (!events.empty()) {
    double now = events.top().time;
    while (!events.empty() && events.top().time == now) {
      event e = events.top();
      events.pop();
      auto& q = queues[e.rank];
      q.set_now(now);
      expected<void> ok;
      if (e.kind == event_kind::wake) {
        // only a reason to ask the policies again
      } else if (e.kind == event_kind::arrive_forward) {
        ok = q.push_forward(e.what.stage, e.what.microbatch);
      } else if (e.kind == event_kind::arrive_backward) {
        ok = q.push_backward(e.what.stage, e.what.microbatch);
      } else {
        ok = q.finish(e.what);
        out.timeline[e.rank].push_back({e.what, started[e.rank], now});
        out.busy += now - started[e.rank];
        out.makespan = std::max(out.makespan, now);
        const action& a = e.what;
        if (a.kind == op_kind::forward && a.stage < last)
          send(now, e.rank, event_kind::arrive_forward, fwd(a.stage + 1, a.microbatch));
        if (is_backward_input(a.kind) && a.stage > 0)
          send(now, e.rank, event_kind::arrive_backward, bwd(a.stage - 1, a.microbatch));
      }
      if (!ok)
        return make_sched_error(fmt::format("simulate at t={}: {}", now, ok.error().message));
    }
    for (int r = 0; r < p; ++r) {
      auto& q = queues[r];
      if (q.running())
        continue;
      q.set_now(now);
      auto choice = policies[r]->next(q);
      if (!choice) {
        if (auto t = policies[r]->wake_at(q); t && *t > now && *t != wake[r]) {
          wake[r] = *t;
          post(*t, event_kind::wake, r, action{});
        }
        continue;
      }
      if (auto ok = q.start(*choice); !ok)
        return make_sched_error(fmt::format("simulate at t={}: policy {} chose badly: {}", now,
                                            policies[r]->name(), ok.error().message));
      int limit = out.in_flight_limit[r];
      if (limit > 0 && q.in_flight() > limit)
        return make_sched_error(fmt::format("simulate at t={}: policy {} on rank {} holds {} activations, over "
                                            "its bound {}", now, policies[r]->name(), r, q.in_flight(), limit));
      out.peak_in_flight[r] = std::max(out.peak_in_flight[r], q.in_flight());
      out.peak_deferred_weight[r] = std::max(out.peak_deferred_weight[r], q.deferred_weight_count());
      out.orders[r].push_back(*choice);
      started[r] = now;
      post(now + operation_cost(c, r, *choice), event_kind::complete, r, *choice);
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (!queues[r].step_complete())
      stuck += fmt::format("{}rank {} after {} actions (last: {})", stuck.empty() ? "" : "; ", r,
                           out.orders[r].size(),
                           out.orders[r].empty() ? std::string{"none"} : to_string(out.orders[r].back()));
  if (!stuck.empty())
    return make_sched_error(fmt::format("simulate: the pipeline stalled with work left: {}", stuck));
  out.bubble_fraction = out.makespan > 0 ? 1.0 - out.busy / (p * out.makespan) : 0.0;
  return out;
}

expected<sim_result> simulate(const sim_config& c, std::string_view name, policy_params base) {
  base.ranks = c.ranks;
  base.chunks = c.chunks;
  return simulate(c, [&](int r) {
    policy_params params = base;
    params.rank = r;
    return make_policy(name, params);
  });
}

} // namespace troupe::sched
