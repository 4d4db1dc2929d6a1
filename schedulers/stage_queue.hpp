// What one pipeline rank has queued: the read-only view a stage policy decides
// from, kept up to date incrementally by the stage actor (or the harness).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "schedulers/action.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// The work of one rank for one step: p ranks, m microbatches, v model chunks.
///
/// Chunk c of rank r is virtual stage r + c*p (round-robin placement,
/// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
/// GPU Clusters Using Megatron-LM"). The actor drives it:
///
///     queue.push_forward(stage, mb);     // an activation arrived (or the data loader's batch)
///     queue.push_backward(stage, mb);    // an output gradient arrived
///     auto a = policy.next(queue);       // whenever the rank is idle
///     queue.start(*a); ...run it...; queue.finish(*a);
///     queue.reset();                     // next step
///
/// An actor that also calls `queue.set_now(seconds)` before each call lets
/// policies time their patience (stage_policy::wake_at) from measured costs.
///
/// finishing a forward on the last virtual stage makes its backward ready
/// (the loss gradient is computed locally). "In flight" counts microbatches
/// whose forward has started and whose backward (B, or I when split) has not
/// finished: the activations the rank holds, the memory a schedule bounds.
class stage_queue {
public:
  stage_queue(int rank, int ranks, int microbatches, int chunks = 1);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  int microbatches() const { return microbatches_; }
  int chunks() const { return chunks_; }
  /// Virtual stages in the whole pipeline: ranks * chunks.
  int stages() const { return ranks_ * chunks_; }
  /// Virtual stage index of local chunk `chunk`: rank + chunk * ranks.
  int stage_of(int chunk) const { return rank_ + chunk * ranks_; }
  /// Local chunk of virtual stage `stage` (which this rank must own).
  int chunk_of(int stage) const { return stage / ranks_; }
  bool owns(int stage) const { return stage >= 0 && stage < stages() && stage % ranks_ == rank_; }
  bool is_last_stage(int stage) const { return stage == stages() - 1; }
  /// Position of `a`'s hop on its microbatch's route, 0 for the first (today the virtual stage).
  int hop_index(const action& a) const { return a.stage; }
  /// Hops from `a`'s to the end of its microbatch's route, this one included (1 on the last stage).
  int hops_left(const action& a) const { return stages() - a.stage; }
  /// Counts reset() calls, so a policy can notice a new step.
  std::uint64_t step() const { return step_; }

  /// An input activation for (stage, mb) arrived; fails on a duplicate or a stage not owned here.
  expected<void> push_forward(int stage, int microbatch);
  /// An output gradient for (stage, mb) arrived.
  expected<void> push_backward(int stage, int microbatch);
  /// The rank begins `a`; fails unless `a` is ready (see is_ready) and nothing else runs.
  expected<void> start(const action& a);
  /// The running action `a` completed.
  expected<void> finish(const action& a);
  /// Forgets the step's state and starts the next one (measured costs are kept).
  void reset();

  /// Sets the clock (seconds, any fixed origin) that start and finish are stamped with.
  void set_now(double t) { now_ = t; }
  double now() const { return now_; }
  /// When the rank last finished an action (or the step began): it has idled since then if nothing runs.
  double idle_since() const { return idle_since_; }
  /// Mean measured duration of actions of `kind` so far (over steps too); with
  /// none measured yet, the mean over all kinds; 0 before anything finished.
  double mean_cost(op_kind kind) const;

  /// Microbatches whose input has arrived and whose forward has not started, per chunk.
  const std::set<int>& ready_forward(int chunk) const { return chunks_state_[chunk].ready_f; }
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
  /// The action now running, if any.
  const std::optional<action>& running() const { return running_; }

  /// True if `a` could start now (its inputs are here and it has not started).
  bool is_ready(const action& a) const;
  /// True once `a` has started (it may still be running).
  bool is_started(const action& a) const;
  /// True once `a` has finished. A finished B also counts as finished I and W.
  bool is_done(const action& a) const;
  /// True when every microbatch of every chunk has finished its backward
  /// (B, or I and W): the step's gradients are complete.
  bool step_complete() const { return complete_ == chunks_ * microbatches_; }
  /// Microbatches of `chunk` whose backward (B, or both I and W) finished.
  int completed(int chunk) const { return chunks_state_[chunk].completed; }

private:
  enum flag : std::uint8_t {
    f_arrived = 1, f_started = 2, f_done = 4, b_arrived = 8,
    b_started = 16, b_done = 32, w_started = 64, w_done = 128,
  };
  struct chunk_state {
    std::vector<std::uint8_t> flags;  // per microbatch
    std::set<int> ready_f, ready_b, ready_w;
    int in_flight = 0;
    int completed = 0;
  };
  expected<void> check(int stage, int microbatch, const char* what) const;
  std::uint8_t flags(const action& a) const { return chunks_state_[chunk_of(a.stage)].flags[a.microbatch]; }

  int rank_, ranks_, microbatches_, chunks_;
  std::vector<chunk_state> chunks_state_;
  int in_flight_total_ = 0;
  int complete_ = 0;
  std::optional<action> running_;
  double now_ = 0, started_at_ = 0, idle_since_ = 0;
  double cost_sum_[4] = {0, 0, 0, 0};
  int cost_count_[4] = {0, 0, 0, 0};
  std::uint64_t step_ = 0;
};

} // namespace troupe::sched
