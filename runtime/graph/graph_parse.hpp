// Internal to the graph loader: the stages between a YAML document and a
// validated graph_spec (parse sections, apply overrides, expand, validate).
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "runtime/graph/graph_loader.hpp"
#include "runtime/graph/graph_reader.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe::detail {

/// An `actors:` entry as written, with where its keys were.
struct parsed_actor {
  actor_spec spec;
  std::string path; ///< `actors[2]`
  bool has_type = false;
  YAML::Node node{YAML::NodeType::Undefined}, name_node{YAML::NodeType::Undefined},
    type_node{YAML::NodeType::Undefined}, layers_node{YAML::NodeType::Undefined},
    device_node{YAML::NodeType::Undefined};
};

/// A `channels:` entry as written.
struct parsed_channel {
  channel_spec spec;
  std::string path; ///< `channels[1]`
  YAML::Node from_node{YAML::NodeType::Undefined}, to_node{YAML::NodeType::Undefined};
};

/// The document after typed parsing, before expansion.
struct parsed_graph {
  graph_spec graph;
  YAML::Node root;
  bool has_actors = false;              ///< an `actors:` section is present
  std::vector<parsed_actor> actors;     ///< explicit entries, in file order
  std::vector<parsed_channel> channels; ///< explicit entries, in file order
  YAML::Node schedule_node{YAML::NodeType::Undefined}, table_node{YAML::NodeType::Undefined},
    policy_node{YAML::NodeType::Undefined}, corpus_node{YAML::NodeType::Undefined},
    pipeline_node{YAML::NodeType::Undefined}, cluster_node{YAML::NodeType::Undefined},
    sim_device_node{YAML::NodeType::Undefined},
    algorithm_node{YAML::NodeType::Undefined}, ///< local_update.algorithm: known once plugins are loaded
    local_update_node{YAML::NodeType::Undefined},
    skip_node{YAML::NodeType::Undefined}, ///< `skip:`: its planner's keys are checked against the vocabulary
    routing_node{
      YAML::NodeType::
        Undefined}; ///< `pipeline.routing` as a mapping: the policy's settings  ///< its keys are the method's: checked once plugins are loaded
  std::vector<YAML::Node> sim_base_nodes; ///< each `devices:` entry's `base` (or the entry)
  std::vector<YAML::Node> plugin_nodes;
  std::filesystem::path base_dir;                  ///< the graph file's folder
  bool duplicate_actors = false;                   ///< reported; layer coverage is then not checked
  YAML::Node data_node{YAML::NodeType::Undefined}; ///< the `data:` section: its source is read after plugins load
  bool data_conflict = false;                      ///< `data:` names two sources (reported); no file is checked

  /// A path written in the graph file (or a --set value): relative ones are
  /// relative to the graph file's folder, for every key that names a file.
  std::filesystem::path resolve(const std::string& written) const {
    std::filesystem::path p{written};
    return p.is_absolute() ? p : base_dir / p;
  }
};

/// Applies `key.path=value` overrides to `root`, registering their origins with `r`.
void apply_overrides(YAML::Node root, const std::vector<std::string>& overrides, graph_reader& r);

/// Reads the sections of `root` into `pg.graph` and the explicit entries.
void parse_sections(parsed_graph& pg, graph_reader& r);

/// The `data:` keys every source shares (runtime/graph/graph_data.cpp).
void parse_data(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// Its source kind and that kind's settings: once plugins have registered theirs.
void parse_data_source(parsed_graph& pg, graph_reader& r);
/// The data file: a readable regular file, then the kind's check of its contents.
void check_data(parsed_graph& pg, graph_reader& r);

/// The `cluster:` section (runtime/graph/graph_cluster.cpp).
void parse_cluster(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// A channel's `bandwidth:` and `latency:` (runtime/graph/graph_cluster.cpp).
void parse_link(const YAML::Node& c, const std::string& path, channel_spec& out, graph_reader& r);
/// Placement checks: `node:` keys within cluster.nodes, no idle node (runtime/graph/graph_cluster.cpp).
void check_cluster(parsed_graph& pg, graph_reader& r);

/// Checks names against the vocabulary: schedule, actor types, type keys (after expand).
void check_names(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);

/// Checks `pipeline.policy` and each stage's `policy:` against the schedule's
/// option keys and values (runtime/graph/graph_policy.cpp).
void check_policy_options(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);

/// Checks `pipeline.routing`'s settings against the ones the routing policy
/// registered, at their positions (runtime/graph/graph_policy.cpp).
void check_routing_options(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);
/// `skip.planner` is a registered planner, and each key of `skip:` is a shared
/// one or a setting of that planner, read at its position.
void check_skip_planner(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);

/// Reads `map[key]` as option `o` says (its type and range), reporting a bad
/// value at its position; stores the value's text at `out[o.key]`. False when
/// the value is present and wrong.
bool read_option(const YAML::Node& map, const std::string& path, std::string_view key, const option_spec& o,
                 std::map<std::string, std::string>& out, graph_reader& r);

/// Reads a `policy:` mapping of scalar options into `out`.
void parse_policy_options(const YAML::Node& n, const std::string& path, std::map<std::string, std::string>& out,
                          graph_reader& r);

/// Runs the vocabulary's section expanders and merges the explicit entries over what they made.
void expand(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);

/// Gives every actor its type's role, then the whole-graph checks: layer ranges,
/// devices, channel ends, placement, corpus and table files.
void validate(parsed_graph& pg, const graph_vocabulary& vocab, const load_options& opts, graph_reader& r);

/// Reads the `data_parallel:` section (runtime/graph/graph_data_parallel.cpp).
void parse_data_parallel(parsed_graph& pg, const YAML::Node& n, graph_reader& r);

/// Reads the `local_update:` section's own keys (runtime/graph/graph_local_update.cpp).
void parse_local_update(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// Checks `local_update.algorithm` and the method's keys against the keys it
/// registered, once plugins are loaded, and the rules between values.
void check_local_update(parsed_graph& pg, graph_reader& r);
/// The `local_update:` line of `troupe check`'s output; empty without the section.
std::string local_update_yaml(const local_update_spec& l);

/// Reads the `checkpoint:` section (runtime/graph/graph_checkpoint.cpp).
void parse_checkpoint(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// The `checkpoint:` line of `troupe check`'s output; empty without the section.
std::string checkpoint_yaml(const checkpoint_spec& c);

/// Reads the `sim:` and `devices:` sections (runtime/graph/graph_sim.cpp).
void parse_sim(parsed_graph& pg, const YAML::Node& sim, const YAML::Node& devices, graph_reader& r);
/// The `network:` section: locations, links, nodes (runtime/graph/graph_network.cpp).
void parse_network(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// The `skip:` section, checked against `pipeline:` and `network:` (parsed first).
void parse_skip(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// `attention:` (runtime/graph/graph_attention.cpp), after every section it depends on.
void parse_attention(parsed_graph& pg, const YAML::Node& n, graph_reader& r);
/// A channel's `network: [a, b]`: its emulated link is the network's link from node a
/// to node b (latency plus the per-hop overhead), unless `bandwidth:`/`latency:` say otherwise.
void parse_channel_network(const parsed_graph& pg, const YAML::Node& channel, const YAML::Node& nodes,
                           const std::string& path, channel_spec& out, graph_reader& r);
/// Checks `sim.device` and each device's `base` against the vocabulary's presets and `devices:`.
void check_sim(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r);

/// The top-level section names a graph file may use.
const std::vector<std::string>& section_names();

} // namespace troupe::detail
