// The `cluster:` section and where each actor runs: parsing, placement and
// its checks, and the per-channel emulated link (`bandwidth:`, `latency:`).
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe {

namespace {

const std::vector<std::string> cluster_keys{"launcher", "nodes",         "hosts",      "address",
                                            "port",     "transport",     "token_file", "pin",
                                            "restart",  "restart_delay", "elastic",    "batch_on_loss"};
const std::vector<std::string> launchers{"local", "ssh", "slurm"};
const std::vector<std::string> transports{"auto", "tcp", "ucx"};
const std::vector<std::string> batch_on_loss_choices{"keep", "shrink"};

/// `node: 3` (or "3") as an index; nullopt when it is not a whole number.
std::optional<int> node_index(const std::string& s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size())
    return std::nullopt;
  return v;
}

} // namespace

int graph_spec::node_of(const actor_spec& a) const {
  if (!a.node.empty() && cluster.present)
    return node_index(a.node).value_or(0);
  int stages = 0, first = -1;
  for (const auto& x : actors)
    if (x.role.holds_layers) {
      ++stages;
      if (x.rank == 0 && first < 0)
        first = static_cast<int>(&x - actors.data());
    }
  int nodes = std::max(cluster.nodes, 1);
  // Replicas' positions go one replica after another (r0s0 r0s1 r1s0 r1s1 on two
  // nodes: a replica per node); `stages` counts every replica's.
  int per_replica = stages / std::max(data_parallel.replicas, 1);
  if (a.role.placement == actor_placement::by_position && a.rank >= 0 && stages > 0)
    return (a.replica * per_replica + a.rank) * nodes / std::max(stages, nodes);
  if (a.role.placement == actor_placement::with_stage)
    if (auto s = a.params.find("stage"); s != a.params.end() && s->second.IsScalar())
      if (const auto* holder = find_actor(s->second.Scalar()); holder && holder != &a)
        return node_of(*holder);
  if (a.role.placement == actor_placement::with_first_stage && first >= 0 &&
      &a != &actors[static_cast<std::size_t>(first)])
    return node_of(actors[static_cast<std::size_t>(first)]);
  return 0;
}

bool graph_spec::keeps_batch_on_loss() const noexcept {
  // A table replays a fixed set of microbatches a step; other routes are their policy's to give.
  // least_loaded's first hops are the replicas' chains, so the loader can deal a lost one's to the others.
  return cluster.batch_on_loss == "keep" && pipeline.routing == "chain" && pipeline.schedule != "table" &&
         !skip_runs() && (!routes_across_replicas() || elastic_least_loaded());
}

bool graph_spec::elastic_local_update() const noexcept {
  // Replica groups sync every step inside: a group that loses a replica cannot go on. Routes
  // across replicas (NoLoCo's random ones) send every replica's microbatches through the others.
  return cluster.present && cluster.elastic && local_update.present && data_parallel.replicas > 1 &&
         sync_group_size() == 1 && !local_update.routes_across_replicas;
}

bool graph_spec::elastic_ddp() const noexcept {
  return cluster.present && cluster.elastic && data_parallel.replicas > 1 && !local_update.present &&
         (!routes_across_replicas() || elastic_least_loaded()) && !skip_runs();
}

bool graph_spec::elastic_least_loaded() const noexcept {
  // One chunk a stage: a later chunk retraces the replica that ran the earlier one, which may be gone.
  return cluster.present && cluster.elastic && data_parallel.replicas > 1 && !local_update.present &&
         data_parallel.route == "least_loaded" && pipeline.virtual_stages == 1;
}

std::string cluster_yaml(const cluster_spec& c) {
  if (!c.present)
    return {};
  std::string out = fmt::format("cluster: {{launcher: {}, nodes: {}", c.launcher, c.nodes);
  if (!c.hosts.empty())
    out += fmt::format(", hosts: [{}]", fmt::join(c.hosts, ", "));
  out += fmt::format(", address: {}, port: {}, transport: {}", c.address, c.port, c.transport);
  if (!c.token_file.empty())
    out += fmt::format(", token_file: {}", c.token_file);
  if (c.pin)
    out += ", pin: true";
  if (c.restart > 0)
    out += fmt::format(", restart: {}", c.restart);
  if (c.restart_delay > 0)
    out += fmt::format(", restart_delay: {}", c.restart_delay);
  if (!c.elastic)
    out += ", elastic: false";
  if (c.batch_on_loss != "keep")
    out += fmt::format(", batch_on_loss: {}", c.batch_on_loss);
  return out + "}\n";
}

namespace detail {

void parse_cluster(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& c = pg.graph.cluster;
  c.present = true;
  pg.cluster_node.reset(n);
  if (!r.check_map(n, "cluster", cluster_keys))
    return;
  auto one_of = [&](const char* key, std::string& out, const std::vector<std::string>& known) {
    if (r.get_string(n, "cluster", key, out) && std::find(known.begin(), known.end(), out) == known.end())
      r.error(n[key], fmt::format("cluster.{}", key), fmt::format("unknown {} '{}' {}", key, out, choices(out, known)));
  };
  one_of("launcher", c.launcher, launchers);
  one_of("transport", c.transport, transports);
  one_of("batch_on_loss", c.batch_on_loss, batch_on_loss_choices);
  r.get_int(n, "cluster", "nodes", c.nodes, 1, limits::max_nodes);
  r.get_string(n, "cluster", "address", c.address);
  r.get_int(n, "cluster", "port", c.port, 0, 65535);
  if (r.get_string(n, "cluster", "token_file", c.token_file) && !c.token_file.empty())
    c.token_path = pg.resolve(c.token_file);
  if (auto h = n["hosts"]) {
    if (!h.IsSequence())
      r.error(h, "cluster.hosts", fmt::format("expected a list of host names, got {}", describe(h)));
    else
      for (std::size_t i = 0; i < h.size(); ++i)
        if (auto s = r.as_string(h[i], index_path("cluster.hosts", i)))
          c.hosts.push_back(*s);
  }
  r.get_bool(n, "cluster", "pin", c.pin);
  if (c.pin && c.launcher != "local")
    r.error(
      n["pin"], "cluster.pin",
      fmt::format("pinning nodes to CPUs is for the local launcher (this one is '{}'; {} places its own processes)",
                  c.launcher, c.launcher == "slurm" ? "srun --cpu-bind" : "each host"));
  r.get_int(n, "cluster", "restart", c.restart, 0, 1000);
  r.get_double(n, "cluster", "restart_delay", c.restart_delay, 0, 3600);
  r.get_bool(n, "cluster", "elastic", c.elastic);
  if (c.launcher == "ssh" && c.hosts.empty())
    r.error(n, "cluster", "the ssh launcher needs `hosts:`, a list of host names to start the nodes on");
}

void parse_link(const YAML::Node& c, const std::string& path, channel_spec& out, graph_reader& r) {
  if (auto v = child(c, "bandwidth"))
    read_quantity(v, join_path(path, "bandwidth"), out.bandwidth, net::parse_bandwidth, r);
  if (auto v = child(c, "latency"))
    read_quantity(v, join_path(path, "latency"), out.latency, net::parse_duration, r);
}

void check_cluster(parsed_graph& pg, graph_reader& r) {
  auto& g = pg.graph;
  if (!g.cluster.present) // one process: nothing to place (and node_of is O(actors) a call)
    return;
  // An elastic run takes a lost replica back live and needs no checkpoint for it; losing the loader's
  // node then stops the run (cmd_launch.cpp says why), as torchft's healing needs no checkpoint either.
  if (g.cluster.restart > 0 && (g.checkpoint.every <= 0 || g.checkpoint.dir.empty()) && !g.elastic_ddp() &&
      !g.elastic_local_update())
    r.error(child(pg.cluster_node, "restart"), "cluster.restart",
            fmt::format("restarting a run that lost a node resumes it from its latest checkpoint: give "
                        "`checkpoint: {{dir: DIR, every: N}}` (without checkpoints each of the {} restart{} would "
                        "start over)",
                        g.cluster.restart, g.cluster.restart == 1 ? "" : "s"));
  int nodes = g.cluster.nodes;
  std::vector<int> used(static_cast<std::size_t>(nodes), 0);
  for (const auto& pa : pg.actors) {
    if (pa.spec.node.empty() || !g.cluster.present) // one process: `node:` has nothing to say
      continue;
    auto where = join_path(pa.path, "node");
    auto idx = node_index(pa.spec.node);
    if (!idx || *idx < 0 || *idx >= nodes)
      r.error(
        child(pa.node, "node"), where,
        fmt::format("node '{}' is not a node of this cluster: expected a number from 0 to {} (cluster.nodes is {})",
                    pa.spec.node, nodes - 1, nodes));
  }
  for (const auto& a : g.actors)
    if (auto i = g.node_of(a); i >= 0 && i < nodes)
      ++used[static_cast<std::size_t>(i)];
  for (int i = 0; i < nodes; ++i)
    if (used[static_cast<std::size_t>(i)] == 0 && g.cluster.present) {
      r.error(
        child(pg.cluster_node, "nodes") ? child(pg.cluster_node, "nodes") : pg.cluster_node, "cluster.nodes",
        fmt::format("node {} of {} would run no actor: lower cluster.nodes or place an actor there with `node: {}`", i,
                    nodes, i));
      break;
    }
}

} // namespace detail

} // namespace troupe
