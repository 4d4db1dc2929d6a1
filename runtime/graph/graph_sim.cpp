// The graph file's `sim:` and `devices:` sections: how `troupe sim` sizes the
// graph (tensor and data parallelism, nodes) and prices it (a device preset or
// a described device, links per level). Other commands read and ignore them.
#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> sim_keys{"device",           "tensor_parallel", "data_parallel",
                                        "devices_per_node", "nodes_per_site",  "recompute",
                                        "count_head",       "gradient_bytes",  "links"};
const std::vector<std::string> link_levels{"within_node", "between_nodes", "wide_area"};
const std::vector<std::string> link_keys{"latency", "bandwidth"};
const std::vector<std::string> device_keys{"base",         "peak_tflops",        "memory_gbps",
                                           "memory_gb",    "efficiency",         "backward_ratio",
                                           "embedding_ns", "action_overhead_us", "optimizer_ns_per_param",
                                           "cores",        "shared_slowdown"};
const std::vector<std::string> peak_keys{"f32", "tf32", "bf16"};
const std::vector<std::string> efficiency_keys{"matmul", "attention", "elementwise", "head"};
const std::vector<std::string> embedding_keys{"forward", "backward"};

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

/// One device description at `path` (`devices.NAME`, or the top of a device
/// file, whose own keys `keys` lists).
void parse_device(const std::string& name, const std::string& path, const YAML::Node& n, sim_device_spec& d,
                  graph_reader& r, const std::vector<std::string>& keys = device_keys) {
  d.name = name;
  d.pos = r.pos(n, path);
  if (!r.check_map(n, path, keys))
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
    r.get_double(eff, p, "head", d.head, 1e-6, 1.0);
  }
  r.get_double(n, path, "backward_ratio", d.backward_ratio, 0.1, 100.0);
  if (auto emb = child(n, "embedding_ns"); emb && r.check_map(emb, join_path(path, "embedding_ns"), embedding_keys)) {
    auto p = join_path(path, "embedding_ns");
    for (auto [key, out] : {std::pair{"forward", &d.embedding_forward}, {"backward", &d.embedding_backward}})
      if (r.get_double(emb, p, key, *out, 0.0, 1e9) && child(emb, key))
        *out *= 1e-9;
  }
  if (r.get_double(n, path, "action_overhead_us", d.action_overhead, 0.0, 1e9) && child(n, "action_overhead_us"))
    d.action_overhead *= 1e-6;
  if (r.get_double(n, path, "optimizer_ns_per_param", d.optimizer_per_param, 0.0, 1e9) &&
      child(n, "optimizer_ns_per_param"))
    d.optimizer_per_param *= 1e-9;
  r.get_int(n, path, "cores", d.cores, 0, 1 << 20);
  r.get_double(n, path, "shared_slowdown", d.shared_slowdown, 0.0, 10.0);
  if (d.base.empty())
    for (const char* key : {"peak_tflops", "memory_gbps", "memory_gb"})
      r.require(n, path, key); // nothing to take them from
}

/// True when `sim.device` names a device file rather than a preset or a `devices:` entry.
bool is_device_file(const std::string& device) {
  for (const char* ext : {".yaml", ".yml", ".json"})
    if (device.ends_with(ext))
      return true;
  return false;
}

/// Reads the device file `sim.device` names (one device description, the keys
/// of a `devices:` entry, plus `name` and what calibration `measured`): errors
/// point into that file; a file that cannot be read points at `sim.device`.
void read_device_file(parsed_graph& pg, const YAML::Node& at, graph_reader& r) {
  auto& s = pg.graph.sim;
  const auto path = pg.resolve(s.device);
  graph_reader fr{path.string(), r.out()};
  // The entry is there whatever the file holds: its mistakes are the errors, not an "unknown device".
  s.devices.push_back(sim_device_spec{});
  s.devices.back().name = s.device;
  pg.sim_base_nodes.push_back(at);
  YAML::Node root;
  try {
    root = YAML::LoadFile(path.string());
  } catch (const YAML::BadFile&) {
    r.error(at, "sim.device", fmt::format("cannot read the device file '{}'", path.string()));
    return;
  } catch (const YAML::ParserException& e) {
    fr.error_at(source_pos{path.string(), e.mark.line + 1, e.mark.column + 1, {}}, "", "YAML syntax error: " + e.msg);
    return;
  }
  if (!root.IsMap()) {
    fr.error(root, "",
             fmt::format("a device file is a mapping (name, peak_tflops, memory_gbps, ...), got {}", describe(root)));
    return;
  }
  // The file's own keys besides a device's: its name and calibration's raw measurements.
  // A file is written out whole: no `base` (a preset's name is not a file).
  std::vector<std::string> file_keys{"name", "measured"};
  std::copy_if(device_keys.begin(), device_keys.end(), std::back_inserter(file_keys),
               [](const auto& k) { return k != "base"; });
  parse_device(s.device, "", root, s.devices.back(), fr, file_keys);
  if (auto measured = child(root, "measured"); measured && !measured.IsMap())
    fr.error(measured, "measured", fmt::format("expected a mapping of measurements, got {}", describe(measured)));
  if (auto name = child(root, "name"))
    fr.as_string(name, "name");
}

} // namespace

void parse_sim(parsed_graph& pg, const YAML::Node& n, const YAML::Node& devices, graph_reader& r) {
  auto& s = pg.graph.sim;
  s.present = true;
  if (devices) {
    if (!devices.IsMap()) {
      r.error(devices, "devices",
              fmt::format("expected a mapping of device names to descriptions, got {}", describe(devices)));
    } else {
      for (auto it = devices.begin(); it != devices.end(); ++it) {
        auto name = r.as_string(it->first, "devices");
        if (!name)
          continue;
        sim_device_spec d;
        parse_device(*name, join_path("devices", *name), it->second, d, r);
        pg.sim_base_nodes.push_back(it->second.IsMap() && it->second["base"] ? it->second["base"] : it->second);
        s.devices.push_back(std::move(d));
      }
    }
  }
  if (!n || !r.check_map(n, "sim", sim_keys))
    return;
  r.get_string(n, "sim", "device", s.device);
  pg.sim_device_node.reset(child(n, "device"));
  if (is_device_file(s.device))
    read_device_file(pg, pg.sim_device_node, r);
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
    if (!d.base.empty() &&
        std::find(vocab.sim_devices.begin(), vocab.sim_devices.end(), d.base) == vocab.sim_devices.end())
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
