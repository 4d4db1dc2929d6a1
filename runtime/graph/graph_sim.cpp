// The graph file's `sim:` and `devices:` sections: how `troupe sim` sizes the
// graph (tensor and data parallelism, nodes) and prices it (a device preset or
// a described device, links per level). Other commands read and ignore them.
#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> sim_keys{"device",         "tensor_parallel", "data_parallel",  "devices_per_node",
                                        "nodes_per_site", "recompute",       "count_head",     "gradient_bytes",
                                        "links"};
const std::vector<std::string> link_levels{"within_node", "between_nodes", "wide_area"};
const std::vector<std::string> link_keys{"latency", "bandwidth"};
const std::vector<std::string> device_keys{"base", "peak_tflops", "memory_gbps", "memory_gb", "efficiency"};
const std::vector<std::string> peak_keys{"f32", "tf32", "bf16"};
const std::vector<std::string> efficiency_keys{"matmul", "attention", "elementwise"};

/// choices(), but a preset the word begins (`a100` for `a100_80gb`) is the suggestion.
std::string device_choices(const std::string& word, const std::vector<std::string>& known) {
  for (const auto& k : known)
    if (!word.empty() && k.starts_with(word))
      return fmt::format("(did you mean '{}'? known: {})", k, join(known));
  return choices(word, known);
}

void parse_link_level(const YAML::Node& n, const std::string& path, sim_link_spec& out, graph_reader& r) {
  if (!r.check_map(n, path, link_keys))
    return;
  r.get_double(n, path, "latency", out.latency, 0.0, 1e3);
  r.get_double(n, path, "bandwidth", out.bandwidth, 0.0, 1e18);
}

void parse_device(const std::string& name, const YAML::Node& n, sim_device_spec& d, graph_reader& r) {
  auto path = join_path("devices", name);
  d.name = name;
  d.pos = r.pos(n, path);
  if (!r.check_map(n, path, device_keys))
    return;
  r.get_string(n, path, "base", d.base);
  if (auto peak = child(n, "peak_tflops"); peak && r.check_map(peak, join_path(path, "peak_tflops"), peak_keys)) {
    auto p = join_path(path, "peak_tflops");
    for (auto [key, out] : {std::pair{"f32", &d.peak_f32}, {"tf32", &d.peak_tf32}, {"bf16", &d.peak_bf16}})
      if (r.get_double(peak, p, key, *out, 1e-6, 1e9) && child(peak, key))
        *out *= 1e12;
  }
  if (r.get_double(n, path, "memory_gbps", d.memory_bandwidth, 1e-6, 1e9) && child(n, "memory_gbps"))
    d.memory_bandwidth *= 1e9;
  if (r.get_double(n, path, "memory_gb", d.memory_bytes, 1e-6, 1e9) && child(n, "memory_gb"))
    d.memory_bytes *= 1e9;
  if (auto eff = child(n, "efficiency"); eff && r.check_map(eff, join_path(path, "efficiency"), efficiency_keys)) {
    auto p = join_path(path, "efficiency");
    r.get_double(eff, p, "matmul", d.matmul, 1e-6, 1.0);
    r.get_double(eff, p, "attention", d.attention, 1e-6, 1.0);
    r.get_double(eff, p, "elementwise", d.elementwise, 1e-6, 1.0);
  }
  if (d.base.empty())
    for (const char* key : {"peak_tflops", "memory_gbps", "memory_gb"})
      r.require(n, path, key);  // nothing to take them from
}

} // namespace

void parse_sim(parsed_graph& pg, const YAML::Node& n, const YAML::Node& devices, graph_reader& r) {
  auto& s = pg.graph.sim;
  s.present = true;
  if (devices) {
    if (!devices.IsMap()) {
      r.error(devices, "devices", fmt::format("expected a mapping of device names to descriptions, got {}",
                                              describe(devices)));
    } else {
      for (auto it = devices.begin(); it != devices.end(); ++it) {
        auto name = r.as_string(it->first, "devices");
        if (!name)
          continue;
        sim_device_spec d;
        parse_device(*name, it->second, d, r);
        pg.sim_base_nodes.push_back(it->second.IsMap() && it->second["base"] ? it->second["base"] : it->second);
        s.devices.push_back(std::move(d));
      }
    }
  }
  if (!n || !r.check_map(n, "sim", sim_keys))
    return;
  r.get_string(n, "sim", "device", s.device);
  pg.sim_device_node.reset(child(n, "device"));
  r.get_int(n, "sim", "tensor_parallel", s.tensor_parallel, 1, 1024);
  // The replicas were `sim.data_parallel` before the graph had its own section:
  // one number in one place now, which `troupe run` and `troupe sim` both read.
  if (auto dp = child(n, "data_parallel"))
    r.error(dp, "sim.data_parallel",
            "the simulated replicas are the graph's own `data_parallel: {replicas: N}` now; move the number there "
            "(`--set data_parallel.replicas=N` on the command line)");
  r.get_int(n, "sim", "devices_per_node", s.devices_per_node, 1, 1024);
  r.get_int(n, "sim", "nodes_per_site", s.nodes_per_site, 0, 1 << 20);
  r.get_bool(n, "sim", "recompute", s.recompute);
  r.get_bool(n, "sim", "count_head", s.count_head);
  r.get_double(n, "sim", "gradient_bytes", s.gradient_bytes, 0.0, 64.0);
  if (s.tensor_parallel > s.devices_per_node && child(n, "tensor_parallel"))
    r.error(n["tensor_parallel"], "sim.tensor_parallel",
            fmt::format("a stage's {} tensor-parallel devices must fit in one node of {} (sim.devices_per_node)",
                        s.tensor_parallel, s.devices_per_node));
  if (auto links = child(n, "links"); links && r.check_map(links, "sim.links", link_levels)) {
    if (auto l = child(links, "within_node"))
      parse_link_level(l, "sim.links.within_node", s.within_node, r);
    if (auto l = child(links, "between_nodes"))
      parse_link_level(l, "sim.links.between_nodes", s.between_nodes, r);
    if (auto l = child(links, "wide_area"))
      parse_link_level(l, "sim.links.wide_area", s.wide_area, r);

  }
}

void check_sim(parsed_graph& pg, const graph_vocabulary& vocab, graph_reader& r) {
  const auto& s = pg.graph.sim;
  if (!s.present || vocab.sim_devices.empty())
    return;
  auto known = vocab.sim_devices;
  for (std::size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    if (!d.base.empty() && std::find(vocab.sim_devices.begin(), vocab.sim_devices.end(), d.base) ==
                             vocab.sim_devices.end())
      r.error(pg.sim_base_nodes[i], join_path(join_path("devices", d.name), "base"),
              fmt::format("unknown device preset '{}' {}", d.base, device_choices(d.base, vocab.sim_devices)));
    known.push_back(d.name);
  }
  if (std::find(known.begin(), known.end(), s.device) == known.end())
    r.error(pg.sim_device_node, "sim.device",
            fmt::format("unknown device '{}' {}; describe others under `devices:`", s.device,
                        device_choices(s.device, known)));
}

} // namespace troupe::detail
