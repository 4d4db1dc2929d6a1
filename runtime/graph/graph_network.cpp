// The graph file's `network:` section (locations and the links between them:
// inline, from a CSV file, or a preset) and `skip:` (SkipPipe's path rules and
// placement), with their checks against the pipeline.
#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"
#include "runtime/graph/network_presets.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> network_keys{"preset",          "csv",      "locations", "links",
                                            "within_location", "overhead", "nodes"};
const std::vector<std::string> link_keys{"between", "latency", "bandwidth"};
const std::vector<std::string> skip_keys{"path_length", "memory",  "max_per_stage", "swaps", "swap_distance",
                                         "max_jump",    "planner", "placement",     "seed"};
constexpr int max_network_nodes = 1 << 16;

void read_link(const YAML::Node& map, const std::string& path, network_link& out, graph_reader& r) {
  if (auto l = child(map, "latency"))
    read_quantity(l, join_path(path, "latency"), out.latency, net::parse_duration, r);
  if (auto b = child(map, "bandwidth"))
    read_quantity(b, join_path(path, "bandwidth"), out.bandwidth, net::parse_bandwidth, r);
}

/// The index of location `name`, added when `grow`.
int location_index(network_section& net, const std::string& name, bool grow) {
  auto it = std::find(net.locations.begin(), net.locations.end(), name);
  if (it != net.locations.end())
    return static_cast<int>(it - net.locations.begin());
  if (!grow)
    return -1;
  net.locations.push_back(name);
  for (auto& row : net.links)
    row.emplace_back();
  net.links.emplace_back(net.locations.size());
  return static_cast<int>(net.locations.size()) - 1;
}

void set_link(network_section& net, int a, int b, network_link l) {
  net.links[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] = l;
  net.links[static_cast<std::size_t>(b)][static_cast<std::size_t>(a)] = l;
}

/// `csv: FILE`: lines `from,to,latency,bandwidth` (a header line and `#` comments allowed).
void read_csv(network_section& net, const YAML::Node& at, graph_reader& r) {
  std::ifstream in{net.csv_path};
  if (!in) {
    r.error(at, "network.csv", fmt::format("cannot read '{}'", net.csv_path.string()));
    return;
  }
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r')
      line.pop_back();
    if (line.empty() || line.front() == '#' || (number == 1 && line.starts_with("from")))
      continue;
    std::vector<std::string> cells;
    std::vector<int> cols; // 1-based column of each cell's first character
    for (std::size_t begin = 0;;) {
      auto end = std::min(line.find(',', begin), line.size());
      auto cell = line.substr(begin, end - begin);
      auto b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cols.push_back(static_cast<int>(begin + (b == std::string::npos ? 0 : b)) + 1);
      if (end == line.size())
        break;
      begin = end + 1;
    }
    auto where = [&](std::size_t i) {
      return source_pos{net.csv_path.string(), number, i < cols.size() ? cols[i] : 1, {}};
    };
    if (cells.size() != 4) {
      r.error_at(where(0), "network.csv",
                 fmt::format("expected 4 cells (from,to,latency,bandwidth), got {}", cells.size()));
      continue;
    }
    network_link l;
    auto latency = net::parse_duration(cells[2]);
    auto bandwidth = net::parse_bandwidth(cells[3]);
    if (!latency)
      r.error_at(where(2), "network.csv", error_message(latency.error()));
    if (!bandwidth)
      r.error_at(where(3), "network.csv", error_message(bandwidth.error()));
    if (cells[0] == cells[1])
      r.error_at(where(1), "network.csv", fmt::format("a link from '{}' to itself: use within_location", cells[0]));
    if (!latency || !bandwidth || cells[0] == cells[1])
      continue;
    set_link(net, location_index(net, cells[0], true), location_index(net, cells[1], true), {*latency, *bandwidth});
  }
}

void read_inline(network_section& net, const YAML::Node& locations, const YAML::Node& links, graph_reader& r) {
  if (locations && !locations.IsSequence())
    r.error(locations, "network.locations",
            fmt::format("expected a list of location names, got {}", describe(locations)));
  else if (locations)
    for (std::size_t i = 0; i < locations.size(); ++i)
      if (auto s = r.as_string(locations[i], index_path("network.locations", i)))
        location_index(net, *s, true);
  if (!links)
    return;
  if (!links.IsSequence()) {
    r.error(
      links, "network.links",
      fmt::format("expected a list of links such as {{between: [a, b], latency: 20ms, bandwidth: 1Gbit/s}}, got {}",
                  describe(links)));
    return;
  }
  for (std::size_t i = 0; i < links.size(); ++i) {
    auto path = index_path("network.links", i);
    if (!r.check_map(links[i], path, link_keys) || !r.require(links[i], path, "between") ||
        !r.require(links[i], path, "latency"))
      continue;
    auto between = links[i]["between"];
    if (!between.IsSequence() || between.size() != 2) {
      r.error(between, join_path(path, "between"),
              fmt::format("expected two location names, got {}", describe(between)));
      continue;
    }
    int ends[2];
    bool good = true;
    for (std::size_t k = 0; k < 2; ++k) {
      auto name = r.as_string(between[k], index_path(join_path(path, "between"), k));
      ends[k] = name ? location_index(net, *name, !locations) : -1;
      if (name && ends[k] < 0)
        r.error(between[k], index_path(join_path(path, "between"), k),
                fmt::format("unknown location '{}' {}", *name, choices(*name, net.locations)));
      good = good && ends[k] >= 0;
    }
    if (good && ends[0] == ends[1]) {
      r.error(between, join_path(path, "between"), "a link from a location to itself: use within_location");
      good = false;
    }
    network_link l;
    read_link(links[i], path, l, r);
    if (good && l.latency >= 0)
      set_link(net, ends[0], ends[1], l);
  }
}

void read_nodes(network_section& net, const YAML::Node& n, graph_reader& r) {
  if (n.IsScalar()) {
    if (auto count = r.as_int(n, "network.nodes", 1, max_network_nodes); count && !net.locations.empty())
      for (int i = 0; i < *count; ++i) // round robin over the locations, as SkipPipe's create_schedule.py
        net.node_locations.push_back(i % static_cast<int>(net.locations.size()));
    return;
  }
  if (!n.IsSequence() || n.size() == 0) {
    r.error(n, "network.nodes",
            fmt::format("expected a number of nodes or a list of their locations, got {}", describe(n)));
    return;
  }
  for (std::size_t i = 0; i < n.size(); ++i) {
    auto name = r.as_string(n[i], index_path("network.nodes", i));
    if (!name)
      continue;
    int at = location_index(net, *name, false);
    if (at < 0)
      r.error(n[i], index_path("network.nodes", i),
              fmt::format("unknown location '{}' {}", *name, choices(*name, net.locations)));
    else
      net.node_locations.push_back(at);
  }
}

void read_placement(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& skip = pg.graph.skip;
  if (n.IsScalar() && n.Scalar() == "search")
    return;
  const int stages = pg.graph.pipeline.stages, nodes = pg.graph.network.nodes();
  if (!n.IsSequence() || static_cast<int>(n.size()) != stages) {
    r.error(n, "skip.placement",
            fmt::format("expected `search` or a list of {} lists of network nodes (one per stage position), got {}",
                        stages, describe(n)));
    return;
  }
  std::vector<int> seen(static_cast<std::size_t>(std::max(nodes, 0)), -1);
  for (std::size_t s = 0; s < n.size(); ++s) {
    auto path = index_path("skip.placement", s);
    if (!n[s].IsSequence() || n[s].size() == 0) {
      r.error(
        n[s], path,
        fmt::format("expected a list of network nodes (numbers from 0 to {}), got {}", nodes - 1, describe(n[s])));
      continue;
    }
    std::vector<int> at;
    for (std::size_t k = 0; k < n[s].size(); ++k) {
      auto v = r.as_int(n[s][k], index_path(path, k), 0, std::max(nodes - 1, 0));
      if (!v)
        continue;
      if (seen[static_cast<std::size_t>(*v)] >= 0)
        r.error(n[s][k], index_path(path, k),
                fmt::format("node {} is already placed on stage {}", *v, seen[static_cast<std::size_t>(*v)]));
      seen[static_cast<std::size_t>(*v)] = static_cast<int>(s);
      at.push_back(static_cast<int>(*v));
    }
    skip.placement.push_back(std::move(at));
  }
}

} // namespace

void parse_network(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& net = pg.graph.network;
  net.present = true;
  net.pos = r.pos(n, "network");
  if (!r.check_map(n, "network", network_keys))
    return;
  auto preset = child(n, "preset"), csv = child(n, "csv"), locations = child(n, "locations"), links = child(n, "links");
  if (int sources = !!preset + !!csv + !!(locations || links); sources != 1) {
    r.error(n, "network",
            sources == 0 ? "describe the links with one of `preset:`, `csv:` or `locations:` and `links:`"
                         : "give the links once: `preset:`, `csv:` or `locations:` and `links:`, not several");
    return;
  }
  if (preset && r.get_string(n, "network", "preset", net.preset)) {
    if (const auto* p = find_network_preset(net.preset)) {
      net.locations = p->locations;
      net.links = p->links;
      net.within = p->within;
    } else {
      r.error(preset, "network.preset",
              fmt::format("unknown network preset '{}' {}", net.preset, choices(net.preset, network_preset_names())));
    }
  }
  if (csv && r.get_string(n, "network", "csv", net.csv)) {
    net.csv_path = pg.resolve(net.csv);
    read_csv(net, csv, r);
  }
  if (locations || links)
    read_inline(net, locations, links, r);
  if (auto w = child(n, "within_location"); w && r.check_map(w, "network.within_location", {"latency", "bandwidth"}))
    read_link(w, "network.within_location", net.within, r);
  if (auto o = child(n, "overhead"))
    read_quantity(o, "network.overhead", net.overhead, net::parse_duration, r);
  for (std::size_t a = 0; a < net.locations.size(); ++a)
    for (std::size_t b = a + 1; b < net.locations.size(); ++b)
      if (net.links[a][b].latency < 0) {
        r.error(n, "network.links",
                fmt::format("no link between '{}' and '{}': every two locations need one", net.locations[a],
                            net.locations[b]));
        a = b = net.locations.size(); // one is enough to say
      }
  if (r.require(n, "network", "nodes"))
    read_nodes(net, n["nodes"], r);
}

void parse_skip(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& skip = pg.graph.skip;
  skip.present = true;
  skip.pos = r.pos(n, "skip");
  if (!n.IsMap()) {
    r.check_map(n, "skip", skip_keys);
    return;
  }
  pg.skip_node.reset(n); // keys beyond skip_keys: the planner's, checked by check_skip_planner
  const int stages = pg.graph.pipeline.stages;
  if (!pg.graph.network.present)
    r.error(n, "skip",
            "SkipPipe plans paths over a network: add a `network:` section (preset, csv or links, and nodes)");
  r.require(n, "skip", "path_length");
  if (auto l = child(n, "path_length")) {
    if (auto v = r.as_int(l, "skip.path_length", 1, 1 << 20)) {
      skip.path_length = static_cast<int>(*v);
      if (skip.path_length < 2 || skip.path_length > stages)
        r.error(l, "skip.path_length",
                fmt::format("a path visits stage 0 and at least one more, at most pipeline.stages: expected 2 to {}, "
                            "got {}",
                            stages, skip.path_length));
    }
  }
  r.get_int(n, "skip", "memory", skip.memory, 1, 1 << 20);
  r.get_int(n, "skip", "max_per_stage", skip.max_per_stage, 0, 1 << 30);
  r.get_int(n, "skip", "swaps", skip.swaps, 0, 1 << 10);
  r.get_int(n, "skip", "swap_distance", skip.swap_distance, 1, 1 << 20);
  r.get_int(n, "skip", "max_jump", skip.max_jump, 1, 1 << 20);
  r.get_string(n, "skip", "planner", skip.planner); // a registered one: check_skip_planner
  std::int64_t seed = static_cast<std::int64_t>(skip.seed);
  if (r.get_int(n, "skip", "seed", seed, 0, std::numeric_limits<std::int64_t>::max()))
    skip.seed = static_cast<std::uint64_t>(seed);
  if (const auto& net = pg.graph.network; net.present && net.nodes() > 0 && net.nodes() < stages)
    r.error(n, "skip",
            fmt::format("{} network nodes cannot hold {} stage positions (network.nodes)", net.nodes(), stages));
  if (auto p = child(n, "placement"))
    read_placement(pg, p, r);
}

void parse_channel_network(const parsed_graph& pg, const YAML::Node& channel, const YAML::Node& nodes,
                           const std::string& path, channel_spec& out, graph_reader& r) {
  const auto& net = pg.graph.network;
  auto where = join_path(path, "network");
  if (!net.present) {
    r.error(nodes, where, "names network nodes, but the graph has no `network:` section");
    return;
  }
  if (!nodes.IsSequence() || nodes.size() != 2) {
    r.error(nodes, where, fmt::format("expected two network nodes [from, to], got {}", describe(nodes)));
    return;
  }
  std::optional<std::int64_t> ends[2];
  for (std::size_t k = 0; k < 2; ++k)
    ends[k] = r.as_int(nodes[k], index_path(where, k), 0, std::max(net.nodes() - 1, 0));
  if (!ends[0] || !ends[1] || net.nodes() == 0)
    return;
  auto link = net.link(static_cast<int>(*ends[0]), static_cast<int>(*ends[1]));
  if (!child(channel, "latency"))
    out.latency = (*ends[0] == *ends[1] ? 0.0 : link.latency + net.overhead);
  if (!child(channel, "bandwidth"))
    out.bandwidth = *ends[0] == *ends[1] ? 0.0 : link.bandwidth;
}

void check_skip_planner(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  auto& skip = pg.graph.skip;
  const auto& n = pg.skip_node;
  if (!skip.present || !n)
    return;
  auto keys = skip_keys;
  const std::vector<option_spec>* own = nullptr;
  if (!vocab.planners.empty()) {
    std::vector<std::string> names;
    for (const auto& [name, options] : vocab.planners) {
      names.push_back(name);
      if (name == skip.planner)
        own = &options;
    }
    if (!own)
      r.error(child(n, "planner") ? child(n, "planner") : n, "skip.planner",
              fmt::format("unknown planner '{}' {}", skip.planner, choices(skip.planner, names)));
  }
  if (own)
    for (const auto& o : *own)
      keys.push_back(o.key);
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar())
      continue;
    const auto& key = it->first.Scalar();
    auto o = own ? std::find_if(own->begin(), own->end(), [&](const auto& x) { return x.key == key; })
                 : std::vector<option_spec>::const_iterator{};
    if (own && o != own->end())
      read_option(n, "skip", key, *o, skip.planner_options, r);
    else if (std::find(keys.begin(), keys.end(), key) == keys.end())
      r.error(it->first, join_path("skip", key), fmt::format("unknown key '{}' {}", key, choices(key, keys)));
  }
  if (own)
    for (const auto& o : *own)
      if (!o.fallback.empty())
        skip.planner_options.emplace(o.key, o.fallback); // keeps what was written
}

} // namespace troupe::detail
