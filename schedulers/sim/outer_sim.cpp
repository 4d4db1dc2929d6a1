// Local-update exchanges under the simulated clock (outer_sim.hpp): the
// method's schedule and sync policy decide what is sent when, the emulated
// links how long it takes.
#include "schedulers/sim/outer_sim.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

namespace troupe::sched::detail {

/// One stage's outer_sync: its peer, its schedule and the values it exchanges.
struct outer_sim::peer {
  peer(sync_peer s, std::unique_ptr<sync_schedule> sch) : sync(std::move(s)), schedule(std::move(sch)) {}
  sync_peer sync;
  std::unique_ptr<sync_schedule> schedule;
  std::vector<std::vector<float>> values; ///< by fragment: the stage's (simulated) values
  std::vector<fragment_event> due;        ///< found by due(), run by run()
  std::int64_t step = 0;                  ///< the steps done at the last update
  std::map<int, double> prepared_at;      ///< fragment -> when its exchange was prepared
  int waiting = 0;                        ///< performs whose exchange is not applied yet
  double waiting_since = 0;
};

namespace {

/// The inner steps moved the values: a pseudo-gradient of the sizes that travel
/// (a top-k, a row's scale), different every exchange, in [-1e-3, 1e-3].
void drift(std::vector<float>& v, std::int64_t step) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    auto k = static_cast<int>((i * 2654435761u + static_cast<std::size_t>(step)) % 2001);
    v[i] += 1e-6f * static_cast<float>(k - 1000);
  }
}

} // namespace

outer_sim::outer_sim(const cluster_config& c, const std::vector<double>& params, hooks h)
    : c_(c), h_(std::move(h)), p_(static_cast<int>(c.stages.size())), group_(std::max(c.outer.group, 1)) {
  const auto& o = c.outer;
  const auto* method = find_sync_method(o.spec.algorithm);
  if (!method)
    throw std::invalid_argument(fmt::format("no local-update method '{}'", o.spec.algorithm));
  const auto plan = method->fragments(o.spec);
  const int groups = c.replicas / group_;
  // Each peer holds a few copies of its values (the stage's, the saved global,
  // momentum, the exchange's parts): at most max_values each, and all of them
  // together at most max_values x 4, a peer never under 16 rows.
  const std::int64_t peers = static_cast<std::int64_t>(c.replicas) * p_;
  const std::int64_t cap = std::max<std::int64_t>(std::min(o.max_values, 4 * o.max_values / peers), 16 * 1024);
  std::vector<std::vector<std::int64_t>> sizes;
  for (int s = 0; s < p_; ++s) {
    auto tensors = static_cast<std::size_t>(s) < o.tensors.size() ? o.tensors[static_cast<std::size_t>(s)]
                                                                  : std::vector<std::int64_t>{};
    const double n = params[static_cast<std::size_t>(s)];
    if (tensors.empty()) // the cost model's count in 64 tensors of about equal size
      for (int k = 0; k < 64; ++k)
        tensors.push_back(std::llround(n * (k + 1) / 64) - std::llround(n * k / 64));
    std::int64_t total = 0;
    for (auto t : tensors)
      total += t;
    double scale = total > cap ? static_cast<double>(total) / static_cast<double>(cap) : 1.0;
    scale_.push_back(scale);
    auto& sz = sizes.emplace_back();
    auto values = fragment_sizes(plan, tensors);
    for (std::size_t f = 0; f < plan.size(); ++f) {
      // Moments start empty in a run, then travel as large as the parameters.
      double n = plan[f].content == fragment_content::params ? static_cast<double>(values[f]) : total;
      sz.push_back(std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(n / scale))));
    }
  }
  for (int r = 0; r < c.replicas; ++r)
    for (int s = 0; s < p_; ++s) {
      auto name = fmt::format("r{}s{}_sync", r, s);
      auto pr = std::make_unique<peer>(sync_peer{name, r / group_, groups}, method->schedule(o.spec));
      sync_setup setup{o.spec, r / group_, groups, o.seed, {}};
      for (auto n : sizes[static_cast<std::size_t>(s)]) {
        pr->values.emplace_back(static_cast<std::size_t>(n), 0.0f);
        setup.start.push_back(pr->values.back());
      }
      pr->sync.start(*method, std::move(setup));
      peers_.push_back(std::move(pr));
    }
}

outer_sim::~outer_sim() = default;

outer_sim::peer& outer_sim::at(int replica, int position) {
  return *peers_[static_cast<std::size_t>(replica * p_ + position)];
}

bool outer_sim::due(int replica, int position, std::int64_t steps_done) {
  auto& pr = at(replica, position);
  pr.due = pr.schedule->after_inner_step();
  pr.step = steps_done;
  return std::none_of(pr.due.begin(), pr.due.end(),
                      [](const fragment_event& e) { return e.what == fragment_event::kind::perform; });
}

void outer_sim::run(int replica, int position) {
  auto& pr = at(replica, position);
  const double per_value = c_.costs.device.optimizer_per_param * scale_[static_cast<std::size_t>(position)];
  for (auto e : std::exchange(pr.due, {})) {
    auto& v = pr.values[static_cast<std::size_t>(e.fragment)];
    if (e.what == fragment_event::kind::perform) {
      if (pr.waiting++ == 0)
        pr.waiting_since = h_.now();
      pr.sync.perform(pr.step, e.fragment, v);
      continue;
    }
    drift(v, pr.step);
    pr.prepared_at[e.fragment] = h_.now();
    // The outer_sync reads and encodes the fragment before its parts leave.
    h_.compute(replica, position, per_value * static_cast<double>(v.size()),
               [this, replica, position, parts = pr.sync.prepare(pr.step, e.fragment, v)]() mutable {
                 send(replica, position, std::move(parts));
               });
  }
  try_apply(replica, position);
}

void outer_sim::send(int replica, int position, std::vector<sync_part> parts) {
  const int place = replica % group_; // peers are the replicas of this place in every group
  const double scale = scale_[static_cast<std::size_t>(position)];
  for (auto& part : parts) {
    const int to = part.to * group_ + place;
    const double bytes = static_cast<double>(part.payload.wire_bytes()) * scale;
    cluster_config::local_update::link l;
    if (c_.outer.link_of)
      l = c_.outer.link_of(position, replica, to);
    else
      l = {fmt::format("{}>{}/{}", replica, to, position), h_.network(position, replica, to)};
    const double arrives = link_pacer::arrival(links_.link(l.key), l.spec, h_.now(), bytes);
    h_.post(arrives, [this, to, position, part = std::move(part)]() mutable {
      send(to, position, at(to, position).sync.receive(std::move(part)));
      try_apply(to, position);
    });
  }
}

void outer_sim::try_apply(int replica, int position) {
  auto& pr = at(replica, position);
  const double per_value = c_.costs.device.optimizer_per_param * scale_[static_cast<std::size_t>(position)];
  for (int f : pr.sync.applicable()) {
    auto [step, values] = pr.sync.apply(f);
    exchange_s_ += h_.now() - pr.prepared_at.at(f);
    ++exchanges_timed_;
    pr.values[static_cast<std::size_t>(f)] = std::move(values);
    // The outer step over the fragment, then the stage loads it.
    h_.compute(replica, position, per_value * static_cast<double>(pr.values[static_cast<std::size_t>(f)].size()),
               [this, replica, position] {
                 auto& q = at(replica, position);
                 if (--q.waiting > 0)
                   return;
                 wait_s_ += h_.now() - q.waiting_since;
                 ++waits_;
                 h_.exchanged(replica, position);
               });
  }
}

void outer_sim::report(cluster_result& out) const {
  auto& o = out.outer;
  o.exchanges = peers_.empty() ? 0 : peers_.front()->sync.performed();
  for (int r = 0; r < c_.replicas; ++r)
    for (int s = 0; s < p_; ++s) {
      double bytes = static_cast<double>(peers_[static_cast<std::size_t>(r * p_ + s)]->sync.bytes_sent()) *
                     scale_[static_cast<std::size_t>(s)];
      o.bytes_by_actor[fmt::format("r{}s{}_sync", r, s)] = bytes;
      o.bytes += bytes;
    }
  o.exchange_s = exchanges_timed_ > 0 ? exchange_s_ / static_cast<double>(exchanges_timed_) : 0.0;
  o.wait_s = waits_ > 0 ? wait_s_ / static_cast<double>(waits_) : 0.0;
}

} // namespace troupe::sched::detail
