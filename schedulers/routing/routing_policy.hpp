// Routing policies: "where does this microbatch go?" A router (the data loader
// by default) asks its policy for each microbatch's route when it makes the batch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/actor/route.hpp"
#include "runtime/graph/option_spec.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// A stage actor as a router sees it.
struct route_stage {
  int actor = 0; ///< index in the graph's actor list
  std::string name;
  std::vector<std::pair<int, int>> chunks; ///< layers [begin, end) of each model chunk
  int replica = 0;                         ///< its data-parallel replica (each holds the whole model)
};

/// Everything a routing-policy factory may use.
struct routing_params {
  std::vector<route_stage> stages; ///< every stage actor of the graph
  int layers = 0;                  ///< model.layers
  /// For `paths`: each path as actor names (`s2`, or `s2.1` for chunk 1 of s2).
  std::vector<std::vector<std::string>> paths;
  std::map<std::string, std::string> options; ///< free-form settings for plugin policies
  /// Data-parallel replicas: a step's microbatch k (0 .. replicas × microbatches - 1,
  /// the `microbatch` route() is given) belongs to replica k mod replicas.
  int replicas = 1;
};

/// Decides a microbatch's route. One object serves one router.
class routing_policy {
public:
  virtual ~routing_policy() = default;
  virtual std::string_view name() const = 0;
  /// The route of the `sequence`-th microbatch of the run (0, 1, ...), which is
  /// microbatch `microbatch` of step `step`.
  virtual route_t route(std::int64_t step, int microbatch, std::int64_t sequence) = 0;
  /// The route validation batches take: the run's first microbatch's unless the
  /// policy says otherwise (one whose first route may leave replica 0).
  virtual route_t eval_route() { return route(0, 0, 0); }
  /// Every route validation batches take, each pass reported on its own: the
  /// first is eval_route() (the model a run reports); SkipPipe adds a path of L
  /// stages (validation with fewer layers, #14).
  virtual std::vector<route_t> eval_routes() { return {eval_route()}; }
};

using routing_ptr = std::unique_ptr<routing_policy>;
using routing_factory = std::function<expected<routing_ptr>(const routing_params&)>;

/// The route every microbatch takes through the layers in order: each stage's
/// chunks sorted by first layer (a plain chain; interleaved chunks wrap around).
/// Fails when the chunks leave a gap or overlap. With replicas, `replica`'s own chain.
expected<route_t> layer_order_route(const routing_params& params, int replica = 0);

/// Every replica's layer_order_route, by replica (one when there are no replicas).
expected<std::vector<route_t>> replica_chains(const routing_params& params);

/// Checks that `r` can train: it starts with the embedding (a chunk beginning
/// at layer 0), ends with the head (a chunk ending at `layers`) and visits no
/// chunk twice. The message names the route by actor names.
expected<void> check_route(const route_t& r, const routing_params& params);

/// The route of hops named as `paths` names them (`s2`, or `s2.1` for chunk 1 of s2).
expected<route_t> parse_route(const routing_params& params, const std::vector<std::string>& names);

/// `r` by actor names, as `[s0 -> s2 -> s0.1]`, for messages.
std::string route_text(const routing_params& params, const route_t& r);

/// Makes the routing policy registered as `name`; unknown names fail listing the known ones.
expected<routing_ptr> make_routing(std::string_view name, const routing_params& params);

/// Adds (or replaces) a routing policy with the settings it reads from
/// `pipeline.routing: {policy: NAME, KEY: VALUE}` (routing_params::options);
/// plugins call this when loaded. Thread-safe.
void register_routing(std::string name, std::string summary, routing_factory factory,
                      std::vector<option_spec> options = {});
/// The settings the routing policy registered as `name` reads (empty if none or unknown).
std::vector<option_spec> routing_options(std::string_view name);

/// Registered routing-policy names: chain, paths, then any plugins in registration order.
std::vector<std::string> routing_names();

} // namespace troupe::sched
