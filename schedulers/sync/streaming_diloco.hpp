// One replica's side of DiLoCo and Streaming DiLoCo as a sync policy: when to
// exchange which fragment, and what to do with the averaged pseudo-gradient
// (#13). Plain code: the sync actor or `troupe sync` moves the values.
#pragma once

#include <span>
#include <vector>

#include "schedulers/sync/exchange_policies.hpp"
#include "schedulers/sync/outer_optimizer.hpp"

namespace troupe::sched {

/// Streaming DiLoCo's settings (`local_update:` keys it registers). A spec
/// without them (plain DiLoCo) is one fragment, no delay, no mixing.
struct streaming_settings {
  /// P fragments, one exchanged every H/P steps round robin (torchft's DiLoCo; H % P == 0).
  int fragments = 1;
  /// τ: the exchange starts τ steps before it is applied (τ < H/P).
  int delay = 0;
  /// α: the new global is mixed toward the local parameters (torchft's
  /// fragment_update_alpha, default 0: the pure new global).
  double alpha = 0.0;
};
/// The settings `spec.options` holds.
streaming_settings streaming_of(const local_update_spec& spec);

/// When each fragment is exchanged (torchft's `DiLoCo._step_post_hook`): after
/// every inner step the local count rises; at H/P − τ the fragment
/// `exchanges % P` prepares, at H/P it performs and the count restarts. A
/// stage keeps one to know when to wait; its sync actor keeps the values.
class fragment_schedule {
public:
  fragment_schedule(int fragments, int cadence, int delay) : fragments_(fragments), cadence_(cadence), delay_(delay) {}
  /// The events due after the inner step just taken, prepare before perform.
  std::vector<fragment_event> after_inner_step();
  long exchanges() const noexcept { return exchanges_; }

private:
  int fragments_, cadence_, delay_;
  int local_step_ = 0;
  long exchanges_ = 0;
};

/// The fragments, their delay and cadence of `spec` (diloco: 1 fragment, no delay).
fragment_schedule make_fragment_schedule(const local_update_spec& spec);
/// The same behind the sync_schedule interface, for the methods that follow it.
std::unique_ptr<sync_schedule> make_fragment_sync_schedule(const local_update_spec& spec);

/// The schedule and outer step of torchft's `DiLoCo` (torchft/local_sgd.py;
/// Douillard et al. 2023 for P = 1, Streaming DiLoCo, Douillard et al. 2025,
/// arXiv 2501.18512, for P > 1). After every inner step the local step count
/// rises; at H/P − τ the fragment `exchanges % P` prepares (its pseudo-gradient
/// global − local goes out to be averaged), at H/P it performs (the averaged
/// pseudo-gradient is applied to the saved global by the outer optimizer, the
/// result saved as the new global, and the local values mixed in by α) and the
/// count restarts. So the fragments go round robin, one every H/P steps.
///
/// Each fragment is one flat list of values; the caller maps model tensors onto
/// it. Plain DiLoCo is P = 1, τ = 0, α = 0.
class streaming_diloco : public outer_rule {
public:
  /// `start[f]`: fragment f's values at the start, the first saved global.
  streaming_diloco(const local_update_spec& spec, std::vector<std::vector<float>> start);

  /// The events due after the inner step just taken, prepare before perform.
  std::vector<fragment_event> after_inner_step() { return schedule_.after_inner_step(); }
  /// The pseudo-gradient of fragment `f` from its `local` values: saved global − local.
  std::vector<float> prepare(int f, std::span<const float> local) const override;
  /// Applies the replicas' mean pseudo-gradient to fragment `f`: the outer
  /// optimizer steps from the saved global, that is saved as the new global,
  /// and `local` becomes it mixed toward `local` by α.
  void perform(int f, std::span<const float> averaged, std::span<float> local) override;
  std::size_t values(int f) const override { return global(f).size(); }

  const std::vector<float>& global(int f) const { return global_.at(static_cast<std::size_t>(f)); }
  int fragments() const noexcept { return static_cast<int>(global_.size()); }
  /// Exchanges performed so far (torchft's manager step).
  long exchanges() const noexcept { return exchanges_; }

  /// Adds its state to `s`: each fragment's saved global (`global.F`), outer
  /// momentum (`momentum.F`) and outer steps (`outer_steps.F`), and `exchanges`.
  void save(sync_state& s) const override;
  /// Takes up what save() wrote, for fragments of the sizes it was made with;
  /// throws std::invalid_argument naming what does not fit.
  void restore(const sync_state& s) override;

private:
  local_update_spec spec_;
  streaming_settings settings_;
  fragment_schedule schedule_;
  long exchanges_ = 0;
  std::vector<std::vector<float>> global_;
  std::vector<outer_sgd> outer_;
};

/// `troupe sync`'s run of DiLoCo and Streaming DiLoCo: every replica's
/// fragments in lockstep, their pseudo-gradients averaged in the spec's wire format.
sync_sim_result run_diloco_toy(const sync_sim_config& c);

} // namespace troupe::sched
