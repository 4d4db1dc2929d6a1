// The actor-type registry, keyed by the YAML `type:` string: its factories
// spawn a graph's actors and its roles tell runtime/ how to treat them; and the
// section-expander registry, keyed by shorthand section name. The generic
// template is runtime/named_registry.hpp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include "runtime/graph/graph_loader.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/actor/named_registry.hpp"

namespace troupe {

/// What an actor factory gets: the actor system, its own entry, the whole
/// graph, and the runner it reports `done` / `failed` to (see runtime/actor/messages.hpp).
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

/// An actor type: how to spawn it, what the loader should accept and check for
/// its entries (its extra keys) and its role (see actor_type_info, actor_role).
struct actor_type {
  actor_factory spawn;
  actor_type_info info;
};

/// The process-wide actor-type registry (one copy: libraries are shared).
named_registry<actor_type>& actor_registry();

/// Registers an actor type; false when `name` is taken. The one-line form a
/// new actor file ends with: `register_actor_type("my_type", {spawn_my_type, {}}, "...")`.
bool register_actor_type(std::string name, actor_type t, std::string summary = {});

/// The process-wide registry of shorthand expanders, keyed by section name.
named_registry<section_expander>& section_expander_registry();

/// Registers the expander of the shorthand section `section` (one the loader
/// parses, such as `pipeline`); false when it already has one.
bool register_section_expander(std::string section, section_expander e, std::string summary = {});

/// The vocabulary for the loader: every registered actor type and section
/// expander, and the built-in schedules plus `extra_schedules` (the schedulers
/// module's policy registry names).
graph_vocabulary make_vocabulary(const std::vector<std::string>& extra_schedules = {});

} // namespace troupe
