// The loader's routing: which policy routes a graph's microbatches (the
// pipeline's, the local-update method's, SkipPipe's plan), the stages it routes
// over, and the checks that its routes can run (a channel for every hop).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/graph/graph_spec.hpp"
#include "schedulers/routing/routing_policy.hpp"

namespace troupe {

/// The local-update method sends microbatches across replicas (a property its
/// settings set, #13): its own routing (sync_method::routing) takes them.
bool method_routes_across(const graph_spec& g);

/// SkipPipe's planned paths, as routing_of names them.
inline constexpr const char* skippipe_routing = "skip";

/// The routing policy the loader runs: the pipeline's, the local-update
/// method's (not a pipeline.routing choice) or SkipPipe's planned paths (`skip:`).
std::string routing_of(const graph_spec& g);
sched::expected<sched::routing_ptr> make_loader_routing(const std::string& name, const sched::routing_params& p);

/// The stages a router routes over: every actor that holds layers.
sched::routing_params routing_params_of(const graph_spec& g);

/// Checks the routing of `loader`'s graph: a known policy that accepts its
/// paths, and a channel for every hop (from the loader to each route's first
/// and last stage, and between consecutive stages), over the first steps'
/// routes. What is wrong, or nullopt.
std::optional<std::string> check_routes(const graph_spec& g, const actor_spec& loader);

/// A `skip:` graph that runs (graph_spec::skip_runs): its placement puts
/// data_parallel.replicas nodes on each position (replica i on the i-th), and its
/// plan can be made; false (with the reason in `out`) otherwise.
bool check_skip_run(const graph_spec& g, diagnostics& out);

} // namespace troupe
