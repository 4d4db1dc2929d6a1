// `troupe sim FILE`: loads a graph file, repeats its pipeline over the
// `sim:` section's data-parallel replicas and runs the real stage and router
// cores under a simulated clock with a cost model (schedulers/sim/cluster_sim.hpp);
// a `skip:` graph's planned paths (sim_skippipe.cpp) and core attention from
// documents, colocated or on in-place servers (sim_attention.cpp), and a
// local_update: graph's outer exchanges (sim_local_update.cpp), likewise.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/builtin.hpp"
#include "actors/skippipe_plan.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/run/run_graph.hpp"
#include "deploy/cli/sim_calibrate.hpp"
#include "deploy/cli/sim_attention.hpp"
#include "deploy/cli/sim_local_update.hpp"
#include "deploy/cli/sim_skippipe.hpp"
#include "runtime/trace/trace_export.hpp"
#include "schedulers/sim/cluster_sim.hpp"

namespace troupe::cli {

sched::expected<sched::device_spec> resolve_device(const sim_spec& s) {
  using namespace troupe::sched;
  auto entry = std::find_if(s.devices.begin(), s.devices.end(), [&](const auto& d) { return d.name == s.device; });
  if (entry == s.devices.end())
    return device_preset(s.device);
  device_spec d;
  if (!entry->base.empty()) {
    auto base = device_preset(entry->base);
    if (!base)
      return base.error();
    d = *base;
  } else {
    d.efficiency = device_presets().front().efficiency; // the fitted set
  }
  d.name = entry->name;
  auto set = [](double& out, double v) {
    if (v >= 0)
      out = v;
  };
  set(d.peak_f32, entry->peak_f32), set(d.peak_tf32, entry->peak_tf32), set(d.peak_bf16, entry->peak_bf16);
  set(d.memory_bandwidth, entry->memory_bandwidth), set(d.memory_bytes, entry->memory_bytes);
  set(d.efficiency.matmul, entry->matmul), set(d.efficiency.attention, entry->attention);
  set(d.efficiency.elementwise, entry->elementwise), set(d.efficiency.head, entry->head);
  set(d.backward_ratio, entry->backward_ratio);
  set(d.embedding_forward, entry->embedding_forward), set(d.embedding_backward, entry->embedding_backward);
  set(d.action_overhead, entry->action_overhead), set(d.optimizer_per_param, entry->optimizer_per_param);
  set(d.shared_slowdown, entry->shared_slowdown);
  if (entry->cores >= 0)
    d.cores = entry->cores;
  return d;
}

namespace {

using namespace troupe::sched;

constexpr double gb = 1e9;

/// The process's peak resident memory, in bytes.
double peak_rss() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

/// The cluster the graph describes: its stage actors as one replica.
expected<cluster_config> make_config(const graph_spec& g, std::int64_t steps) {
  cluster_config c;
  const auto& s = g.sim;
  c.model = transformer_shape_of(g);
  auto device = resolve_device(s);
  if (!device)
    return device.error();
  auto entry = std::find_if(s.devices.begin(), s.devices.end(), [&](const auto& d) { return d.name == s.device; });
  c.costs.device = *device;
  c.costs.network = default_network(entry == s.devices.end() ? s.device : entry->base);
  c.costs.network.devices_per_node = s.devices_per_node;
  c.costs.network.nodes_per_site = s.nodes_per_site;
  auto level = [](link_spec& out, const sim_link_spec& in) {
    if (in.latency >= 0)
      out.latency = in.latency;
    if (in.bandwidth >= 0)
      out.bandwidth = in.bandwidth;
  };
  level(c.costs.network.within_node, s.within_node);
  level(c.costs.network.between_nodes, s.between_nodes);
  level(c.costs.network.wide_area, s.wide_area);
  c.costs.dtype = g.model.precision == dtype::bf16 ? "bf16" : "f32";
  c.costs.tensor_parallel = s.tensor_parallel;
  c.costs.recompute = s.recompute;
  c.costs.count_head = s.count_head;
  c.replicas = g.data_parallel.present ? std::max(g.data_parallel.replicas, 1) : 1;
  c.microbatches = g.pipeline.microbatches;
  c.steps = steps;
  c.policy = g.pipeline.schedule;
  c.policy_options = g.pipeline.policy;
  c.routing = g.pipeline.routing;
  c.route = g.data_parallel.present ? g.data_parallel.route : "own";
  c.paths = g.pipeline.paths;
  c.gradient_bytes = s.gradient_bytes;
  c.activation_bytes = g.model.precision == dtype::bf16 ? 2 : 4;
  c.reduce_norm = g.train.grad_clip > 0;
  c.post_validate = c.reduce_norm && g.train.clip == "post_validate";
  std::vector<const actor_spec*> stages;
  for (const auto& a : g.actors)
    if (a.role.holds_layers && a.replica == 0) // one replica; the simulator repeats it
      stages.push_back(&a);
  std::sort(stages.begin(), stages.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  for (const auto* a : stages) {
    route_stage st{0, a->name, {}};
    for (auto l : a->layers)
      st.chunks.emplace_back(l.begin, l.end);
    c.stages.push_back(std::move(st));
  }
  if (c.stages.empty())
    return make_sched_error("the graph has no stage actors (actors that hold layers) to simulate");
  return c;
}

/// Which replicas a trace holds: every one while their stage actors number at
/// most `max_actors`, else k = max(1, max_actors / p) of them evenly spaced
/// (replica i·d/k for i < k, so replica 0 and the far end of the ring are both
/// seen): each sampled replica whole, every position of it, every step.
std::vector<char> sample_replicas(int d, int p, int max_actors) {
  std::vector<char> traced(static_cast<std::size_t>(d), 0);
  int k = static_cast<std::int64_t>(d) * p <= max_actors ? d : std::max(1, max_actors / p);
  for (int i = 0; i < k; ++i)
    traced[static_cast<std::size_t>(static_cast<std::int64_t>(i) * d / k)] = 1;
  return traced;
}

/// The simulation's trace: Chrome Trace Event JSON (runtime/trace/trace_export.hpp,
/// as `troupe run --trace` writes it), a process per simulated node and a
/// thread per traced stage actor (`r3s1`), simulated seconds as trace time.
class sim_trace {
public:
  sim_trace(const cluster_config& c, const std::filesystem::path& path) : out_(path), c_(c) {
    const int p = static_cast<int>(c.stages.size());
    int id = 0;
    for (int r = 0; r < c.replicas; ++r) {
      if (!c.traced[static_cast<std::size_t>(r)])
        continue;
      ++replicas_;
      for (int s = 0; s < p; ++s) {
        // Devices as the simulator numbers them: tensor-parallel, then data-parallel, then pipeline.
        std::int64_t device = (static_cast<std::int64_t>(s) * c.replicas + r) * c.costs.tensor_parallel;
        int node = static_cast<int>(c.costs.network.node_of(device));
        ids_.push_back(static_cast<std::uint16_t>(id));
        nodes_.push_back(node);
        events_.add_node(node);
        events_.add_actor({static_cast<std::uint16_t>(id++), fmt::format("r{}s{}", r, s), "pipeline_stage", node,
                           std::string{stage_role}});
      }
    }
    out_ << chrome_json_head() << events_.take();
  }
  /// Records `s` (of a traced replica).
  void add(const sched::sim_span& s) {
    std::size_t row = rows_before(s.replica) + static_cast<std::size_t>(s.position);
    span out;
    out.begin_ns = std::llround(s.begin * 1e9);
    out.end_ns = std::llround(s.end * 1e9);
    out.step = static_cast<std::int32_t>(s.step);
    out.microbatch = s.microbatch;
    out.actor = ids_[row];
    out.kind = s.kind == 'F'   ? span_kind::forward
               : s.kind == 'B' ? span_kind::backward
               : s.kind == 'I' ? span_kind::backward_input
               : s.kind == 'W' ? span_kind::backward_weight
               : s.kind == '&' ? span_kind::forward_backward
                               : span_kind::sync;
    events_.add_span(out, nodes_[row]);
    if (++spans_ % 4096 == 0)
      out_ << events_.take();
  }
  /// Closes the file; false when it could not be written.
  bool finish() {
    out_ << events_.take() << chrome_json_tail(0);
    out_.close();
    return static_cast<bool>(out_);
  }
  std::uint64_t spans() const { return spans_; }
  int replicas() const { return replicas_; }

private:
  std::size_t rows_before(int replica) {
    // Traced replicas come in order: a cursor over them finds a replica's first row.
    if (row_of_.empty()) {
      row_of_.assign(c_.traced.size(), 0);
      std::size_t n = 0;
      for (std::size_t r = 0; r < c_.traced.size(); ++r)
        if (c_.traced[r])
          row_of_[r] = n, n += c_.stages.size();
    }
    return row_of_[static_cast<std::size_t>(replica)];
  }
  std::ofstream out_;
  const cluster_config& c_;
  chrome_json_events events_;
  std::vector<std::uint16_t> ids_;
  std::vector<int> nodes_;
  std::vector<std::size_t> row_of_;
  std::uint64_t spans_ = 0;
  int replicas_ = 0;
};

/// `v` in three significant digits and the SI prefix that gets them there,
/// joined by `sep`: a 34k-parameter model is "34.5K", not "0.00B"; 2e10 FLOP/s
/// is "20 GFLOP/s", not "0.0 TFLOP/s".
std::string with_prefix(double v, const std::string& sep, const std::string& unit) {
  constexpr std::pair<double, const char*> prefixes[] = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}};
  for (auto [scale, name] : prefixes)
    if (std::fabs(v) >= scale)
      return fmt::format("{:.3g}{}{}{}", v / scale, sep, name, unit);
  return fmt::format("{:.3g}{}{}", v, sep, unit);
}

void print_text(const std::string& file, const cluster_config& c, const cluster_result& r) {
  const auto t = c.costs.tensor_parallel;
  auto params = with_prefix(r.parameters, "", "");
  if (params.ends_with('G'))
    params.back() = 'B'; // billions, as model sizes are said
  fmt::print("troupe sim: {}: GPT of {} parameters, {} stages x {} replicas x {} tensor-parallel = {} devices "
             "({}), schedule {}, {} microbatches of {} x {} tokens per replica\n",
             file, params, c.stages.size(), c.replicas, t, r.devices, c.costs.device.name, c.policy, c.microbatches,
             c.model.microbatch, c.model.sequence);
  auto time = r.iteration_s >= 1      ? fmt::format("{:.6g} s", r.iteration_s)
              : r.iteration_s >= 1e-3 ? fmt::format("{:.4g} ms", r.iteration_s * 1e3)
                                      : fmt::format("{:.4g} us", r.iteration_s * 1e6);
  fmt::print("iteration: {}, {:.6g} tokens/s\n", time, r.tokens_per_s());
  fmt::print("per device: {} ({}), MFU {:.3f} of {:.1f} TFLOP/s peak\n",
             with_prefix(r.tflops_per_device() * 1e12, " ", "FLOP/s"),
             c.costs.recompute ? "Megatron's count, recomputed forward included" : "model FLOPs", r.mfu(),
             r.peak_flops / 1e12);
  fmt::print("stage actors ({}): busy {:.4f}, bubble {:.4f} (idle: pipeline bubble and waiting for the "
             "all-reduce)\n",
             r.stage_actors, 1 - r.bubble_fraction, r.bubble_fraction);
  const int ring = c.outer.present ? std::max(c.outer.group, 1) : c.replicas; // replicas that all-reduce every step
  if (ring > 1 || !c.outer.present)
    fmt::print("routers ({}): emit only; data-parallel rings ({} of {} replicas): {:.6g} s per step on the critical "
               "path\n",
               c.replicas, c.stages.size() * static_cast<std::size_t>(c.replicas / ring), ring, r.sync_wait_s);
  else
    fmt::print("routers ({}): emit only; no data-parallel ring (each replica trains on its own between exchanges)\n",
               c.replicas);
  fmt::print("bytes per step: {:.4g} GB between stages, {:.4g} GB in all-reduces\n", r.p2p_bytes / gb,
             r.allreduce_bytes / gb);
  if (c.outer.present) {
    const auto& o = r.outer;
    fmt::print("local_update {}: {} outer steps a stage; per outer step {:.4g} MB from every outer_sync, "
               "{:.6g} s from prepare to applied, {:.6g} s a stage waits for it\n",
               c.outer.spec.algorithm, o.exchanges,
               o.exchanges > 0 ? o.bytes / static_cast<double>(o.exchanges) / 1e6 : 0.0, o.exchange_s, o.wait_s);
  }
  fmt::print("{:<12} {:>6} {:>8} {:>8} {:>10} {:>12} {:>14}\n", "position", "layers", "busy", "bubble", "in flight",
             "memory GB", "all-reduce s");
  const std::size_t n = r.positions.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (n > 16 && i >= 8 && i + 8 < n) { // a long pipeline: its ends, where it differs
      if (i == 8)
        fmt::print("{:<12} ({} more positions)\n", "...", n - 16);
      continue;
    }
    const auto& p = r.positions[i];
    double share = p.busy / (r.makespan * c.replicas);
    fmt::print("{:<12} {:>6} {:>8.4f} {:>8.4f} {:>10} {:>12.2f} {:>14.6g}\n", p.name, p.layers, share, 1 - share,
               p.peak_in_flight, p.memory_bytes / gb, p.allreduce_s);
  }
  fmt::print("simulation: {} events in {:.3f} s ({:.3g} events/s), peak memory {:.1f} MB\n", r.events, r.wall_s,
             r.events / std::max(r.wall_s, 1e-9), peak_rss() / 1e6);
}

nlohmann::json to_json(const cluster_config& c, const cluster_result& r) {
  nlohmann::json positions = nlohmann::json::array();
  double memory = 0;
  for (const auto& p : r.positions) {
    memory = std::max(memory, p.memory_bytes);
    positions.push_back({{"name", p.name},
                         {"layers", p.layers},
                         {"busy", p.busy / (r.makespan * c.replicas)},
                         {"peak_in_flight", p.peak_in_flight},
                         {"memory_gb", p.memory_bytes / gb},
                         {"allreduce_s", p.allreduce_s}});
  }
  nlohmann::json out = {{"device", c.costs.device.name},
                        {"devices", r.devices},
                        {"stages", c.stages.size()},
                        {"replicas", c.replicas},
                        {"tensor_parallel", c.costs.tensor_parallel},
                        {"schedule", c.policy},
                        {"params_b", r.parameters / 1e9},
                        {"iteration_s", r.iteration_s},
                        {"tokens_per_s", r.tokens_per_s()},
                        {"tflops_per_device", r.tflops_per_device()},
                        {"mfu", r.mfu()},
                        {"bubble", r.bubble_fraction},
                        {"sync_wait_s", r.sync_wait_s},
                        {"memory_per_device_gb", memory / gb},
                        {"positions", positions},
                        {"events", r.events},
                        {"messages", r.messages},
                        {"events_per_s", r.events / std::max(r.wall_s, 1e-9)},
                        {"wall_s", r.wall_s},
                        {"max_rss_mb", peak_rss() / 1e6}};
  if (!r.ring_bytes_by_actor.empty())
    out["data_parallel"] = {
      {"zero", c.ring.zero}, {"bytes_per_step", r.allreduce_bytes}, {"bytes_by_actor", r.ring_bytes_by_actor}};
  if (c.outer.present) {
    const auto& o = r.outer;
    out["local_update"] = {{"algorithm", c.outer.spec.algorithm},
                           {"exchanges", o.exchanges},
                           {"bytes", o.bytes},
                           {"bytes_per_exchange", o.exchanges > 0 ? o.bytes / static_cast<double>(o.exchanges) : 0.0},
                           {"bytes_by_actor", o.bytes_by_actor},
                           {"exchange_s", o.exchange_s},
                           {"wait_s", o.wait_s},
                           {"makespan_s", r.makespan}};
  }
  return out;
}

struct sim_args {
  std::string file;
  std::vector<std::string> overrides;
  std::int64_t steps = 2;
  bool json = false;
  std::string trace;
  int trace_actors = 512;
  std::string device; ///< --device: a preset, a `devices:` name or a device file (relative to here)
  int cores = -1;     ///< --cores: shared cores per node (0: a device per stage actor); -1: the device's
  bool calibrate = false;
  std::string out = "calibrated.yaml";
};

/// The sections of `g` the simulated clock does not price yet, each refused at
/// its key: priced as a plain DDP step they would give a number for another
/// graph than the one that runs (#25).
diagnostics unpriced_sections(const graph_spec& g) {
  diagnostics out;
  auto refuse = [&](const std::string& key, const std::string& what) {
    out.push_back({g.where(key), key,
                   what + " is not priced under the simulated clock yet (it would be priced as a DDP all-reduce "
                          "every step, which is not what this graph runs); remove it to simulate the rest, or "
                          "measure it with `troupe run`"});
  };
  if (g.local_update.present && (g.skip.present || simulates_attention(g)))
    refuse("local_update", fmt::format("local-update training beside {}", g.skip.present ? "skip paths" : "attention"));
  if (g.local_update.present && g.local_update.routes_across_replicas)
    refuse("local_update.route", fmt::format("{}'s activations to other replicas' stages", g.local_update.algorithm));
  return out;
}

/// Loads the file with its overrides and simulates: the exit code.
int simulate_file(const sim_args& a) {
  const auto& [file, given_overrides, steps, json, trace_path, trace_actors, device, cores, calibrate, out] = a;
  if (!outputs_writable("sim", {trace_path}))
    return bad_input;
  auto overrides = given_overrides;
  std::string device_set; ///< the override --device stands for: its errors name --device
  if (!device.empty()) {
    // A flag's path is relative to the current folder; the graph resolves sim.device against its own.
    bool is_file = device.ends_with(".yaml") || device.ends_with(".yml") || device.ends_with(".json");
    std::error_code ec;
    if (!is_file && std::filesystem::is_regular_file(device, ec)) {
      fmt::print(stderr,
                 "troupe sim: --device {}: a file, but not a device file (a device file is YAML or JSON: "
                 ".yaml, .yml or .json; `troupe sim --calibrate` writes one)\n",
                 device);
      return bad_input;
    }
    device_set = "sim.device=" + (is_file ? std::filesystem::absolute(device).string() : device);
    overrides.push_back(device_set);
  }
  auto loaded = load_graph_for_cli(file, overrides, /*check_corpus=*/false); // nothing is read
  if (!loaded.ok()) {
    for (auto d : loaded.errors) {
      if (!device_set.empty() && d.pos.origin == "--set " + device_set) // the user wrote --device, not --set
        d.pos.origin = "--device " + device, d.path.clear();
      fmt::print(stderr, "{}\n", to_string(d));
    }
    return bad_input;
  }
  if (auto refused = unpriced_sections(*loaded.graph); !refused.empty()) {
    fmt::print(stderr, "{}\n", to_string(refused));
    return bad_input;
  }
  auto config = make_config(*loaded.graph, steps);
  if (!config) {
    fmt::print(stderr, "troupe sim: {}\n", config.error().message);
    return bad_input;
  }
  if (cores >= 0)
    config->costs.device.cores = cores;
  if (loaded.graph->skip.present) { // SkipPipe: network nodes following planned paths
    if (!trace_path.empty()) {
      fmt::print(stderr,
                 "troupe sim: {}: --trace is not written for a skip: graph yet (its stage actors are "
                 "network nodes, not a grid of replicas)\n",
                 file);
      return bad_input;
    }
    return simulate_skippipe(file, *loaded.graph, *config, json);
  }
  if (simulates_attention(*loaded.graph)) { // core attention priced from each replica's documents
    if (!trace_path.empty()) {
      fmt::print(stderr, "troupe sim: {}: --trace is not written with attention from documents yet\n", file);
      return bad_input;
    }
    return simulate_attention(file, *loaded.graph, *config, json);
  }
  set_run_sections(*loaded.graph, *config);
  if (loaded.graph->cluster.present && loaded.graph->cluster.pin && cores < 0)
    config->costs.device.cores = 1; // each node process on one core of its own
  std::unique_ptr<sim_trace> trace;
  if (!trace_path.empty()) {
    config->traced = sample_replicas(config->replicas, static_cast<int>(config->stages.size()), trace_actors);
    trace = std::make_unique<sim_trace>(*config, trace_path);
    config->on_span = [t = trace.get()](const sim_span& s) { t->add(s); };
  }
  auto result = simulate_cluster(*config);
  if (trace && !trace->finish()) {
    fmt::print(stderr, "troupe sim: {}: the trace could not be written\n", trace_path);
    return runtime_failure;
  }
  if (!result) {
    fmt::print(stderr, "troupe sim: {}\n", result.error().message);
    return runtime_failure;
  }
  if (json) {
    auto j = to_json(*config, *result);
    if (trace)
      j["trace"] = {{"file", trace_path}, {"spans", trace->spans()}, {"replicas", trace->replicas()}};
    fmt::print("{}\n", j.dump(2));
  } else {
    print_text(file, *config, *result);
    if (trace)
      fmt::print("trace: {}: {} spans of {} of the {} replicas{}\n", trace_path, trace->spans(), trace->replicas(),
                 config->replicas, trace->replicas() < config->replicas ? " (sampled evenly; --trace-actors)" : "");
  }
  return ok;
}

} // namespace

/// The `sim` subcommand, listed in deploy/cli/commands.cpp.
command_action define_sim(CLI::App& app) {
  auto a = std::make_shared<sim_args>();
  describe(app,
           "Simulates a graph file at any size: its pipeline repeated over data_parallel.replicas replicas, each "
           "stage on sim.tensor_parallel devices of one node, the real stage and router cores and policies under "
           "a simulated clock, with a cost model for compute, links and all-reduces (no CAF, no compute). A "
           "skip: graph runs SkipPipe's planned paths over its network: links, against the plan's estimate and the "
           "full pipeline; with attention: or data.documents: long_tail, each replica's documents set its core "
           "attention, colocated against in-place attention servers; with local_update:, every stage's outer_sync "
           "runs its method's peer code, its parts over the channels' emulated links.",
           std::string{"Exit codes: 0 success, 1 the simulation failed, 2 bad input.\n"} + paths_help);
  app.add_option("FILE", a->file,
                 "the graph file (YAML); with --calibrate, whose model sizes to time (default: "
                 "the main example's)");
  app.add_flag("--calibrate", a->calibrate,
               "time this machine's ops at the graph's sizes (a layer's forward and backward, embedding, head, "
               "AdamW) and write a device file that sim.device or --device names (well under a minute)");
  app
    .add_option("--out", a->out,
                "with --calibrate: the device file to write (YAML; JSON when it ends in .json), "
                "default calibrated.yaml")
    ->option_text("FILE");
  app
    .add_option("--device", a->device,
                "simulate on this device: a preset, a devices: name or a device file "
                "(relative to the current folder), over sim.device")
    ->option_text("NAME|FILE");
  add_count(app, "--cores", a->cores, 0, 1 << 20,
            "cores one node's stage actors share (processor sharing; 0: a device each); with --calibrate, "
            "recorded in the file (default: the cores this process may use)")
    ->option_text("N");
  app.add_option("--set", a->overrides, "override a key, e.g. --set data_parallel.replicas=64 (repeatable)")
    ->option_text("KEY.PATH=VALUE")
    ->allow_extra_args(false);
  add_count(app, "--steps", a->steps, 1, 1'000'000,
            "training steps to simulate (the iteration time is their mean), default 2")
    ->option_text("K");
  app.add_flag("--json", a->json,
               "print one JSON object: iteration_s, tflops_per_device, mfu, devices, params_b, "
               "events, events_per_s, wall_s, ..., and local_update's exchanges, bytes and times");
  app.add_option("--trace", a->trace, "write a Chrome/Perfetto trace of the simulated run (the dashboard opens it)")
    ->option_text("OUT.json");
  add_count(app, "--trace-actors", a->trace_actors, 1, 65535,
            "at most this many stage actors in the trace: whole replicas, evenly spaced, when there are more "
            "(default 512)")
    ->option_text("N");
  return [a]() -> int {
    if (a->calibrate)
      return calibrate_machine({a->file, a->out, std::max(a->cores, 0), a->json});
    if (a->file.empty()) {
      fmt::print(stderr, "troupe sim: FILE is required (a graph file to simulate), unless --calibrate\n");
      return bad_input;
    }
    return simulate_file(*a);
  };
}

} // namespace troupe::cli
