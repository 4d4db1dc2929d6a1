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

#include "schedulers/policies/action.hpp"
#include "schedulers/expected.hpp"
#include "schedulers/policies/stage_queue.hpp"

namespace troupe::sched {

/// Everything a policy factory may use. One policy object serves one rank, for
/// every step: a policy never knows how many microbatches a step holds (the
/// router tells the stage per step, and the queue holds what came).
struct policy_params {
  int rank = 0;
  int ranks = 1;  ///< p: pipeline ranks (stage actors)
  int chunks = 1; ///< v: model chunks per rank (interleaved schedules)
  /// Microbatches per step when the caller knows them (a graph's check, the
  /// harness), for policies that need a least number (dualpipev); 0: unknown.
  int microbatches = 0;
  /// Routes are paths that skip and reorder stages (SkipPipe): a microbatch's
  /// hops left here depend on its own path, not on the rank.
  bool paths = false;
  /// Routes are chosen on the way across replicas (least_loaded): a rank's
  /// microbatches are any of the step's, and a microbatch's later chunks come
  /// back to the ranks that ran its first (stage_core::retrace).
  bool routed = false;
  /// For `table`: every rank's action list (row r is rank r); validated by make_policy.
  std::vector<std::vector<action>> table;
  /// For `table` when `table` is empty: a text/CSV file with one line per rank.
  std::string table_file;
  /// The policy's settings (the graph file's `policy:` keys), checked against
  /// the keys the policy registered (policy_options).
  std::map<std::string, std::string> options;
};

/// A setting a policy reads from policy_params::options.
struct policy_option {
  std::string key;
  std::string summary;  ///< what it does
  std::string expected; ///< what a value must be, e.g. "an integer of at least 1"
  /// Whether `value` is acceptable; null accepts any.
  std::function<bool(std::string_view value)> accepts;
};

/// An option whose value is an integer of at least `low`.
policy_option int_option(std::string key, std::string summary, int low);

/// Reads option `key` of `params` as an integer of at least `low`; `fallback`
/// when absent. Fails naming the policy, the key and what was expected.
expected<int> int_setting(std::string_view policy, const policy_params& params, const std::string& key, int low,
                          int fallback);

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
  /// True when the policy may return an F&B action (a forward fused with another
  /// microbatch's backward, as dualpipev does), which attention servers cannot run in pieces.
  virtual bool fuses_forward_backward() const { return false; }
  /// Where the rank's chunks sit along the pipeline: the graph's expansion lays
  /// the layers out so, and the queue names virtual stages so (chunk_placement).
  virtual chunk_placement placement() const { return chunk_placement::round_robin; }
  /// The most activations (queue.in_flight(), all chunks) the policy ever holds; 0 means unbounded.
  virtual int in_flight_limit() const = 0;
  /// The action to run now, or std::nullopt to wait.
  virtual std::optional<action> next(const stage_queue& queue) = 0;
  /// After next() returned std::nullopt: a time (on queue.now()'s clock) at
  /// which to ask again even if no message arrives, or std::nullopt to wait for
  /// a message only. An actor implements it with a delayed message to itself.
  virtual std::optional<double> wake_at(const stage_queue& queue) const { return std::nullopt; }
  /// The per-rank list the policy replays (`table`); empty for a rule policy,
  /// whose order emerges from what arrives.
  virtual std::vector<action> canonical_order() const { return {}; }
};

using policy_ptr = std::unique_ptr<stage_policy>;
using policy_factory = std::function<expected<policy_ptr>(const policy_params&)>;

/// Makes the policy registered as `name` for one rank. Unknown names fail with
/// the list of valid ones; bad parameters fail saying which and why.
expected<policy_ptr> make_policy(std::string_view name, const policy_params& params);

/// The chunk placement of policy `name` for `params`' shape (asked of the
/// policy made for rank 0); round-robin when it cannot be made.
chunk_placement policy_placement(std::string_view name, policy_params params);

/// Adds (or replaces) a policy under `name` with the options it reads; plugins
/// call this when loaded. Thread-safe.
void register_policy(std::string name, std::string summary, policy_factory factory,
                     std::vector<policy_option> options = {});

/// The options the policy registered as `name` reads (empty if unknown).
std::vector<policy_option> policy_options(std::string_view name);

/// Checks one option of policy `name`: the key must be one it registered and
/// the value acceptable. The error says what was expected and lists the keys.
expected<void> check_policy_option(std::string_view name, std::string_view key, std::string_view value);

/// Registered policy names, sorted: gpipe, 1f1b, interleaved_1f1b, zb_h1, table and any plugins.
std::vector<std::string> policy_names();

/// One-line description of a registered policy ("" if unknown).
std::string policy_summary(std::string_view name);

} // namespace troupe::sched
