// The `skippipe` routing policy: planned paths checked against SkipPipe's invariants (#14).
#include "schedulers/routing/skippipe_routing.hpp"

#include <map>
#include <set>

#include <fmt/format.h>

namespace troupe::sched {

namespace {

class skippipe_routing : public routing_policy {
public:
  skippipe_routing(std::vector<route_t> paths, route_t full) : paths_(std::move(paths)), full_(std::move(full)) {}
  std::string_view name() const override { return "skippipe"; }
  route_t route(std::int64_t, int microbatch, std::int64_t) override {
    return paths_[static_cast<std::size_t>(microbatch) % paths_.size()];
  }
  /// The full model: replica 0's chain through every position, back to its head.
  route_t eval_route() override { return full_; }
  std::vector<route_t> eval_routes() override {
    if (paths_.front().size() == full_.size())
      return {full_};
    return {full_, paths_.front()};
  }

private:
  std::vector<route_t> paths_;
  route_t full_;
};

} // namespace

expected<routing_ptr> make_skippipe_routing(const routing_params& p) {
  auto chains = replica_chains(p);
  if (!chains)
    return chains.error();
  const auto& first = chains->front();
  if (first.size() < 3 || first.front().actor != first.back().actor)
    return make_sched_error(fmt::format("skippipe routing: each replica's chain must start and end on stage 0 "
                                        "(the embedding, then the head as its second chunk), got {}",
                                        route_text(p, first)));
  const int positions = static_cast<int>(first.size()) - 1; // the head chunk is stage 0 again
  std::map<std::pair<int, int>, int> where; // (actor, chunk) -> place in its chain (the head chunk: last)
  for (std::size_t rep = 0; rep < chains->size(); ++rep) {
    const auto& c = (*chains)[rep];
    if (static_cast<int>(c.size()) != positions + 1 || c.front().actor != c.back().actor)
      return make_sched_error(fmt::format("skippipe routing: replica {}'s chain {} differs from replica 0's {}", rep,
                                          route_text(p, c), route_text(p, first)));
    for (std::size_t i = 0; i < c.size(); ++i)
      where[{c[i].actor, c[i].chunk}] = static_cast<int>(i);
  }
  int length = positions;
  if (auto it = p.options.find("path_length"); it != p.options.end()) {
    try {
      length = std::stoi(it->second);
    } catch (const std::exception&) {
      return make_sched_error(fmt::format("skippipe routing: path_length '{}' is not a number", it->second));
    }
  }
  if (p.paths.empty())
    return make_sched_error("skippipe routing: no planned paths");
  std::vector<route_t> routes;
  for (std::size_t k = 0; k < p.paths.size(); ++k) {
    auto r = parse_route(p, p.paths[k]);
    if (!r)
      return r.error();
    auto fail = [&](const std::string& why) {
      return make_sched_error(fmt::format("skippipe routing: path {} {}: {}", k, route_text(p, *r), why));
    };
    if (static_cast<int>(r->size()) != length + 1)
      return fail(fmt::format("visits {} stages, path_length is {}", static_cast<int>(r->size()) - 1, length));
    auto start = where.find({r->front().actor, r->front().chunk});
    auto end = where.find({r->back().actor, r->back().chunk});
    if (start == where.end() || start->second != 0)
      return fail("must start at stage 0 (the embedding)");
    if (end == where.end() || r->back().actor != r->front().actor || end->second != positions)
      return fail("must end at the head of the stage 0 it started on");
    std::set<int> seen{0};
    for (std::size_t h = 1; h + 1 < r->size(); ++h) {
      auto at = where.find({(*r)[h].actor, (*r)[h].chunk});
      if (at == where.end() || at->second == positions)
        return fail(fmt::format("hop {} is no stage position", h));
      if (!seen.insert(at->second).second)
        return fail(fmt::format("visits stage {} twice", at->second));
    }
    routes.push_back(std::move(*r));
  }
  return routing_ptr{new skippipe_routing(std::move(routes), first)};
}

} // namespace troupe::sched
