// One replica's outer_sync of one stage position, free of CAF and clocks: the
// bookkeeping around its method's sync policy (which exchange is under way,
// parts that came before their prepare, performs waiting for their exchange,
// lost replicas, bytes sent). The actor (actors/outer_sync.cpp) and the
// simulated clock (schedulers/sim/outer_sim.cpp) both run it (#13, #25).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

/// One message between the outer_sync actors of a position: part `piece` of
/// round `round` of fragment `fragment`'s exchange prepared after inner step `step`.
struct sync_part {
  std::int64_t step = 0;
  int fragment = 0;
  int from = 0, to = 0; ///< replicas (replica groups, with replica_groups)
  int round = 0, piece = 0;
  quantized_rows payload;
};

class sync_peer {
public:
  /// Replica `replica` of `replicas`; `name` prefixes its errors.
  sync_peer(std::string name, int replica, int replicas);

  /// A resumed run, before start(): the exchanges performed and those that
  /// were under way (by fragment, their step) when the checkpoint was taken.
  void resume_at(long performed, std::map<int, std::int64_t> prepared);
  /// The stage's start values arrived: makes the method's policy (from `setup`,
  /// whose replica and replicas are this peer's) and, resumed, has it take up
  /// `saved` (what to send: the exchanges under way start again; then the
  /// parts of other replicas that came before).
  std::vector<sync_part> start(const sync_method& method, sync_setup setup,
                               const std::optional<sync_state>& saved = std::nullopt);
  /// The method's state, for a checkpoint part.
  sync_state save() const { return policy_->save(); }
  /// Exchanges under way, by fragment: their step.
  const std::map<int, std::int64_t>& prepared() const noexcept { return prepared_; }
  /// Whether a perform of the stage waits for its exchange.
  bool performs_waiting() const noexcept { return !perform_.empty(); }
  /// The stage's values of fragment `f` after inner step `step`: what to send.
  std::vector<sync_part> prepare(std::int64_t step, int f, std::span<const float> local);
  /// The stage waits for fragment `f`'s exchange with these values to update.
  void perform(std::int64_t step, int f, std::vector<float> local);
  /// A part from another replica: what to send on.
  std::vector<sync_part> receive(sync_part part);
  /// Replica `r` left the run: what to send again.
  std::vector<sync_part> lose(int r);
  /// Replica `r`, lost before, is back (#26): it is in the exchanges prepared
  /// after more than `after` inner steps and sent nothing of the earlier ones.
  /// Throws when an exchange of a later step is already under way without it.
  /// `losses`: how many losses of `r` the decision knew of; when this peer has
  /// heard of more since (lose), `r` was lost again on its way back: nothing
  /// changes, and it returns false.
  bool rejoin(int r, std::int64_t after, int losses);
  /// How many times this peer has heard replica `r` was lost.
  int losses(int r) const;
  /// Fragments the stage performed whose exchange is complete: apply() each.
  std::vector<int> applicable() const;
  /// Applies fragment `f`'s exchange: the step the stage performed it at, and its new values.
  std::pair<std::int64_t, std::vector<float>> apply(int f);

  std::int64_t bytes_sent() const noexcept { return bytes_sent_; }
  long performed() const noexcept { return performed_; }

private:
  /// The policy's sends of fragment `f`'s exchange of `step`, less those to lost replicas, counted.
  std::vector<sync_part> outgoing(std::int64_t step, int f, std::vector<sync_send> sends);
  /// The parts of fragment `f`'s exchange of `step` that came before it was prepared, received now: into `out`.
  void replay_early(std::int64_t step, int f, std::vector<sync_part>& out);

  std::string name_;
  int replica_, replicas_;
  std::unique_ptr<sync_policy> policy_;
  std::map<int, std::int64_t> prepared_; ///< fragment -> the step of its exchange under way
  std::map<int, std::int64_t> exchange_; ///< fragment -> the step of its policy's exchange (under way, or last applied)
  std::map<int, int> losses_;            ///< replica -> times lost (lose calls)
  std::vector<int> lost_;                ///< replicas that left the run (elastic)
  std::map<int, std::int64_t> back_;     ///< replicas that came back -> in the exchanges of later steps
  std::map<int, std::pair<std::int64_t, std::vector<float>>> perform_;   ///< fragment -> the stage's values to update
  std::map<std::pair<std::int64_t, int>, std::vector<sync_part>> early_; ///< parts before their prepare
  std::int64_t bytes_sent_ = 0;
  long performed_ = 0;
};

} // namespace troupe::sched
