// The scheduling half of a pipeline-stage actor, free of CAF and of tensors: the
// queue and its policy, routes, step plans, credits, held later-step messages
// and the global-norm reduction. The actor adds the model; the simulator a cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "runtime/actor/route.hpp"
#include "schedulers/routing/least_loaded.hpp"
#include "schedulers/policies/stage_policy.hpp"

namespace troupe::sched {

/// Throws std::runtime_error: a message for a chunk `who` does not hold (or an absurd microbatch).
[[noreturn]] void throw_bad_slot(const std::string& who, int chunk, int mb, int chunks);

/// The entry of (chunk, microbatch) in per-chunk vectors that grow to the
/// largest microbatch seen (and are reused across steps); throws
/// std::runtime_error naming `who` for a chunk this stage does not hold.
template <class T>
T& chunk_slot(std::vector<std::vector<T>>& slots, int chunk, int mb, const std::string& who) {
  if (chunk < 0 || chunk >= static_cast<int>(slots.size()) || mb < 0 || mb > (1 << 20))
    throw_bad_slot(who, chunk, mb, static_cast<int>(slots.size()));
  auto& v = slots[static_cast<std::size_t>(chunk)];
  if (static_cast<std::size_t>(mb) >= v.size())
    v.resize(static_cast<std::size_t>(mb) + 1);
  return v[static_cast<std::size_t>(mb)];
}

/// A data message's place in the run, without its tensors.
struct msg_meta {
  std::int64_t step = 0;
  int microbatch = 0;
  int hop = 0; ///< the receiver's position on `route`
  route_t route;
};

/// What one stage needs to know to schedule: who it is, not who its neighbours are.
struct stage_core_config {
  std::string name;
  int actor = 0; ///< this stage's index in the graph's actor list (what routes name)
  int rank = 0;  ///< its position among the stage actors (virtual stage ids, policy budgets)
  int ranks = 1;
  int chunks = 1;
  int router = -1; ///< the actor that sends batches (whose credits a batch's start returns)
  std::int64_t steps = 1;
  bool reduce_norm = false; ///< end each step with the global-norm reduction over the plan's participants
  /// Credits granted to each sender of inputs; 0 means default_credits of the policy's bound.
  std::map<int, int> input_credits;
  /// Routing around stragglers (`data_parallel.route: least_loaded`): the
  /// replicas of the next position, any of which may take this stage's outputs
  /// (empty: outputs follow the route as the router made it). Targets then
  /// travel with the activations, since the loss stage is chosen on the way.
  std::vector<int> next_replicas{};
  /// With routes chosen on the way, a plan's hops are -1 and the stage learns
  /// them from messages: each of these many senders (the previous position's
  /// replicas) reports how many microbatches of the step it sent here.
  int hop_reporters = 0;
  bool targets_travel = false; ///< the loss hop's targets come with its activation
  /// Optimizer post-validation (`train.clip: post_validate`): with the reduction,
  /// apply the update as soon as the gradients are final (hooks::update_early)
  /// instead of after the total; hooks::update still follows with the total and
  /// validates it. The stage admits no work of the next step in between, so a
  /// rolled-back step never reaches another step's work.
  bool post_validate = false;
};

/// One started action and what the compute side needs to run it.
struct stage_task {
  action what;
  int chunk = 0;
  int hop = 0;       ///< the microbatch's position on its route here
  bool loss = false; ///< the route's last hop: a forward computes the loss, a backward starts from it
  std::int64_t step = 0;
  /// An F&B's forward and backward, each as a task of its own (the fields
  /// above are the forward's); empty for every other action.
  std::vector<stage_task> parts{};
};

/// Where the core's decisions go: messages to other actors (the actor sends
/// them, the simulator delivers them after a latency), the compute at the step
/// boundary, and the clock. Unset functions do nothing (and `clock` reads 0).
struct stage_core_hooks {
  std::function<double()> clock; ///< seconds on any fixed origin: steady in the actor, simulated in the driver
  /// A forward's output to the next hop's actor; `to` may be this actor (a local
  /// hand-off: keep the output for chunk route[hop] here; the core has queued it).
  std::function<void(int to, const msg_meta&)> forward;
  /// A backward's input gradient to the previous hop's actor (or this one, as for forward).
  std::function<void(int to, const msg_meta&)> backward;
  std::function<void(int to, int count)> credit;                        ///< credits granted to a sender
  std::function<void(int reducer, std::int64_t step, double sq)> norm;  ///< this stage's Σ g² to the reducer
  std::function<void(int to, std::int64_t step, double total_sq)> clip; ///< reducer -> participant: the total
  /// With next_replicas: this stage sent `to` `count` microbatches in `step` (sent to every next replica, 0 too).
  std::function<void(int to, std::int64_t step, int count)> hops;
  /// The step's gradients are complete here: start what must finish before they
  /// are final (a data-parallel all-reduce of what is not yet under way). True
  /// when that is already done; otherwise the stage waits for on_synced(step).
  /// Unset: nothing to wait for.
  std::function<bool(std::int64_t step)> sync;
  /// The step's gradients are final: returns this stage's Σ g² (0 without clipping).
  std::function<double(std::int64_t step)> gradients_complete;
  /// Apply the step's update, given the global Σ g² (after update_early: validate it).
  std::function<void(std::int64_t step, double total_sq)> update;
  /// With post_validate: apply the step's update unclipped, before the global Σ g² is known.
  std::function<void(std::int64_t step)> update_early;
  /// Called after the update that completes `steps_done` steps.
  std::function<void(std::int64_t steps_done)> updated;
  /// Called right after that update, before the next step's work is admitted:
  /// a local-update exchange (DiLoCo) that rewrites the parameters. True when
  /// nothing must be waited for; otherwise the next step waits for on_exchanged().
  std::function<bool(std::int64_t steps_done)> exchange;
};

/// A stage's scheduling state machine. Feed it messages' metadata; begin()
/// starts the policy's next action, finish() completes it and sends its output
/// along the route. Throws std::runtime_error (naming the stage) on a broken protocol.
class stage_core {
public:
  stage_core(stage_core_config cfg, policy_ptr policy, stage_core_hooks hooks);

  const stage_core_config& config() const noexcept { return cfg_; }
  const stage_policy& policy() const noexcept { return *policy_; }
  const stage_queue& queue() const noexcept { return queue_; }
  std::int64_t step() const noexcept { return step_; }
  bool training_done() const noexcept { return step_ >= cfg_.steps; }
  /// The step's gradients are complete and the stage waits for the reducer's total.
  bool awaiting_total() const noexcept { return awaiting_total_; }
  /// The step's gradients are complete and the stage waits for their sync (hooks::sync).
  bool awaiting_sync() const noexcept { return awaiting_sync_; }
  /// Tokens of the current step, from its plan (0 before the plan).
  std::int64_t step_tokens() const noexcept { return step_tokens_; }
  std::size_t held_count() const noexcept { return held_.size(); }
  std::size_t max_held() const noexcept { return max_held_; }
  /// Credits granted to senders at start (the bound on held inputs).
  int credits_granted() const noexcept;
  /// The chunk of `route`'s hop `hop`, which must be on this actor.
  int chunk_of_hop(const route_t& route, int hop) const;

  /// Continues a resumed run at step `steps_done` (before start()).
  void resume_at(std::int64_t steps_done) { step_ = steps_done; }
  /// Grants every sender its credits.
  void start();
  /// True when a message of `step` belongs to the current step; otherwise holds
  /// `replay` (the message, delivered again when its step begins) and returns false.
  /// Evaluation after step s waits until step s's update is applied here; with
  /// targets that travel, a training message waits for its step's plan.
  bool admit(std::int64_t step, bool eval, std::function<void()> replay);
  void on_plan(const step_plan_msg& m);
  /// A batch from the router: the tokens of hop 0 and/or the targets of the last hop.
  void on_batch(const msg_meta& m, bool tokens, bool targets);
  void on_activation(const msg_meta& m);
  void on_gradient(const msg_meta& m);
  /// A receiver granted credits; with next_replicas, its load report picks where outputs go.
  void on_credit(int from, int count, const load_report& load = {});
  /// A sender of the previous position sent this stage `count` microbatches in `step`.
  void on_hops(std::int64_t step, int from, int count);
  /// What this stage tells its senders with a credit.
  load_report load() const { return measure_load(queue_); }
  void on_norm(std::int64_t step, double sq_norm, int from);
  void on_clip(std::int64_t step, double total_sq);
  /// The sync that hooks::sync started for `step` has finished.
  void on_synced(std::int64_t step);
  /// The exchange that hooks::exchange started has rewritten the parameters.
  void on_exchanged();
  /// The update is done and the stage waits for its exchange (hooks::exchange).
  bool awaiting_exchange() const noexcept { return awaiting_exchange_; }
  /// Elastic routes around stragglers (#26, graph_spec::elastic_least_loaded):
  /// the stage actors in `lost` (a lost replica's) are gone. Outputs stop going
  /// to them; what they sent this step is all they will (the step waits for no
  /// report of theirs, a later one for one report fewer each); and the
  /// microbatches whose output went to one of them and whose gradient has not
  /// come back are returned, for the caller to back out with a zero gradient
  /// (on_gradient), so they complete here and upstream as every other does.
  /// Messages from a lost actor are the caller's to drop (is_lost).
  std::vector<msg_meta> drop_actors(const std::set<int>& lost);
  bool is_lost(int actor) const { return lost_.count(actor) > 0; }
  /// The lost stage actors in `back` (a replica that rejoins, #26) are in the
  /// run again from step `from` on: from then this stage routes to them, waits
  /// for their hop reports and grants them their credits, and the credits they
  /// grant meanwhile wait here for that step. Throws std::runtime_error for a
  /// step this stage has passed or an actor that is not lost.
  void add_actors(const std::set<int>& back, std::int64_t from);
  /// Whether a message of `step` from `actor` is to be dropped: it comes from a
  /// lost stage and not from its new start (a step at or after its rejoin).
  bool drops_from(int actor, std::int64_t step) const;

  /// Starts the policy's next action, if any and nothing runs; returns inputs' credits.
  std::optional<stage_task> begin();
  /// The compute of `t` is done: sends its output along the route, and ends the step when it was the last.
  void finish(const stage_task& t);
  /// After begin() found nothing: seconds from now after which the policy wants to be asked again.
  std::optional<double> wake_in() const;

private:
  struct work {
    route_t route;
    int hop = -1;         ///< -1 until its input arrives
    bool targets = false; ///< the loss hop's targets arrived
  };
  double now() const { return hooks_.clock ? hooks_.clock() : 0.0; }
  work& slot(int chunk, int mb);
  /// The task of one started pass (not an F&B): returns its input's credit and picks where its output goes.
  stage_task started(const action& a);
  /// Sends a finished pass's output (an activation or a gradient) along its route.
  void send_output(const stage_task& t);
  void push_input(int chunk, int mb);
  /// The replica of the next position that ran an earlier chunk of the route
  /// whose hop `hop` is next, or -1 on its first chunk (the load chooses).
  int retrace(const route_t& route, int hop) const;
  void return_credit(int to, int count = 1);
  void apply_plan();
  void apply_reported_hops();
  void maybe_report_hops();
  void maybe_finish_step();
  void reduce_norm();
  void maybe_reduce(std::int64_t step);
  void finish_step(double total_sq);
  void advance_step();
  void release_held();
  /// Takes back the actors that rejoin at the current step (add_actors).
  void apply_joins();

  stage_core_config cfg_;
  policy_ptr policy_;
  stage_core_hooks hooks_;
  stage_queue queue_;
  std::int64_t step_ = 0;
  std::int64_t step_tokens_ = 0;
  std::vector<std::vector<work>> work_; ///< [chunk][microbatch], reused across steps
  std::vector<std::function<void()>> held_;
  std::size_t max_held_ = 0;
  std::map<std::int64_t, step_plan_msg> plans_; ///< plans of this and later steps
  struct reduction {
    int heard = 0;
    std::map<int, double> by_actor; ///< summed in actor order, whatever order they came in
    std::vector<int> from;
  };
  std::map<std::int64_t, reduction> norms_; ///< reducer: step -> norms heard
  std::map<std::int64_t, double> totals_;   ///< participant: step -> global Σ g²
  bool awaiting_total_ = false;
  bool awaiting_sync_ = false;
  // Routing around stragglers: where this step's outputs went, and the hops senders reported.
  least_loaded_chooser chooser_;
  std::map<int, int> sent_; ///< next replica -> microbatches sent this step
  int forwarded_ = 0;       ///< outputs sent this step
  bool reported_ = false;   ///< this step's counts went out
  struct hop_count {
    int heard = 0; ///< reports from senders still in the run
    int sum = 0;
    std::map<int, int> from; ///< sender -> its count
  };
  std::map<std::int64_t, hop_count> reported_hops_; ///< step -> counts heard from senders
  bool awaiting_exchange_ = false;
  std::set<int> lost_;                ///< stage actors of replicas that left the run
  std::map<int, int> arrived_from_;   ///< sender -> activations it sent this step
  int reporters_ = 0;                 ///< senders whose report a step waits for (hop_reporters, less the lost)
  std::map<int, std::int64_t> joins_; ///< lost actor -> the step it rejoins at (add_actors)
  std::map<int, int> joiner_credits_; ///< credits a rejoining actor granted before its step
};

} // namespace troupe::sched
