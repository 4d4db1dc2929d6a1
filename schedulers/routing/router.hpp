// The router's decisions, free of CAF and of data: which microbatch to emit
// next, on which route, and what each step holds for every stage (its plan).
// The data loader wraps it with a corpus; the simulated clock drives it bare.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "runtime/actor/route.hpp"
#include "schedulers/routing/routing_policy.hpp"

namespace troupe::sched {

/// What a router needs to know about the run.
struct router_config {
  std::vector<int> stage_actors; ///< every stage actor (graph indices): each gets a plan per step
  int microbatches = 1;          ///< per step and replica
  std::int64_t steps = 1;        ///< the run ends after this step
  std::int64_t first_step = 0;   ///< where a resumed run starts
  std::int64_t tokens_per_microbatch = 1;
  int replicas = 1; ///< data-parallel replicas: a step emits replicas × microbatches
  /// Routing around stragglers: stages that learn a step's hops from their
  /// senders (their plan says -1), and targets that go with the tokens to the
  /// first hop (the loss stage is chosen on the way) instead of to the route's last.
  std::vector<int> hops_from_messages{};
  bool targets_with_tokens = false;
  /// Local-update training (#13): each replica's stages get a plan of their own
  /// replica's hops and tokens, and reduce their gradient norm among themselves.
  bool independent_replicas = false;
  /// With independent replicas: replicas per group (local_update.replica_groups),
  /// consecutive replicas whose stages share one plan, their group's tokens and
  /// one norm reduction (they sync every step inside).
  int group_size = 1;
  /// NoLoCo's random routes (#13): replicas share stages microbatch by
  /// microbatch, yet nothing is reduced among them: every stage clips by its own
  /// gradient norm and counts the tokens of one replica's batch.
  bool stage_local_norm = false;
  /// With stage_local_norm: the two stages that hold copies of a tied matrix
  /// apart (stage actor -> the lower index of the two) clip by their joint norm,
  /// so both copies take the same clipped gradient.
  std::map<int, int> norm_pairs{};
  /// SkipPipe's paths (#14) go through any replica's stages: microbatches are
  /// numbered in the whole step, so two replicas' never share an index at a stage.
  bool across_replicas = false;
  /// With independent replicas and elastic training (#26): a step keeps its
  /// batch when replicas leave. The microbatches of a replica out of the run are
  /// dealt to the replicas left in turn (each takes them after its own, as
  /// microbatch m, m + 1, ...), so every step trains on the same sequences it
  /// would with every replica in. false: they are not made, and the step shrinks.
  bool redeal = false;
  /// Elastic DDP (#26, graph_spec::elastic_ddp): every replica's stages hold the
  /// same summed gradients, so each replica reduces its own gradient norm; its
  /// stages get a plan of their own replica's hops, with the whole step's
  /// tokens. Its replicas can leave the run as independent ones do.
  bool replica_norms = false;
};

/// One microbatch to make and send: tokens to route.front(), targets to route.back().
/// With replicas, a step's microbatches go round the replicas (k-th of the step:
/// replica k mod R, its microbatch k div R), so R replicas of batch b take the
/// sequences one replica of batch R·b would, in the same order.
struct emission {
  std::int64_t step = 0;
  int microbatch = 0;        ///< within the step and its replica
  std::int64_t sequence = 0; ///< within the run
  route_t route;
  /// The step's plan for every stage actor, set on a step's first microbatch
  /// (send them before it): stage actor index -> plan.
  std::vector<std::pair<int, step_plan_msg>> plans;
  /// The step's last microbatch (of the replicas still in the run).
  bool step_end = false;
};

/// Emits microbatches in order while the receivers' credits allow: a
/// microbatch needs a credit of its first hop (tokens) and of its last hop
/// (targets; one credit when the two are the same actor). Routes come from the
/// routing policy, a step at a time, so the plans can count every stage's hops.
class router_core {
public:
  router_core(router_config cfg, routing_ptr policy);

  /// A receiver granted `count` more credits.
  void grant(int actor, int count) { credits_[actor] += count; }
  int credits(int actor) const;
  /// The next microbatch, if its receivers have credit and the run is not over.
  std::optional<emission> next();
  /// Every microbatch of every step has been emitted.
  bool done() const { return step_ >= cfg_.steps; }
  /// Microbatches emitted so far in this run (not counting a resumed run's earlier ones).
  std::int64_t emitted() const { return emitted_; }
  /// The route microbatches of evaluation follow (the policy's route of the run's first microbatch).
  const route_t& eval_route() const { return eval_routes_.front(); }
  /// Every route of evaluation, eval_route() first, each pass reported on its own
  /// (routing_policy::eval_routes).
  const std::vector<route_t>& eval_routes() const { return eval_routes_; }
  /// Elastic training (independent replicas, or replica_norms): replica `r` left the
  /// run; its microbatches are no longer made, its stages get no more plans, and
  /// evaluation moves to the first replica still here when it was r's.
  void drop_replica(int r);
  /// Elastic rejoin (#26): replica `r`, dropped before, is dealt microbatches
  /// and plans again from step `step` on, which must come after the step being
  /// dealt now (its plans have not gone out). Its credits start from what its
  /// new stages grant: drop_replica forgot the old ones.
  void add_replica(int r, std::int64_t step);
  /// Whether replica `r` is dealt microbatches now (not dropped, or back).
  bool in_run(int r) const { return lost_.empty() || !lost_.at(static_cast<std::size_t>(r)); }
  /// The step being dealt now (the run's end once done()).
  std::int64_t step() const noexcept { return step_; }

private:
  void plan_step();
  /// The plans of every replica of an independent-replicas step (router_config::independent_replicas).
  void plan_replicas(emission& e) const;
  /// Microbatches a step emits, over all replicas.
  int per_step() const { return cfg_.microbatches * (cfg_.replicas > 1 ? cfg_.replicas : 1); }
  /// Which replica takes each microbatch of the step being dealt, and its index
  /// there: microbatch k is replica k mod R's (k div R), unless that one is out
  /// and router_config::redeal gives it to a replica left.
  void deal_step();
  bool lost(int replica) const { return !lost_.empty() && lost_[static_cast<std::size_t>(replica)]; }

  router_config cfg_;
  routing_ptr policy_;
  std::map<int, int> credits_;
  std::int64_t step_ = 0;
  int microbatch_ = 0;
  std::int64_t emitted_ = 0;
  std::vector<route_t> routes_; ///< this step's, by microbatch
  std::vector<int> owner_;      ///< this step's, by microbatch: the replica that takes it
  std::vector<int> index_;      ///< this step's, by microbatch: its index within its replica's
  std::vector<route_t> eval_routes_;
  std::vector<bool> lost_;              ///< by replica: left the run
  std::map<int, std::int64_t> back_at_; ///< replicas coming back -> the step they are dealt from
  bool planned_ = false;                ///< this step's plans went out (with its first microbatch made)
  /// Moves past the microbatches of replicas that left.
  void skip_lost();
  void advance();
};

} // namespace troupe::sched

namespace troupe::sched {

/// Credits a stage grants a sender whose channel sets no `credits:`: its
/// policy's in-flight bound (`limit`, at least 2 buffers, so a sender can work
/// one ahead), or 8 for a policy without a bound (0).
inline int default_credits(int limit) {
  return limit > 0 ? (limit < 2 ? 2 : limit) : 8;
}

/// Credits the loss stage grants the router for targets when the channel sets
/// none: targets are small, and the router must run a pipeline's depth ahead of
/// the loss, so 4 per stage actor.
inline int default_target_credits(int stage_actors) {
  return 4 * stage_actors;
}

/// The credits stage actor `me` grants on a `chain` route when the graph sets
/// no `credits:`: each sender of its inputs 0 (the policy's default), the
/// router too when `me` takes tokens, or the target default when it takes
/// only the targets (a loss stage that is not also the first). For the drivers.
std::map<int, int> chain_input_credits(const route_t& chain, int me, int router, int stage_actors);

} // namespace troupe::sched
