// What one pipeline rank has queued: the read-only view a stage policy decides
// from, kept up to date incrementally by the stage actor (or the harness).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "schedulers/policies/action.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// Where a forward sits on its microbatch's route, as the message carries it.
struct hop_info {
  int hop = 0;       ///< position on the route (0: the first hop)
  int hops_left = 1; ///< hops from this one to the route's end, this one included (1: it computes the loss)
  /// The actor that receives this forward's output and must have granted a
  /// credit for it (its index in the graph); -1 when none is needed (the loss
  /// hop, or the next hop on this same actor).
  int next_actor = -1;
};

/// The work of one rank for one step: what has arrived, what runs, what is in
/// flight and done, the credits its receivers granted, and the step's plan.
///
/// Chunk c of rank r is virtual stage r + c*p (round-robin placement,
/// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
/// GPU Clusters Using Megatron-LM") or, for a V-shaped policy, its mirror on
/// odd chunks (chunk_placement); `action::stage` names it. Microbatches are
/// the step's sequence numbers (any non-negative ints); how many visit this
/// rank is not known in advance but told by the step's plan (`expect`). The
/// actor drives it:
///
///     queue.expect(hops);                        // the router's plan for the step
///     queue.grant(actor, n);                     // a receiver granted n credits
///     queue.push_forward(stage, mb, info);       // an activation arrived (or the router's batch)
///     queue.push_backward(stage, mb);            // an output gradient arrived
///     auto a = policy.next(queue);               // whenever the rank is idle
///     queue.start(*a); ...run it...; queue.finish(*a);
///     if (queue.step_complete()) queue.reset();  // next step
///
/// A forward is ready when its input is here and its output's receiver has
/// credit; starting it takes the credit. Finishing a forward on its route's
/// last hop makes its backward ready (the loss gradient is computed locally).
/// "In flight" counts microbatches whose forward has started and whose
/// backward (B, or I when split) has not finished: the activations the rank
/// holds, the memory a schedule bounds.
class stage_queue {
public:
  /// `microbatches` > 0 fixes every step at that many microbatches per chunk on
  /// a chain (hop = stage), for harnesses and tests; 0 leaves each step's size to expect().
  stage_queue(int rank, int ranks, int microbatches, int chunks = 1,
              chunk_placement placement = chunk_placement::round_robin);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  int chunks() const { return chunks_; }
  chunk_placement placement() const { return placement_; }
  /// Virtual stages in the whole pipeline: ranks * chunks.
  int stages() const { return ranks_ * chunks_; }
  /// Virtual stage index of local chunk `chunk`: rank + chunk * ranks, or its V-shaped mirror.
  int stage_of(int chunk) const { return virtual_stage(rank_, ranks_, chunk, placement_); }
  /// Local chunk of virtual stage `stage` (which this rank must own).
  int chunk_of(int stage) const { return stage / ranks_; }
  bool owns(int stage) const {
    return stage >= 0 && stage < stages() && rank_of_stage(stage, ranks_, placement_) == rank_;
  }
  /// Counts reset() calls, so a policy can notice a new step.
  std::uint64_t step() const { return step_; }

  /// The step's plan: `hops` forwards and backwards will run here this step.
  void expect(int hops) { planned_ = hops; }
  /// The planned hops of this step, or -1 before the plan arrived.
  int planned() const { return planned_; }
  /// A receiver (`actor`) granted `count` more credits (negative: took them back).
  void grant(int actor, int count);
  /// Credits `actor` has granted that are not used yet.
  int credits(int actor) const;

  /// An input activation for (stage, mb) arrived; fails on a duplicate or a
  /// stage not owned here. Without `info`, the hop is the stage on a chain.
  expected<void> push_forward(int stage, int microbatch, std::optional<hop_info> info = std::nullopt);
  /// An output gradient for (stage, mb) arrived.
  expected<void> push_backward(int stage, int microbatch);
  /// The rank begins `a`; fails unless `a` is ready (see is_ready) and nothing
  /// else runs. An F&B starts its forward and its backward, which must be on
  /// two different chunks; finish() finishes both.
  expected<void> start(const action& a);
  /// The running action `a` completed.
  expected<void> finish(const action& a);
  /// Forgets the step's state and starts the next one (credits and measured costs are kept).
  void reset();

  /// Sets the clock (seconds, any fixed origin) that start and finish are stamped with.
  void set_now(double t) { now_ = t; }
  double now() const { return now_; }
  /// When the rank last finished an action (or the step began): it has idled since then if nothing runs.
  double idle_since() const { return idle_since_; }
  /// Mean measured duration of actions of `kind` so far (over steps too); with
  /// none measured yet, the mean over all kinds; 0 before anything finished.
  double mean_cost(op_kind kind) const;

  /// Microbatches whose input arrived, whose forward has not started and whose
  /// output's receiver has credit, per chunk.
  const std::set<int>& ready_forward(int chunk) const { return chunks_state_[chunk].ready_f; }
  /// Microbatches of `chunk` whose forward started this step, in the order they
  /// started: a rank's own sequence of its microbatches, whatever their numbers.
  const std::vector<int>& started_forwards(int chunk) const { return chunks_state_[chunk].started_f; }
  /// Microbatches whose input arrived but whose receiver has no credit yet, per chunk.
  const std::set<int>& blocked_forward(int chunk) const { return chunks_state_[chunk].blocked_f; }
  /// Microbatches whose gradient has arrived and whose B/I has not started, per chunk.
  const std::set<int>& ready_backward(int chunk) const { return chunks_state_[chunk].ready_b; }
  /// Microbatches whose I finished and whose W has not started (deferred weight work), per chunk.
  const std::set<int>& deferred_weight(int chunk) const { return chunks_state_[chunk].ready_w; }
  /// Deferred W passes summed over chunks.
  int deferred_weight_count() const;
  /// Activations held for chunk `chunk` (forward started, B/I not finished).
  int in_flight(int chunk) const { return chunks_state_[chunk].in_flight; }
  /// Activations held on this rank, summed over chunks.
  int in_flight() const { return in_flight_total_; }
  /// True when microbatch `mb` is held here on some chunk (its forward started,
  /// its B/I not finished): SkipPipe's stage 0 holds a microbatch from its
  /// embedding's forward until that chunk's backward, its head's pass inside.
  bool holds(int microbatch) const;
  /// True when the forward of (stage, mb) finished here and its output
  /// gradient has not arrived (a route's loss hop has it at once).
  bool awaits_gradient(int stage, int microbatch) const;
  /// Microbatches held here (each counted once over chunks) on a hop whose
  /// hops_left is at most `hops`: those at least as close to their route's end.
  int held_within(int hops) const;
  /// The action now running, if any.
  const std::optional<action>& running() const { return running_; }

  /// True if `a` could start now (its inputs are here, its receiver has credit, and it has not started).
  bool is_ready(const action& a) const;
  /// True once `a` has started (it may still be running).
  bool is_started(const action& a) const;
  /// True once `a` has finished. A finished B also counts as finished I and W.
  bool is_done(const action& a) const;
  /// When `a`'s input arrived this step, as a count of the inputs (activations
  /// and gradients) that arrived here before it; -1 if it has not. A W's input
  /// is its I's. Policies that run what arrived first compare these.
  int arrival(const action& a) const;
  /// Where `a`'s microbatch is on its route here (known once its input arrived; else the chain's).
  int hop_index(const action& a) const;
  /// Hops from `a`'s to its route's end, `a`'s included: p - r on a chain.
  int hops_left(const action& a) const;
  /// True when the plan arrived and every planned hop has finished its backward
  /// (B, or I and W): the step's gradients are complete.
  bool step_complete() const { return planned_ >= 0 && complete_ == planned_; }
  /// Microbatches of `chunk` whose backward (B, or both I and W) finished.
  int completed(int chunk) const { return chunks_state_[chunk].completed; }
  /// Forward inputs of this step that the plan announced and that have not
  /// arrived yet (planned() minus the inputs pushed, all chunks); -1 before the
  /// plan arrived. A policy may wait for one of them instead of running other work.
  int forwards_to_come() const { return planned_ < 0 ? -1 : planned_ - arrived_; }

private:
  enum flag : std::uint8_t {
    f_arrived = 1,
    f_started = 2,
    f_done = 4,
    b_arrived = 8,
    b_started = 16,
    b_done = 32,
    w_started = 64,
    w_done = 128,
  };
  struct chunk_state {
    std::vector<std::uint8_t> flags;       // per microbatch
    std::vector<hop_info> info;            // per microbatch, set when its input arrives
    std::vector<int> arrival_f, arrival_b; // per microbatch: arrivals_ when its activation, its gradient came
    std::set<int> ready_f, blocked_f, ready_b, ready_w;
    std::vector<int> started_f; // forwards started this step, in start order
    int in_flight = 0;
    int completed = 0;
  };
  expected<void> check(int stage, int microbatch, const char* what) const;
  std::uint8_t flags(const action& a) const;
  const hop_info* info(const action& a) const;
  bool has_credit(const hop_info& i) const { return i.next_actor < 0 || credits(i.next_actor) > 0; }
  /// Moves forwards between ready and blocked as credits change.
  void refresh_credit_gates();
  /// start() and finish() of one pass (an F&B has two).
  void start_part(const action& a);
  void finish_part(const action& a);
  static constexpr int kinds = 5; // cost slots: F, B, I, W, F&B

  int rank_, ranks_, fixed_microbatches_, chunks_;
  chunk_placement placement_;
  int planned_ = -1;
  std::vector<chunk_state> chunks_state_;
  std::map<int, int> credits_;
  int in_flight_total_ = 0;
  int complete_ = 0;
  int arrived_ = 0;  // forward inputs pushed this step
  int arrivals_ = 0; // activations and gradients pushed this step (a loss gradient when its forward ends)
  std::optional<action> running_;
  double now_ = 0, started_at_ = 0, idle_since_ = 0;
  double cost_sum_[kinds] = {};
  int cost_count_[kinds] = {};
  std::uint64_t step_ = 0;
};

} // namespace troupe::sched
