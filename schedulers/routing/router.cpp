// The router core: routes a step at a time, plans per stage, credit-gated emission.
#include "schedulers/routing/router.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

router_core::router_core(router_config cfg, routing_ptr policy)
    : cfg_(std::move(cfg)), policy_(std::move(policy)), step_(cfg_.first_step) {
  eval_routes_ = policy_->eval_routes();
  if (!done())
    plan_step();
}

int router_core::credits(int actor) const {
  auto i = credits_.find(actor);
  return i == credits_.end() ? 0 : i->second;
}

void router_core::drop_replica(int r) {
  int replicas = std::max(cfg_.replicas, 1);
  if ((!cfg_.independent_replicas && !cfg_.replica_norms) || r < 0 || r >= replicas)
    throw std::invalid_argument(
      "router: only independent replicas (local-update training) and elastic DDP's can leave the run");
  lost_.resize(static_cast<std::size_t>(replicas), false);
  lost_[static_cast<std::size_t>(r)] = true;
  back_at_.erase(r);
  // Its stages' credits went with them: a rejoining replica's new stages grant afresh.
  for (std::size_t k = 0; k < routes_.size(); ++k)
    if (owner_[k] == r)
      for (const auto& h : routes_[k])
        credits_.erase(h.actor);
  if (!planned_ && !done()) // nothing of this step is out yet: deal it again without r
    deal_step();
  for (int s = 0; s < replicas; ++s)
    if (!lost_[static_cast<std::size_t>(s)]) {
      if (r == 0)
        eval_routes_ = {policy_->route(0, s, s)}; // the chain of the first replica still here
      return;
    }
  throw std::invalid_argument("router: every replica has left the run");
}

void router_core::add_replica(int r, std::int64_t step) {
  int replicas = std::max(cfg_.replicas, 1);
  if (r < 0 || r >= replicas || lost_.empty() || !lost_[static_cast<std::size_t>(r)])
    throw std::invalid_argument(fmt::format("router: replica {} rejoins, but it has not left the run", r));
  if (step <= step_ || step >= cfg_.steps)
    throw std::invalid_argument(fmt::format("router: replica {} cannot rejoin at step {}: step {} is being dealt and "
                                            "the run ends after step {}",
                                            r, step, step_, cfg_.steps - 1));
  back_at_[r] = step;
}

void router_core::advance() {
  if (++microbatch_ == per_step()) {
    microbatch_ = 0;
    if (++step_ < cfg_.steps)
      plan_step();
  }
}

void router_core::skip_lost() {
  while (!done() && lost(owner_[static_cast<std::size_t>(microbatch_)]))
    advance();
}

void router_core::plan_step() {
  planned_ = false;
  for (auto it = back_at_.begin(); it != back_at_.end();) // replicas back from this step on
    if (it->second == step_) {
      lost_[static_cast<std::size_t>(it->first)] = false;
      if (it->first == 0)
        eval_routes_ = policy_->eval_routes(); // evaluation goes back to replica 0's chain
      it = back_at_.erase(it);
    } else {
      ++it;
    }
  deal_step();
}

void router_core::deal_step() {
  const int replicas = std::max(cfg_.replicas, 1), n = per_step();
  const auto first = step_ * n;
  std::vector<int> left, taken(static_cast<std::size_t>(replicas), 0);
  for (int r = 0; r < replicas; ++r)
    if (!lost(r))
      left.push_back(r);
  bool redeal = cfg_.redeal && (cfg_.independent_replicas || cfg_.replica_norms) && !left.empty();
  routes_.clear(), owner_.assign(static_cast<std::size_t>(n), 0), index_.assign(static_cast<std::size_t>(n), 0);
  int moved = 0;
  for (int k = 0; k < n; ++k) {
    int r = k % replicas;
    if (redeal && lost(r)) // a replica left takes it, in turn
      r = left[static_cast<std::size_t>(moved++) % left.size()];
    // Indices in the order the replica is dealt them (k div R with every replica in).
    int index = taken[static_cast<std::size_t>(r)]++;
    owner_[static_cast<std::size_t>(k)] = r, index_[static_cast<std::size_t>(k)] = index;
    // The policy's route of replica r's microbatch `index` (microbatch k itself when r owns it).
    routes_.push_back(policy_->route(step_, r + replicas * index, first + k));
  }
}

std::optional<emission> router_core::next() {
  skip_lost();
  if (done())
    return std::nullopt;
  const auto& r = routes_[static_cast<std::size_t>(microbatch_)];
  int head = r.front().actor, tail = cfg_.targets_with_tokens ? head : r.back().actor;
  if (credits(head) < 1 || (tail != head && credits(tail) < 1))
    return std::nullopt;
  // Routed across replicas (least_loaded, NoLoCo), microbatches are numbered in the
  // whole step: a stage may take the same index of two replicas.
  bool whole_step = cfg_.targets_with_tokens || cfg_.stage_local_norm || cfg_.across_replicas;
  int mb = whole_step ? microbatch_ : index_[static_cast<std::size_t>(microbatch_)];
  emission e{step_, mb, step_ * per_step() + microbatch_, r, {}};
  --credits_[head];
  if (tail != head)
    --credits_[tail];
  bool first = !planned_; // the step's first microbatch made: its plans go with it
  planned_ = true;
  if (first && (cfg_.independent_replicas || cfg_.replica_norms))
    plan_replicas(e);
  else if (first) {
    std::map<int, int> hops;
    for (int a : cfg_.stage_actors)
      hops[a] = 0;
    for (const auto& route : routes_)
      for (const auto& h : route)
        ++hops[h.actor];
    for (int a : cfg_.hops_from_messages)
      hops[a] = -1;
    for (auto [actor, n] : hops) {
      auto pair = cfg_.norm_pairs.find(actor);
      e.plans.push_back(
        {actor, !cfg_.stage_local_norm
                  ? step_plan_msg{step_, n, cfg_.tokens_per_microbatch * per_step(),
                                  static_cast<std::int32_t>(hops.size()), routes_.front().front().actor}
                : pair == cfg_.norm_pairs.end()
                  ? step_plan_msg{step_, n, cfg_.tokens_per_microbatch * cfg_.microbatches, 1, actor}
                  : step_plan_msg{step_, n, cfg_.tokens_per_microbatch * cfg_.microbatches, 2, pair->second}});
    }
  }
  ++emitted_;
  advance();
  skip_lost();
  e.step_end = done() || step_ != e.step;
  return e;
}

void router_core::plan_replicas(emission& e) const {
  int replicas = std::max(cfg_.replicas, 1), group = cfg_.replica_norms ? 1 : std::max(cfg_.group_size, 1);
  int step_made = 0; // elastic DDP: the whole step's microbatches, of the replicas in it
  for (std::size_t k = 0; k < routes_.size(); ++k)
    step_made += !lost(owner_[k]);
  for (int first = 0; first < replicas; first += group) {
    std::map<int, int> hops;
    int head = -1, made = 0;
    for (std::size_t k = 0; k < routes_.size(); ++k) {
      int rep = owner_[k];
      if (rep < first || rep >= first + group || lost(rep))
        continue; // another group's, or it left the run
      head = head < 0 ? routes_[k].front().actor : head;
      ++made;
      for (const auto& h : routes_[k])
        ++hops[h.actor];
    }
    // The group's tokens: more than its own share when it takes a lost replica's.
    // DDP's gradients are summed over every replica: the whole step's. Routed on
    // the way (least_loaded), a later position learns its hops from its senders.
    for (auto [actor, n] : hops) {
      bool told = std::find(cfg_.hops_from_messages.begin(), cfg_.hops_from_messages.end(), actor) !=
                  cfg_.hops_from_messages.end();
      e.plans.push_back({actor, step_plan_msg{step_, told ? -1 : n,
                                              cfg_.tokens_per_microbatch * (cfg_.replica_norms ? step_made : made),
                                              static_cast<std::int32_t>(hops.size()), head}});
    }
  }
}

std::map<int, int> chain_input_credits(const route_t& chain, int me, int router, int stage_actors) {
  std::map<int, int> credits;
  bool first = chain.front().actor == me, loss = chain.back().actor == me;
  if (first || loss)
    credits[router] = loss && !first ? default_target_credits(stage_actors) : 0;
  for (std::size_t h = 1; h < chain.size(); ++h)
    if (chain[h].actor == me && chain[h - 1].actor != me)
      credits[chain[h - 1].actor] = 0;
  return credits;
}

} // namespace troupe::sched
