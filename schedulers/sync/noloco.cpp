// NoLoCo's groups, routes and outer step (#13).
#include "schedulers/sync/noloco.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

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
    route_t r;
    for (std::size_t b = 0; b < chains_.front().size(); ++b) {
      if (b > 0)
        at = noloco_route(replicas, static_cast<int>(b - 1), key, seed_)[static_cast<std::size_t>(at)];
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
    for (const auto& h : r)
      for (const auto& s : p.stages)
        if (s.actor == h.actor && s.chunks.size() != 1)
          return make_sched_error(fmt::format("noloco routing: stage '{}' holds {} model chunks; random routes "
                                              "take stages of one chunk each",
                                              s.name, s.chunks.size()));
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

} // namespace troupe::sched
