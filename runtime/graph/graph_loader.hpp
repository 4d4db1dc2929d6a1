// Loading a graph file: YAML -> typed graph_spec, with `--set` overrides,
// shorthand expansion and whole-file validation (every error collected).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/graph/option_spec.hpp"

namespace troupe {

/// What the loader knows about one actor type: the extra keys its entries may
/// carry (beyond name, type, node, layers), an optional check of them, and its
/// role (the rules runtime/ applies to its entries; see actor_role).
struct actor_type_info {
  std::vector<std::string> keys;
  /// Adds diagnostics for a bad `spec.params` entry; called only on a graph that
  /// is otherwise valid. Use `spec.params.at(k).Mark()` for positions.
  std::function<void(const actor_spec& spec, const graph_spec& graph, diagnostics& out)> check;
  actor_role role;
};

/// What a section expander works on: the graph with its sections read and no
/// actors yet, where the section is, and a way to report an error at one of its keys.
struct section_expansion {
  graph_spec& graph;
  source_pos where; ///< the section (the file's start when it is absent): expanded entries point here
  /// Reports `message` at `SECTION.key`, positioned at that key (at the section when the key is absent).
  std::function<void(std::string_view key, std::string message)> error;
};

/// Turns a shorthand section (`pipeline:`) into actors and channels appended to
/// the graph; explicit `actors:` / `channels:` entries are merged over them by name.
struct section_expander {
  std::function<void(section_expansion&)> expand;
  /// Also expand a graph that has neither this section nor `actors:` (the default graph).
  bool by_default = false;
};

/// The names a graph may use and what they mean. The loader does not see
/// actors/ or schedulers/: make_vocabulary (runtime/actor/registry.hpp) fills this
/// from the registries, after the graph's plugins registered theirs.
struct graph_vocabulary {
  std::map<std::string, actor_type_info> actor_types;
  /// Section name -> its expander, run in this order.
  std::vector<std::pair<std::string, section_expander>> expanders;
  std::vector<std::string> schedules;
  /// The option keys each schedule reads (`pipeline: {policy: {...}}`, a stage's `policy:`).
  std::map<std::string, std::vector<std::string>> schedule_options;
  /// Checks one option value of a schedule: what a value must be when it is
  /// not acceptable ("an integer of at least 1"), std::nullopt when it is.
  std::function<std::optional<std::string>(const std::string& schedule, const std::string& key,
                                           const std::string& value)>
    check_schedule_option;
  /// Whether a schedule runs `chunks` model chunks per stage on `stages`
  /// stages with `microbatches` per step (0: not asked): std::nullopt when it
  /// does, else why not. Unset: only interleaved_1f1b and table run several.
  std::function<std::optional<std::string>(const std::string& schedule, int stages, int chunks, int microbatches)>
    check_schedule_shape;
  /// The settings each routing policy reads (`pipeline.routing: {policy: NAME, KEY: VALUE}`).
  std::map<std::string, std::vector<option_spec>> routing_options;
  /// The `skip.planner` choices in registration order, with the settings each
  /// reads under `skip:` beyond the shared keys; empty: any name (checked when planned).
  std::vector<std::pair<std::string, std::vector<option_spec>>> planners;
  /// The device presets `sim.device` and a `devices:` entry's `base` may name
  /// (schedulers/sim/cost_model.hpp); empty: any name is accepted.
  std::vector<std::string> sim_devices;

  /// Only what runtime/ itself knows: the built-in schedule names, no actor types.
  static graph_vocabulary builtin();
};

/// How to load a graph.
struct load_options {
  /// `key.path=value` overrides, applied before validation; values are YAML scalars
  /// (or flow lists such as `[0, 2]`).
  std::vector<std::string> overrides;
  /// Called after the graph's plugins are loaded; defaults to make_vocabulary()
  /// (the registered actor types and expanders, the built-in schedules).
  std::function<graph_vocabulary()> vocabulary;
  /// dlopen the graph's `plugins:` (off: only check that the files exist).
  bool load_plugins = true;
  /// Resolve `corpus: kjv` and check that the corpus file exists.
  bool check_corpus = true;
};

/// A loaded graph, or every reason it was rejected.
struct load_result {
  std::optional<graph_spec> graph; ///< set exactly when `errors` is empty
  diagnostics errors;
  bool ok() const noexcept { return graph.has_value(); }
};

/// Reads, overrides, expands and validates the graph file at `file`.
load_result load_graph(const std::filesystem::path& file, const load_options& opts = {});

/// The same for text already in memory; `file` names it in diagnostics and its
/// folder resolves relative paths.
load_result load_graph_text(std::string_view text, const std::filesystem::path& file, const load_options& opts = {});

/// Where `corpus: kjv` lives: `$TROUPE_DATA/kjv.txt` when TROUPE_DATA is set,
/// else `data/kjv.txt` under the repository root (found upward from the current
/// folder and from the executable).
std::filesystem::path default_corpus_path();

} // namespace troupe
