// The actor-type registry, keyed by the YAML `type:` string: its factories
// spawn a graph's actors. The generic template is runtime/named_registry.hpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "runtime/graph_loader.hpp"
#include "runtime/graph_spec.hpp"
#include "runtime/named_registry.hpp"

namespace troupe {

/// What an actor factory gets: the actor system, its own entry, the whole
/// graph, and the runner it reports `done` / `failed` to (see runtime/messages.hpp).
struct spawn_context {
  caf::actor_system& system;
  const actor_spec& spec;
  const graph_spec& graph;
  caf::actor runner;
};

/// Spawns one actor for an `actors:` entry. Errors are values (make_error).
/// Give a function-based actor at least one argument besides `self`: CAF 0.17
/// spawning a no-argument function trips UBSan (a null tuple in init_fun_factory).
using actor_factory = std::function<caf::expected<caf::actor>(spawn_context&)>;

/// An actor type: how to spawn it and what the loader should accept and check
/// for its entries (its extra keys; see actor_type_info).
struct actor_type {
  actor_factory spawn;
  actor_type_info info;
};

/// The process-wide actor-type registry (one copy: libraries are shared).
named_registry<actor_type>& actor_registry();

/// Registers an actor type; false when `name` is taken. The one-line form a
/// new actor file ends with: `register_actor_type("my_type", {spawn_my_type, {}}, "...")`.
bool register_actor_type(std::string name, actor_type t, std::string summary = {});

/// The vocabulary for the loader: built-in names plus every registered actor
/// type, and the built-in schedules plus `extra_schedules` (the schedulers
/// module's policy registry names).
graph_vocabulary make_vocabulary(const std::vector<std::string>& extra_schedules = {});

} // namespace troupe
