// The contract between a pipeline-stage actor and its scheduling policy:
// "given what is queued here, what do I run next?", and the registry of policies by name.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schedulers/action.hpp"
#include "schedulers/expected.hpp"
#include "schedulers/stage_queue.hpp"

namespace troupe::sched {

/// Everything a policy factory may use. One policy object serves one rank.
struct policy_params {
  int rank = 0;
  int ranks = 1;         ///< p: pipeline ranks (stage actors)
  int microbatches = 1;  ///< m: microbatches per step
  int chunks = 1;        ///< v: model chunks per rank (interleaved schedules)
  /// How many actions past the preferred one a policy may look for ready work
  /// when the preferred action is not ready; -1 keeps the policy's default, 0 replays strictly.
  int look_ahead = -1;
  /// For `table`: every rank's action list (row r is rank r); validated by make_policy.
  std::vector<std::vector<action>> table;
  /// For `table` when `table` is empty: a text/CSV file with one line per rank.
  std::string table_file;
  /// Free-form settings for plugin policies (from the graph file's `policy:` section).
  std::map<std::string, std::string> options;
};

/// A stage policy: asked by the stage actor, whenever the rank is idle, what to run next.
///
/// The actor calls `next(queue)` after every message and completion while it
/// has nothing running; a returned action must be started at once (it is ready
/// in `queue`); std::nullopt means wait for the next message. Policies read the
/// queue only; they notice a new step through `queue.step()`.
class stage_policy {
public:
  virtual ~stage_policy() = default;
  /// The registered name, e.g. "1f1b".
  virtual std::string_view name() const = 0;
  /// True when the policy splits backward into I and W (zb_h1); otherwise it runs B.
  virtual bool splits_backward() const { return false; }
  /// The most activations (queue.in_flight(), all chunks) the policy ever holds; 0 means unbounded.
  virtual int in_flight_limit() const = 0;
  /// The action to run now, or std::nullopt to wait.
  virtual std::optional<action> next(const stage_queue& queue) = 0;
  /// After next() returned std::nullopt: a time (on queue.now()'s clock) at
  /// which to ask again even if no message arrives, or std::nullopt to wait for
  /// a message only. An actor implements it with a delayed message to itself.
  virtual std::optional<double> wake_at(const stage_queue& queue) const { return std::nullopt; }
  /// This rank's order under equal costs and no latency (the schedule as
  /// published), when the policy has one; empty otherwise.
  virtual std::vector<action> canonical_order() const { return {}; }
};

using policy_ptr = std::unique_ptr<stage_policy>;
using policy_factory = std::function<expected<policy_ptr>(const policy_params&)>;

/// Makes the policy registered as `name` for one rank. Unknown names fail with
/// the list of valid ones; bad parameters fail saying which and why.
expected<policy_ptr> make_policy(std::string_view name, const policy_params& params);

/// Adds (or replaces) a policy under `name`; plugins call this when loaded. Thread-safe.
void register_policy(std::string name, std::string summary, policy_factory factory);

/// Registered policy names, sorted: gpipe, 1f1b, interleaved_1f1b, zb_h1, table and any plugins.
std::vector<std::string> policy_names();

/// One-line description of a registered policy ("" if unknown).
std::string policy_summary(std::string_view name);

} // namespace troupe::sched
