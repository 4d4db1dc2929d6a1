// NoLoCo (#13): its groups, random routes and outer step, its sync policy,
// settings and toy run, and its registration.
#include "schedulers/sync/noloco.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/exchange_policies.hpp"

namespace troupe::sched {

namespace {

/// splitmix64: a generator whose output is the same on every platform (std::
/// distributions are not), so replicas on different machines agree.
struct splitmix {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n) by rejection (no modulo bias).
  std::uint64_t below(std::uint64_t n) {
    std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    for (;;)
      if (auto v = next(); v < limit)
        return v % n;
  }
};

/// A Fisher–Yates permutation of 0 .. n-1 from `key`.
std::vector<int> permutation(int n, std::uint64_t key) {
  std::vector<int> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  splitmix g{key};
  for (int i = n - 1; i > 0; --i)
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(g.below(static_cast<std::uint64_t>(i) + 1))]);
  return p;
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return splitmix{a ^ (b * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL)}.next();
}

} // namespace

std::vector<std::vector<int>> noloco_groups(int replicas, int group, std::int64_t step, std::uint64_t seed) {
  if (replicas < 1 || group < 1 || replicas % group != 0)
    throw std::invalid_argument(
      fmt::format("noloco_groups: groups of {} do not partition {} replicas", group, replicas));
  int n_groups = replicas / group;
  auto p = permutation(replicas, mix(seed, static_cast<std::uint64_t>(step)));
  std::vector<std::vector<int>> out(static_cast<std::size_t>(n_groups));
  for (int i = 0; i < replicas; ++i)
    out[static_cast<std::size_t>(i % n_groups)].push_back(p[static_cast<std::size_t>(i)]);
  for (auto& g : out)
    std::sort(g.begin(), g.end());
  return out;
}

std::vector<int> noloco_route(int replicas, int boundary, std::int64_t sequence, std::uint64_t seed) {
  if (replicas < 1 || boundary < 0)
    throw std::invalid_argument(fmt::format("noloco_route: {} replicas, boundary {}", replicas, boundary));
  return permutation(replicas,
                     mix(mix(seed, static_cast<std::uint64_t>(sequence)) + 1, static_cast<std::uint64_t>(boundary)));
}

namespace {

class noloco_routing : public routing_policy {
public:
  noloco_routing(std::vector<route_t> chains, std::uint64_t seed) : chains_(std::move(chains)), seed_(seed) {}
  std::string_view name() const override { return "noloco"; }
  /// Replica 0's own chain: the stage that reports validation losses is its last.
  route_t eval_route() override { return chains_.front(); }
  route_t route(std::int64_t, int microbatch, std::int64_t sequence) override {
    auto replicas = static_cast<int>(chains_.size());
    int at = microbatch % replicas; // the replica whose data it is: it starts there
    std::int64_t key = sequence / replicas;
    const auto& own = chains_.front();
    route_t r;
    std::vector<int> replica_of; // by hop: the replica that runs it
    for (std::size_t b = 0; b < own.size(); ++b) {
      // A later chunk of a position already on the route returns to the replica
      // that ran the earlier one, as least_loaded's do (stage_core::retrace):
      // the interleaved rule reserves a rank's slots for the later chunks of
      // the microbatches whose first chunk it ran (rule_policies.cpp, next_routed).
      auto earlier = std::find_if(own.begin(), own.begin() + static_cast<std::ptrdiff_t>(b),
                                  [&](const hop& h) { return h.actor == own[b].actor; });
      if (earlier != own.begin() + static_cast<std::ptrdiff_t>(b))
        at = replica_of[static_cast<std::size_t>(earlier - own.begin())];
      else if (b > 0)
        at = noloco_route(replicas, static_cast<int>(b - 1), key, seed_)[static_cast<std::size_t>(at)];
      replica_of.push_back(at);
      r.push_back(chains_[static_cast<std::size_t>(at)][b]);
    }
    return r;
  }

private:
  std::vector<route_t> chains_;
  std::uint64_t seed_;
};

} // namespace

expected<routing_ptr> make_noloco_routing(const routing_params& p) {
  auto made = replica_chains(p);
  if (!made)
    return made.error();
  auto& chains = *made;
  for (std::size_t rep = 0; rep < chains.size(); ++rep) {
    const auto& r = chains[rep];
    if (r.size() != chains.front().size())
      return make_sched_error(
        fmt::format("noloco routing: replica {} has {} hops, replica 0 {}", rep, r.size(), chains.front().size()));
    for (std::size_t b = 0; b < r.size(); ++b)
      for (std::size_t j = 0; j < b; ++j) // each replica's positions in the same order, chunk by chunk
        if ((r[j].actor == r[b].actor) != (chains.front()[j].actor == chains.front()[b].actor))
          return make_sched_error(fmt::format("noloco routing: replica {}'s chunks sit at other positions than "
                                              "replica 0's",
                                              rep));
  }
  std::uint64_t seed = 1;
  if (auto it = p.options.find("seed"); it != p.options.end()) {
    try {
      seed = std::stoull(it->second);
    } catch (const std::exception&) {
      return make_sched_error(fmt::format("noloco routing: seed '{}' is not a number", it->second));
    }
  }
  return routing_ptr{new noloco_routing(std::move(chains), seed)};
}

void noloco_outer_step(const std::vector<std::span<const float>>& fast, const std::vector<std::span<const float>>& slow,
                       std::span<float> momentum, std::span<float> slow_i, std::span<float> fast_i, double lr,
                       double mu) {
  if (fast.empty() || fast.size() != slow.size())
    throw std::invalid_argument("noloco_outer_step: a group needs fast and slow values of each member");
  auto n = momentum.size();
  for (std::size_t k = 0; k < fast.size(); ++k)
    if (fast[k].size() != n || slow[k].size() != n)
      throw std::invalid_argument("noloco_outer_step: members' values differ in size");
  if (slow_i.size() != n || fast_i.size() != n)
    throw std::invalid_argument("noloco_outer_step: this replica's values differ in size");
  auto members = static_cast<double>(fast.size());
  for (std::size_t j = 0; j < n; ++j) {
    double delta = 0, slow_mean = 0; // mean_g(θ − φ), mean_g(φ)
    for (std::size_t k = 0; k < fast.size(); ++k)
      delta += static_cast<double>(fast[k][j]) - slow[k][j], slow_mean += slow[k][j];
    delta /= members, slow_mean /= members;
    double m = mu * momentum[j] + lr * delta + lr * (slow_mean - slow_i[j]);
    momentum[j] = static_cast<float>(m);
    slow_i[j] = static_cast<float>(slow_i[j] + m);
    fast_i[j] = slow_i[j];
  }
}

namespace {

/// NoLoCo (Kolehmainen et al. 2025, arXiv 2506.10911; jkolehm/noloco): no
/// collective. Every H steps the replicas split into groups from a permutation
/// seeded by the step; each member sends its fast (local) and slow weights to
/// the other members of its group only, and takes noloco_outer_step.
class noloco_policy : public gathering_policy {
public:
  explicit noloco_policy(const sync_setup& s)
      : gathering_policy(s, "noloco"), format_(format_of(s.spec)), group_(option_int(s.spec, "group")),
        slow_(s.start.at(0)), momentum_(slow_.size(), 0.0f) {}
  std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) override {
    if (f != 0 || local.size() != slow_.size())
      throw std::invalid_argument(fmt::format("noloco: fragment {} of {} values prepared", f, local.size()));
    // The groups of all replicas, lost ones included: every member derives the
    // same ones whether or not it has heard of a loss yet; then the lost leave.
    std::vector<int> mine;
    for (auto& group : noloco_groups(setup_.replicas, group_, step, setup_.seed))
      if (std::find(group.begin(), group.end(), setup_.replica) != group.end())
        mine = group;
    std::vector<float> both(local.begin(), local.end());
    both.insert(both.end(), slow_.begin(), slow_.end());
    return gather(std::move(mine), step, quantize_rows(both, sync_row_values, format_));
  }

private:
  void apply(std::vector<quantized_rows>& parts, std::span<float> local) override {
    auto n = slow_.size();
    std::vector<std::vector<float>> decoded;
    for (const auto& p : parts) {
      decoded.emplace_back(2 * n, 0.0f);
      accumulate(p, decoded.back());
    }
    std::vector<std::span<const float>> fast, slow;
    for (const auto& d : decoded)
      fast.emplace_back(d.data(), n), slow.emplace_back(d.data() + n, n);
    noloco_outer_step(fast, slow, momentum_, slow_, local, setup_.spec.outer.lr, setup_.spec.outer.momentum);
  }
  void save_own(sync_state& s) const override {
    s.values["slow"] = slow_;
    s.values["momentum"] = momentum_;
  }
  void restore_own(const sync_state& s) override {
    const auto& slow = s.take("slow", slow_.size());
    momentum_ = s.take("momentum", momentum_.size());
    slow_ = slow;
  }

  wire_format format_;
  int group_;
  std::vector<float> slow_, momentum_;
};

method_settings settings() {
  // NoLoCo (Kolehmainen et al. 2025, arXiv 2506.10911, and jkolehm/noloco's
  // outer_lr/outer_momentum): H = 50, lr 0.7, momentum 0.5; its step is its own.
  auto options = local_sgd_options(50, {0.7, 0.5, false});
  options.push_back(
    int_setting_spec("group", "replicas averaged together at each exchange (paper: 2)", 2, 1, max_count));
  options.push_back(choice_setting_spec(
    "route", "random: each microbatch goes on to a random replica of the next stage; chain: it stays",
    {"random", "chain"}));
  auto configure = [](local_update_spec& l) { l.routes_across_replicas = option_text(l, "route") == "random"; };
  auto problems = [](const local_update_spec& l, const local_update_context& c) {
    auto out = outer_problems(l);
    int group = option_int(l, "group");
    if (group < 2 || group > c.replicas || c.replicas % group != 0)
      out.push_back({"group", fmt::format("groups of {} must partition the {} replica{} (data_parallel.replicas), "
                                          "at least 2 to a group",
                                          group, c.replicas, c.replicas == 1 ? "" : "s")});
    if (l.replica_groups > 0 && l.replica_groups < c.replicas)
      out.push_back({"replica_groups", "NoLoCo's groups and random routes are its own (local_update.group): leave "
                                       "replica_groups out"});
    return out;
  };
  return {std::move(options), configure, problems};
}

/// NoLoCo on the toy model: fast and slow weights per replica, and every H steps
/// an outer step within each group of the step's partition (schedulers/sync/noloco.hpp).
sync_sim_result run_noloco_toy(const sync_sim_config& c) {
  if (c.replicas < 1 || c.values < 1 || c.steps < 0 || c.spec.sync_every < 1)
    throw std::invalid_argument("run_sync_sim: replicas, values and sync_every must be at least 1");
  auto n = static_cast<std::size_t>(c.values);
  auto r_count = static_cast<std::size_t>(c.replicas);
  std::vector<std::vector<float>> fast(r_count, std::vector<float>(n, c.start)),
    slow = fast, momentum(r_count, std::vector<float>(n, 0.0f));
  auto out = toy_result(r_count);
  auto record_slow = [&](int step) {
    for (std::size_t r = 0; r < r_count; ++r)
      out.global[r][step] = {slow[r].front()};
  };
  record_slow(0);
  for (int step = 0; step < c.steps; ++step) {
    for (std::size_t r = 0; r < r_count; ++r)
      out.history[r].push_back({fast[r].front()});
    for (std::size_t r = 0; r < r_count; ++r)
      for (auto& v : fast[r])
        v -= c.inner_lr * c.grad_for(static_cast<int>(r));
    if ((step + 1) % c.spec.sync_every != 0)
      continue;
    auto groups = noloco_groups(c.replicas, option_int(c.spec, "group"), step + 1, c.seed);
    auto fast_before = fast, slow_before = slow; // every member reads the values as they were sent
    for (const auto& g : groups) {
      std::vector<std::span<const float>> f, s;
      for (int m : g)
        f.emplace_back(fast_before[static_cast<std::size_t>(m)]),
          s.emplace_back(slow_before[static_cast<std::size_t>(m)]);
      for (int m : g) {
        auto i = static_cast<std::size_t>(m);
        noloco_outer_step(f, s, momentum[i], slow[i], fast[i], c.spec.outer.lr, c.spec.outer.momentum);
        // It sent its fast and slow weights to each other member of its group, and no one else.
        out.bytes_sent[i] +=
          static_cast<std::int64_t>(2 * n * sizeof(float)) * (static_cast<std::int64_t>(g.size()) - 1);
      }
    }
    out.groups[step + 1] = std::move(groups);
    ++out.exchanges;
    if (step + 1 < c.steps)
      record_slow(step + 1);
  }
  return out;
}

} // namespace

void register_noloco(const sync_registrar& add) {
  add("noloco", {"NoLoCo: groups from a seeded permutation, no collective",
                 [](const local_update_spec&) { return param_fragments(1); },
                 [](const local_update_spec& s) { return periodic_schedule({s.sync_every}); },
                 [](const sync_setup& s) { return std::make_unique<noloco_policy>(s); }, settings(),
                 make_noloco_routing, run_noloco_toy, /*rejoins=*/true});
}

} // namespace troupe::sched
