// The two shapes of exchange the built-in local-update methods share (#13): a
// mean over every replica by reduce-scatter and all-gather (DiLoCo's family,
// DES-LOC), and one round in which each member sends its part to the members
// it names (NoLoCo's groups, SparseLoCo's sparse all-gather).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

/// Replicas 0 … n − 1.
std::vector<int> all_replicas(int n);
/// local_update.quantize as a wire format; throws std::invalid_argument on an unknown one.
wire_format format_of(const local_update_spec& spec);

/// What a method does around the mean of a fragment (DiLoCo's outer step):
/// what goes into the mean, and what the mean makes of the local values.
class outer_rule {
public:
  virtual ~outer_rule() = default;
  /// What this replica puts into fragment `f`'s mean, from its `local` values.
  virtual std::vector<float> prepare(int f, std::span<const float> local) const = 0;
  /// Applies the `mean` of fragment `f`: `local` becomes the values the stage goes on with.
  virtual void perform(int f, std::span<const float> mean, std::span<float> local) = 0;
  /// How many values fragment `f`'s mean holds.
  virtual std::size_t values(int f) const = 0;
  /// What it keeps across exchanges, into and out of a checkpoint.
  virtual void save(sync_state& s) const = 0;
  virtual void restore(const sync_state& s) = 0;
};

/// Each fragment averaged over every replica (mean_exchange); with an `outer`
/// rule the rule makes the values, else the mean is the new value.
std::unique_ptr<sync_policy> make_averaging_policy(const sync_setup& s, std::unique_ptr<outer_rule> outer);

/// A method whose exchange is one round: each member sends its one part to
/// the other members it names, and applies what all of them sent. Its
/// exchanges prepare and perform after the same inner step.
///
/// A lost member is no longer waited for, and survivors agree on whether its
/// part is in: each survivor that learns of the loss (or starts an exchange
/// after it) tells the other members of the exchange, forwarding the lost
/// member's part if it had it (round 1, piece = the lost replica) or saying it
/// has none (round 2). A survivor applies the exchange once it has every living
/// member's part and, for each lost one, its part or every living member's word
/// that it has none; so a part that reached one survivor (which may have applied
/// it before it heard) reaches all. Messages from a member known lost are dropped.
class gathering_policy : public sync_policy {
public:
  std::vector<sync_send> receive(int f, int from, int round, int piece, quantized_rows part) override;
  std::vector<sync_send> lose(int r) override;
  /// Replica `r` is in the exchanges gathered after more than `after` steps
  /// (each is prepared and performed after one step, so none is under way).
  void rejoin(int r, std::int64_t after) override;
  bool ready(int f) const override;
  void perform(int f, std::span<float> local) override;
  long exchanges() const override { return exchanges_; }
  sync_state save() const override;
  std::vector<sync_send> restore(const sync_state& s) override;

protected:
  gathering_policy(const sync_setup& s, const char* name) : setup_(s), name_(name) {}
  /// What the method keeps across exchanges, into and out of a checkpoint.
  virtual void save_own(sync_state& s) const = 0;
  virtual void restore_own(const sync_state& s) = 0;
  /// Starts the exchange of `step` among `members` (this replica among them,
  /// lost ones left out here) with this replica's `part`: what to send.
  std::vector<sync_send> gather(std::vector<int> members, std::int64_t step, quantized_rows part);
  /// Applies the parts of every member still here (member order) to `local`.
  virtual void apply(std::vector<quantized_rows>& parts, std::span<float> local) = 0;

  sync_setup setup_;

private:
  std::size_t index_of(int r) const;
  bool is_lost(int r) const;
  /// What this member tells the others about lost member `r`: its part, or that it has none.
  std::vector<sync_send> report(int r) const;

  const char* name_;
  std::vector<int> members_, lost_;                  ///< the exchange's members (lost ones too); replicas lost
  std::map<int, std::int64_t> back_;                 ///< lost replicas coming back -> in the exchanges after this step
  std::vector<std::optional<quantized_rows>> parts_; ///< [member]: its part, once here
  std::vector<std::vector<bool>> heard_;             ///< [lost member][member]: that one's word about its part
  std::int64_t values_ = 0;
  long exchanges_ = 0;
  bool under_way_ = false; ///< gathered, not yet applied (members_ and parts_ stay after, for late losses)
};

} // namespace troupe::sched
