// The graph file's `local_update:` section as typed values: which local-update
// method replaces the every-step all-reduce, and its settings (#13). The keys a
// method reads are its own (local_update_method_info), registered with it.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/graph/option_spec.hpp"

namespace troupe {

/// The outer optimizer of DiLoCo-style methods: torch's SGD over the averaged
/// pseudo-gradient. Defaults are the DiLoCo paper's (Douillard et al. 2023,
/// arXiv 2311.08105, §3: lr 0.7, Nesterov momentum 0.9).
struct outer_optimizer_spec {
  double lr = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

/// `local_update: {algorithm, replica_groups, ...the method's own keys}`. Each
/// replica takes `sync_every` inner steps with its own AdamW before it exchanges anything.
struct local_update_spec {
  bool present = false;
  /// A registered sync method, built in or a plugin's.
  std::string algorithm = "diloco";
  /// The method's settings as the graph gives them: each key it registered
  /// (`periods.params` for nested ones), written or its default, as text.
  std::map<std::string, std::string> options;
  /// H inner steps between exchanges, for methods that take `sync_every`.
  int sync_every = 500;
  outer_optimizer_spec outer;
  /// none | bf16 | int8 | fp8: how the outer exchange travels (per-row scales,
  /// reduced in f32).
  std::string quantize = "none";
  /// The method sends each microbatch's activation to a replica of the next
  /// stage other than its own (NoLoCo's random routes; set by its configure,
  /// its sync_method::routing says how): stages take channels to every replica
  /// of the next position, and a lost replica stops the run.
  bool routes_across_replicas = false;
  /// G replica groups (torchft's DiLoCo over HSDP): the data_parallel.replicas
  /// are cut into G groups of replicas / G consecutive replicas that sync every
  /// step inside (a DDP ring, or ZeRO's shards with data_parallel.zero), and the
  /// groups run the method between them. 0: one group per replica.
  int replica_groups = 0;
};

/// A rule `l` breaks: the key it is about (`delay`, `outer.lr`; empty: the
/// whole section) and why.
struct local_update_problem {
  std::string key;
  std::string message;
};

/// What of the rest of the graph a method's rules may look at.
struct local_update_context {
  int replicas = 1; ///< data_parallel.replicas
  int zero = 0;     ///< data_parallel.zero
};

/// What the graph loader knows of a local-update method: the keys it reads and
/// its rules. Each method registers its own (schedulers/sync/sync_policy.hpp).
struct local_update_method_info {
  std::string name;
  std::string summary;
  /// Every key the method reads; a key of another method is refused at its position.
  std::vector<option_spec> options;
  /// Sets the spec's typed settings from `options` (which hold every key's value).
  std::function<void(local_update_spec&)> configure;
  /// The rules between values, for the graph file and `troupe sync` alike; empty when sound.
  std::function<std::vector<local_update_problem>(const local_update_spec&, const local_update_context&)> problems;
};

/// The methods `local_update.algorithm` accepts, in registration order, from the
/// installed source (actors/builtin.cpp installs the sync-method registry, so a
/// plugin's method is accepted once it is loaded). Empty until one is installed.
std::vector<local_update_method_info> local_update_methods();
void set_local_update_methods(std::function<std::vector<local_update_method_info>()> source);

/// Gives each key of `options` missing from `spec.options` its default, reads
/// the values every method shares the storage of (sync_every, outer.*,
/// quantize) from the options, and calls `configure` (when set): what the
/// graph loader does once a section's keys are read. Inline: the sync methods'
/// library (schedulers) uses it without linking the graph loader.
inline void settle_local_update(local_update_spec& spec, const std::vector<option_spec>& options,
                                const std::function<void(local_update_spec&)>& configure) {
  for (const auto& o : options)
    if (!o.fallback.empty())
      spec.options.emplace(o.key, o.fallback); // keeps what was written
  auto text = [&](const char* key) -> const std::string* {
    auto it = spec.options.find(key);
    return it == spec.options.end() ? nullptr : &it->second;
  };
  if (auto* v = text("sync_every"))
    spec.sync_every = std::stoi(*v);
  if (auto* v = text("outer.lr"))
    spec.outer.lr = std::stod(*v);
  if (auto* v = text("outer.momentum"))
    spec.outer.momentum = std::stod(*v);
  if (auto* v = text("outer.nesterov"))
    spec.outer.nesterov = *v == "true";
  if (auto* v = text("quantize"))
    spec.quantize = *v;
  if (configure)
    configure(spec);
}

} // namespace troupe
