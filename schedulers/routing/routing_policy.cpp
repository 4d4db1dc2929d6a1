// The routing-policy registry and the built-in policies: `chain` and `paths`.
#include "schedulers/routing/routing_policy.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/actor/named_registry.hpp"

namespace troupe::sched {

namespace {

std::string hop_name(const routing_params& p, const hop& h) {
  for (const auto& s : p.stages)
    if (s.actor == h.actor)
      return s.chunks.size() > 1 ? fmt::format("{}.{}", s.name, h.chunk) : s.name;
  return fmt::format("actor {}", h.actor);
}

std::string route_names(const routing_params& p, const route_t& r) {
  std::string out;
  for (const auto& h : r)
    out += (out.empty() ? "" : " -> ") + hop_name(p, h);
  return "[" + out + "]";
}

const std::pair<int, int>* layers_of(const routing_params& p, const hop& h) {
  for (const auto& s : p.stages)
    if (s.actor == h.actor && h.chunk >= 0 && h.chunk < static_cast<int>(s.chunks.size()))
      return &s.chunks[static_cast<std::size_t>(h.chunk)];
  return nullptr;
}

/// Every microbatch follows the layers in order, through its replica's own stages.
class chain_routing : public routing_policy {
public:
  explicit chain_routing(std::vector<route_t> per_replica) : routes_(std::move(per_replica)) {}
  std::string_view name() const override { return "chain"; }
  route_t route(std::int64_t, int microbatch, std::int64_t) override {
    return routes_[static_cast<std::size_t>(microbatch) % routes_.size()];
  }

private:
  std::vector<route_t> routes_;
};

/// Microbatch k of the run follows path k mod n: paths may skip and reorder stages.
class paths_routing : public routing_policy {
public:
  explicit paths_routing(std::vector<route_t> paths) : paths_(std::move(paths)) {}
  std::string_view name() const override { return "paths"; }
  route_t route(std::int64_t, int, std::int64_t sequence) override {
    return paths_[static_cast<std::size_t>(sequence % static_cast<std::int64_t>(paths_.size()))];
  }

private:
  std::vector<route_t> paths_;
};

expected<routing_ptr> make_chain(const routing_params& p) {
  auto routes = replica_chains(p);
  if (!routes)
    return routes.error();
  return routing_ptr{new chain_routing(std::move(*routes))};
}

expected<hop> parse_hop(const routing_params& p, const std::string& text) {
  auto dot = text.rfind('.');
  for (const auto& s : p.stages) {
    if (s.name == text)
      return s.chunks.size() == 1 ? expected<hop>{hop{s.actor, 0}}
                                  : make_sched_error(fmt::format("paths: '{}' holds {} chunks; name one as {}.C", text,
                                                                 s.chunks.size(), text));
    if (dot != std::string::npos && s.name == text.substr(0, dot)) {
      int c = -1;
      try {
        c = std::stoi(text.substr(dot + 1));
      } catch (const std::exception&) {
      }
      if (c < 0 || c >= static_cast<int>(s.chunks.size()))
        return make_sched_error(fmt::format("paths: '{}' names chunk {} of '{}', which holds chunks 0..{}", text,
                                            text.substr(dot + 1), s.name, s.chunks.size() - 1));
      return hop{s.actor, c};
    }
  }
  std::string known;
  for (const auto& s : p.stages)
    known += (known.empty() ? "" : ", ") + s.name;
  return make_sched_error(fmt::format("paths: no pipeline stage '{}' (known: {})", text, known));
}

expected<routing_ptr> make_paths(const routing_params& p) {
  if (p.paths.empty())
    return make_sched_error("paths: no paths given (routing: {policy: paths, paths: [[s0, s2, s3], ...]})");
  std::vector<route_t> routes;
  for (const auto& names : p.paths) {
    auto r = parse_route(p, names);
    if (!r)
      return r.error();
    if (auto ok = check_route(*r, p); !ok)
      return ok.error();
    routes.push_back(std::move(*r));
  }
  return routing_ptr{new paths_routing(std::move(routes))};
}

/// The routing policies, built-ins first (an explicit list, not static self-registration).
named_registry<routing_factory>& the_registry() {
  static named_registry<routing_factory> r;
  static const bool builtins = [] {
    r.add("chain", make_chain, "every microbatch visits the layers in order (plain and interleaved pipelines)");
    r.add("paths", make_paths, "microbatch k follows path k mod n; paths may skip and reorder stages (SkipPipe)");
    return true;
  }();
  (void)builtins;
  return r;
}

} // namespace

expected<std::vector<route_t>> replica_chains(const routing_params& params) {
  std::vector<route_t> routes;
  for (int rep = 0; rep < std::max(params.replicas, 1); ++rep) {
    auto r = layer_order_route(params, rep);
    if (!r)
      return r.error();
    routes.push_back(std::move(*r));
  }
  return routes;
}

expected<route_t> layer_order_route(const routing_params& p, int replica) {
  std::vector<std::pair<std::pair<int, int>, hop>> all;
  for (const auto& s : p.stages)
    if (s.replica == replica)
      for (std::size_t c = 0; c < s.chunks.size(); ++c)
        all.push_back({s.chunks[c], hop{s.actor, static_cast<std::int32_t>(c)}});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  route_t r;
  int next = 0;
  for (const auto& [layers, h] : all) {
    if (layers.first != next)
      return make_sched_error(
        fmt::format("chain: layers [{}, {}) are held by no stage, or by two", next, layers.first));
    next = layers.second;
    r.push_back(h);
  }
  if (r.empty() || next != p.layers)
    return make_sched_error(fmt::format("chain: the stages hold layers up to {}, the model has {}", next, p.layers));
  return r;
}

expected<void> check_route(const route_t& r, const routing_params& p) {
  if (r.empty())
    return make_sched_error("route: empty");
  std::set<std::pair<int, int>> seen;
  for (const auto& h : r) {
    if (!layers_of(p, h))
      return make_sched_error(
        fmt::format("route {}: actor {} chunk {} is no pipeline stage chunk", route_names(p, r), h.actor, h.chunk));
    if (!seen.insert({h.actor, h.chunk}).second)
      return make_sched_error(fmt::format("route {}: visits {} twice", route_names(p, r), hop_name(p, h)));
  }
  if (layers_of(p, r.front())->first != 0)
    return make_sched_error(fmt::format("route {}: must start at the stage holding layer 0 (the embedding), not {}",
                                        route_names(p, r), hop_name(p, r.front())));
  if (layers_of(p, r.back())->second != p.layers)
    return make_sched_error(fmt::format("route {}: must end at the stage holding layer {} (the head and loss), not {}",
                                        route_names(p, r), p.layers - 1, hop_name(p, r.back())));
  return {};
}

expected<route_t> parse_route(const routing_params& params, const std::vector<std::string>& names) {
  route_t r;
  for (const auto& n : names) {
    auto h = parse_hop(params, n);
    if (!h)
      return h.error();
    r.push_back(*h);
  }
  return r;
}

std::string route_text(const routing_params& params, const route_t& r) {
  return route_names(params, r);
}

expected<routing_ptr> make_routing(std::string_view name, const routing_params& params) {
  if (auto e = the_registry().find(name))
    return e->factory(params);
  return make_sched_error(
    fmt::format("unknown routing policy '{}' (known: {})", name, fmt::join(routing_names(), ", ")));
}

namespace {

struct option_table {
  std::mutex mu;
  std::map<std::string, std::vector<option_spec>, std::less<>> by_name;
};

option_table& options_of() {
  static option_table t;
  return t;
}

} // namespace

void register_routing(std::string name, std::string summary, routing_factory factory,
                      std::vector<option_spec> options) {
  {
    auto& t = options_of();
    std::lock_guard lock(t.mu);
    t.by_name[name] = std::move(options);
  }
  the_registry().set(std::move(name), std::move(factory), std::move(summary));
}

std::vector<option_spec> routing_options(std::string_view name) {
  auto& t = options_of();
  std::lock_guard lock(t.mu);
  auto it = t.by_name.find(name);
  return it == t.by_name.end() ? std::vector<option_spec>{} : it->second;
}

std::vector<std::string> routing_names() {
  return the_registry().names();
}

} // namespace troupe::sched
