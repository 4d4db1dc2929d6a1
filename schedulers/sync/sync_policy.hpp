// Sync policies: what one replica does at the exchanges of local-update
// training (#13). A policy is plain code (no CAF, no threads): the sync actor
// (actors/outer_sync.cpp) hands it the stage's values and the messages of the
// other replicas, and sends what it returns. A stage cuts its training state
// into fragments as the method's plan says and follows the method's schedule.
//
// A new method is one file and one registration: built in, a `register_NAME`
// in its own file and a line in sync_builtin.def; from a plugin, a call of
// register_sync_method (examples/plugin/periodic_average.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph/local_update_spec.hpp"
#include "schedulers/routing/routing_policy.hpp"
#include "schedulers/sync/method_settings.hpp"
#include "schedulers/sync/quantize.hpp"
#include "schedulers/sync/sync_state.hpp"
#include "schedulers/sync/sync_toy.hpp"

namespace troupe::sched {

/// Values travel in rows of this many, each with its own scale when quantized.
constexpr std::int64_t sync_row_values = 1024;

/// What a fragment holds: a run of the stage's parameters, or one of its
/// AdamW moments (DES-LOC averages them on their own periods).
enum class fragment_content { params, exp_avg, exp_avg_sq };

/// One fragment of a stage's state: `content`, and for parameters piece
/// `piece` of `pieces` contiguous runs of the stage's tensors of about equal size.
struct fragment_plan {
  fragment_content content = fragment_content::params;
  int piece = 0, pieces = 1;
};

/// What a replica does with one fragment after an inner step.
struct fragment_event {
  enum class kind { prepare, perform } what;
  int fragment = 0;
};

/// When each fragment is exchanged. The stage keeps one (to know when to wait
/// for values); the events are the same on every replica.
class sync_schedule {
public:
  virtual ~sync_schedule() = default;
  /// The events due after the inner step just taken, prepares before performs.
  virtual std::vector<fragment_event> after_inner_step() = 0;
};

/// One message of an exchange: to replica `to`, in round `round`, about piece
/// `piece` (a chunk of the fragment, where the policy cuts it), values as they travel.
struct sync_send {
  int to = 0;
  int round = 0;
  int piece = 0;
  quantized_rows payload;
  int fragment = -1; ///< whose exchange: -1, the fragment of the call (set by lose, which answers for all)
};

/// What a policy is made from.
struct sync_setup {
  local_update_spec spec;
  int replica = 0, replicas = 1;
  std::uint64_t seed = 0; ///< the graph's data.seed (NoLoCo's groups)
  /// Each fragment's values at the start (empty for moments: they start at zero).
  std::vector<std::vector<float>> start;
};

/// One replica's side of the exchanges of one stage position. Messages of an
/// exchange reach it only after it prepared that exchange (the actor keeps
/// earlier ones); every replica runs the same code on its own values.
class sync_policy {
public:
  virtual ~sync_policy() = default;
  /// The stage's values of fragment `f` after inner step `step`: what to send.
  virtual std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) = 0;
  /// A message of fragment `f`'s exchange (the one under way, or the last one
  /// applied: members that learn of a loss late still need it) from replica
  /// `from`: what to send on.
  virtual std::vector<sync_send> receive(int f, int from, int round, int piece, quantized_rows part) = 0;
  /// Whether fragment `f`'s exchange has everything it needs to be applied.
  virtual bool ready(int f) const = 0;
  /// Applies fragment `f`'s exchange: `local` becomes the values the stage goes on with.
  virtual void perform(int f, std::span<float> local) = 0;
  /// Outer steps applied so far.
  virtual long exchanges() const = 0;
  /// Replica `r` left the run (elastic local-update training): exchanges under
  /// way stop waiting for it and later ones leave it out. What to send (parts
  /// that now go to another member). By default a method cannot go on without
  /// every replica, and says so.
  virtual std::vector<sync_send> lose(int r);
  /// Replica `r`, lost before, is back with a live replica's state (#26): the
  /// exchanges this replica prepares after more than `after` inner steps
  /// include it again; those prepared after `after` steps or fewer (some may
  /// still be under way) do not. By default a method cannot take a replica
  /// back, and says so (sync_method::rejoins tells ahead).
  virtual void rejoin(int r, std::int64_t after);

  /// Its whole state for a checkpoint (#25 item 4), taken between inner steps
  /// once every perform due so far is applied: what it keeps across exchanges
  /// (saved globals, outer momentum, error feedback, counts) and, for an
  /// exchange prepared and not yet performed (Streaming DiLoCo's overlap τ),
  /// what this replica put into it. Replicas lost so far are not saved: a
  /// resumed run starts with every replica.
  virtual sync_state save() const = 0;
  /// Takes up a state save() gave, on a policy just made for the same graph
  /// (its start values give way to the saved ones). Every replica resumes from
  /// the same step, so exchanges that were under way start again: what to send
  /// for them, each with its `fragment`. Throws std::invalid_argument saying
  /// what does not fit.
  virtual std::vector<sync_send> restore(const sync_state& s) = 0;
};

/// A local-update method: how a stage cuts its state, when fragments are
/// exchanged, the policy that exchanges them, and the `local_update:` keys it
/// reads (a key it does not register is refused at its position).
struct sync_method {
  std::string summary;
  std::function<std::vector<fragment_plan>(const local_update_spec&)> fragments;
  std::function<std::unique_ptr<sync_schedule>(const local_update_spec&)> schedule;
  std::function<std::unique_ptr<sync_policy>(const sync_setup&)> make;
  method_settings settings;
  /// How microbatches travel when the method sends them across replicas
  /// (local_update_spec::routes_across_replicas, set by its settings); null
  /// when each replica keeps its own chain.
  routing_factory routing = nullptr;
  /// `troupe sync`'s run of the method on its toy model; null: no toy run.
  std::function<sync_sim_result(const sync_sim_config&)> toy = nullptr;
  /// Whether its policy takes a lost replica back (sync_policy::rejoin): a
  /// launch restarts a lost node's process and the replica rejoins (#26).
  bool rejoins = false;
  /// The sync_state values each replica keeps for itself (SparseLoCo's error
  /// feedback): a rejoining replica starts them at zero instead of taking the
  /// donor's (forget_own).
  std::vector<std::string> own = {};
};

/// A rejoining replica's state from a live donor (#26): the values that are
/// the donor's own (sync_method::own) become zeros of the same size.
void forget_own(const sync_method& method, sync_state& state);

/// What a built-in method's `register_NAME` (sync_builtin.def) adds itself with.
using sync_registrar = std::function<void(std::string, sync_method)>;

/// Adds (or replaces) a method under `name` (local_update.algorithm); plugins call
/// this when loaded. Thread-safe.
void register_sync_method(std::string name, sync_method method);
/// The method registered as `name`, or null.
const sync_method* find_sync_method(std::string_view name);
/// Registered names: the built-in ones, then plugins' in registration order.
std::vector<std::string> sync_method_names();

/// Fragments of the stage's parameters only, `pieces` of them.
std::vector<fragment_plan> param_fragments(int pieces = 1);
/// The piece of `pieces` that a stage tensor belongs to, `before` values of
/// the stage's `total` coming ahead of it: runs of about equal size.
int piece_of(std::int64_t before, std::int64_t total, int pieces);
/// How many values each fragment of `plan` starts with on a stage whose
/// tensors hold `tensors` values each, in order (moments start empty).
std::vector<std::size_t> fragment_sizes(const std::vector<fragment_plan>& plan,
                                        const std::vector<std::int64_t>& tensors);
/// Performs `method`'s schedule has the stage make in its first `steps` inner steps.
long performs_through(const sync_method& method, const local_update_spec& spec, std::int64_t steps);
/// The first step count in [from, end) after which no exchange of `method` is
/// under way (each one prepared is performed): where a replica can rejoin with
/// a live one's state (#26). -1 when there is none.
std::int64_t first_quiet_step(const sync_method& method, const local_update_spec& spec, std::int64_t from,
                              std::int64_t end);

/// Every fragment exchanged every `every` inner steps, all at once (prepare and perform).
std::unique_ptr<sync_schedule> periodic_schedule(std::vector<int> every);

/// The mean of one fragment over `members` (replica ids, ascending) by a direct
/// reduce-scatter and all-gather: the values are cut into one chunk per member
/// at row boundaries; each member sends its part of chunk j to chunk j's owner,
/// member j (round 0, piece j); the owner averages the chunk in f32 in member
/// order, encodes it and sends it to every other member (round 1), keeping the
/// decoded form itself, so all members end with the same values. Each member
/// sends 2(n−1)/n of the fragment, as a ring all-reduce does, in two rounds.
///
/// A member that leaves (lose) passes its chunks to the lowest member still
/// here; every member sends that owner its part of them again, and owners stop
/// waiting for the lost member's parts. Survivors agree bit for bit whenever
/// they learn of the loss: a member that already had the lost owner's mean of a
/// chunk reports it to the new owner ahead of its part, and the new owner sends
/// that mean on rather than averaging again, so a mean that reached any survivor
/// (who may have applied it) is every survivor's; messages from a member known
/// lost are dropped. The exchange stays answerable after take(), for members
/// that learn of a loss later than this one.
///
/// With `sum` the owners add the parts instead of averaging them (DDP's
/// gradient buckets, schedulers/sync/bucket_exchange.hpp); all else is the same.
class mean_exchange {
public:
  mean_exchange(std::vector<int> members, int self, wire_format format, std::int64_t row, bool sum = false);
  /// This member's values: round 0's parts to their owners.
  std::vector<sync_send> start(std::span<const float> values);
  std::vector<sync_send> receive(int from, int round, int piece, quantized_rows part);
  /// Member `replica` is gone: what to send again, and means now complete.
  std::vector<sync_send> lose(int replica);
  bool done() const noexcept;
  bool taken() const noexcept { return taken_; }
  /// The mean, once done() (once; the exchange still answers afterwards).
  std::vector<float> take();

private:
  std::size_t index_of(int replica) const;
  std::size_t owner(std::size_t chunk) const;
  std::pair<std::int64_t, std::int64_t> chunk(std::size_t j) const;
  /// Averages each chunk this member owns whose living members' parts are all in.
  std::vector<sync_send> reduce_ready();

  std::vector<int> members_;
  std::size_t self_;
  wire_format format_;
  std::int64_t row_, values_ = -1;
  std::vector<bool> alive_;
  std::vector<quantized_rows> own_;                               ///< this member's part of each chunk
  std::vector<std::vector<std::optional<quantized_rows>>> parts_; ///< [chunk][member]: parts for their owner
  std::vector<bool> reduced_;                       ///< chunks whose mean this member sent out as their owner
  std::vector<std::optional<quantized_rows>> held_; ///< [chunk]: its mean, once here (filled into mean_)
  std::vector<float> mean_;
  bool taken_ = false;
  bool sum_ = false;
};

} // namespace troupe::sched
