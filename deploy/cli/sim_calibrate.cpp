// Calibration: the real CPU ops of a graph's model timed at its sizes, and the
// device description that makes the cost model give those times back.
#include "deploy/cli/sim_calibrate.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "deploy/cli/commands.hpp"
#include "deploy/run/run_graph.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "ops/adamw.hpp"
#include "ops/model_config.hpp"

namespace troupe::cli {

namespace {

/// Seconds on `clock`: CLOCK_MONOTONIC (wall: what a stage actor's op takes,
/// the ops' times) or CLOCK_THREAD_CPUTIME_ID (this thread's CPU time, not
/// stretched while other programs hold the cores: the shared-core slowdown,
/// so that only the caches and memory the cores share enter it).
double now_on(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double wall_now() {
  return now_on(CLOCK_MONOTONIC);
}
double cpu_now() {
  return now_on(CLOCK_THREAD_CPUTIME_ID);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// The median time of `f` on `now` over `runs` calls, after `warm` untimed ones
/// (the first calls fault in fresh memory: 0.4 GB/s against 30 GB/s reused).
template <class F>
double time_median(int warm, int runs, F&& f, double (*now)() = wall_now) {
  for (int i = 0; i < warm; ++i)
    f();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    double t0 = now();
    f();
    t.push_back(now() - t0);
  }
  return median(std::move(t));
}

tensor_handle random_f32(shape_t shape, std::mt19937& rng) {
  auto t = tensor_handle::empty(std::move(shape), dtype::f32);
  std::normal_distribution<float> n(0.0f, 1.0f);
  auto* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    p[i] = n(rng);
  return t;
}

tensor_handle random_tokens(int b, int t, int vocab, std::mt19937& rng) {
  auto x = tensor_handle::empty({b, t}, dtype::i32);
  for (std::int64_t i = 0; i < x.numel(); ++i)
    x.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % static_cast<std::uint32_t>(vocab));
  return x;
}

/// Forward and backward of `range` on `input` (the loss range also takes `targets`):
/// the medians of each, over alternating calls.
std::pair<double, double> time_range(ops::gpt_range& range, const tensor_handle& input, const tensor_handle& targets,
                                     const tensor_handle& grad_out, int runs) {
  std::vector<double> fwd, bwd;
  for (int i = 0; i < runs + 2; ++i) {
    double t0 = wall_now();
    range.forward(0, input, targets);
    double t1 = wall_now();
    range.backward(0, grad_out);
    double t2 = wall_now();
    if (i >= 2) { // two warm-up rounds
      fwd.push_back(t1 - t0);
      bwd.push_back(t2 - t1);
    }
  }
  return {median(fwd), median(bwd)};
}

/// FLOP/s of the layer's forward GEMMs (QKV, projection, MLP up and down) on [b·s, h].
double gemm_rate(int rows, int h, int runs) {
  struct shape {
    int n, k;
  };
  const shape shapes[] = {{3 * h, h}, {h, h}, {4 * h, h}, {h, 4 * h}};
  std::vector<float> a(static_cast<std::size_t>(rows) * 4 * h, 0.5f), w(static_cast<std::size_t>(16) * h * h, 0.25f),
    c(static_cast<std::size_t>(rows) * 4 * h);
  double flops = 0;
  for (auto s : shapes)
    flops += 2.0 * rows * s.n * s.k;
  double t = time_median(2, runs, [&] {
    for (auto s : shapes) // y = x Wᵀ, as ops/linear computes it
      kernels::cpu::sgemm_fused(false, true, rows, s.n, s.k, 1.0f, a.data(), s.k, w.data(), s.k, 0.0f, c.data(), s.n,
                                {});
  });
  return flops / t;
}

/// Bytes/s of a copy of 64 MiB (read and write counted), reused buffers.
double copy_rate(int runs) {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  double t = time_median(1, runs, [&] { std::memcpy(dst.data(), src.data(), n); });
  return 2.0 * static_cast<double>(n) / t;
}

/// A middle layer's forward + backward in this thread's CPU time, alone and
/// while `cores` - 1 threads run their own copy of it: what sharing the caches
/// and memory costs.
std::pair<double, double> time_shared(const ops::gpt_config& three, const tensor_handle& x, const tensor_handle& dy,
                                      int cores, int runs) {
  ops::gpt_range layer(three, 1, 2);
  auto step = [&] {
    layer.forward(0, x);
    layer.backward(0, dy);
  };
  const double alone = time_median(2, runs, step, cpu_now);
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> others;
  for (int i = 1; i < cores; ++i)
    others.emplace_back([&] {
      ops::gpt_range mine(three, 1, 2);
      ++started;
      while (!stop.load(std::memory_order_relaxed)) {
        mine.forward(0, x);
        mine.backward(0, dy);
      }
    });
  while (started.load() < cores - 1)
    std::this_thread::yield();
  const double shared = time_median(2, runs, step, cpu_now);
  stop = true;
  for (auto& th : others)
    th.join();
  return {alone, shared};
}

} // namespace

calibration_measurements measure_machine(const ops::gpt_config& model, int batch, int cores,
                                         const std::function<void(const std::string&)>& progress) {
  calibration_measurements m;
  m.model = model;
  m.batch = batch;
  m.cores = cores;
  const int b = batch, t = model.context, h = model.d_model, runs = 9;
  // Three layers: the first range holds the embedding, the last the head and
  // loss, the middle one a bare layer, whatever the graph's layer count.
  ops::gpt_config three = model;
  three.layers = 3;
  std::mt19937 rng(1);
  auto tokens = random_tokens(b, t, model.vocab, rng), targets = random_tokens(b, t, model.vocab, rng);
  auto x = random_f32({b, t, h}, rng), dy = random_f32({b, t, h}, rng);

  progress(fmt::format("sgemm: the layer's GEMMs on [{} x {}]", b * t, h));
  m.gemm_flops = gemm_rate(b * t, h, runs);
  progress("memory: a 64 MiB copy");
  m.copy_bytes = copy_rate(runs);
  progress(fmt::format("layer: forward and backward of one layer, {} x {} tokens, d_model {}", b, t, h));
  ops::gpt_range middle(three, 1, 2);
  std::tie(m.layer_forward, m.layer_backward) = time_range(middle, x, {}, dy, runs);
  progress("first stage: the embedding and one layer");
  ops::gpt_range first(three, 0, 1);
  std::tie(m.first_forward, m.first_backward) = time_range(first, tokens, {}, dy, runs);
  progress(fmt::format("last stage: one layer, the head over {} tokens and the loss", model.vocab));
  ops::gpt_range last(three, 2, 3);
  std::tie(m.last_forward, m.last_backward) = time_range(last, x, targets, {}, runs);
  progress("optimizer: AdamW over one layer's parameters");
  ops::adamw opt(middle.params());
  double params = 0;
  for (const auto& p : middle.params())
    params += static_cast<double>(p.value.numel());
  m.adamw_per_param = time_median(2, runs, [&] { opt.step(middle.params(), middle.grads(), 1e-3f); }) / params;
  progress(fmt::format("shared cores: the layer on all {} cores at once", cores));
  std::tie(m.layer_alone, m.layer_shared) = time_shared(three, x, dy, cores, runs);
  return m;
}

} // namespace troupe::cli

namespace troupe::cli {

sched::device_spec fit_device(const calibration_measurements& m, const std::string& name) {
  sched::device_spec d;
  d.name = name;
  const double peak = m.gemm_flops;
  // A CPU computes every dtype in f32 here (bf16 rounds the products only).
  d.peak_f32 = d.peak_tf32 = d.peak_bf16 = peak;
  d.memory_bandwidth = m.copy_bytes;
  const sched::transformer_shape shape{3, m.model.d_model, m.model.heads, m.model.context, m.model.vocab, m.batch};
  auto f = sched::layer_forward_flops(shape);
  const double bytes = sched::layer_activation_bytes(shape);
  // The layer's forward: its GEMMs and attention at the GEMM rate, the rest
  // its memory-bound part. When that rest is under what the copy rate allows,
  // the memory-bound ops run at the copy rate and the GEMMs take what is left:
  // at a lower efficiency, or at a higher peak when the layer's own GEMMs beat
  // the timed ones (here they do: 768 x 128 blocks stay in cache between ops).
  d.efficiency.attention = d.efficiency.matmul = 1;
  const double rest = m.layer_forward - f.total() / peak;
  if (rest > bytes / d.memory_bandwidth) {
    d.efficiency.elementwise = bytes / (d.memory_bandwidth * rest);
  } else {
    d.efficiency.elementwise = 1;
    const double rate = f.total() / std::max(m.layer_forward - bytes / d.memory_bandwidth, 1e-12);
    if (rate > peak)
      d.peak_f32 = d.peak_tf32 = d.peak_bf16 = rate;
    else
      d.efficiency.matmul = d.efficiency.attention = rate / peak;
  }
  const double fitted_peak = d.peak_f32;
  d.backward_ratio = m.layer_backward / m.layer_forward;
  // The ends: what the first and last ranges take beyond their layer.
  const double head = std::max(m.last_forward - m.layer_forward, 1e-12);
  d.efficiency.head = std::min(1.0, sched::head_forward_flops(shape) / (fitted_peak * head));
  const double values = static_cast<double>(m.batch) * m.model.context * m.model.d_model;
  d.embedding_forward = std::max(m.first_forward - m.layer_forward, 0.0) / values;
  d.embedding_backward = std::max(m.first_backward - m.layer_backward, 0.0) / values;
  d.optimizer_per_param = m.adamw_per_param;
  d.action_overhead = m.action_overhead;
  d.cores = m.cores;
  if (m.layer_alone > 0 && m.layer_shared > 0)
    d.shared_slowdown = std::max(0.0, m.layer_shared / m.layer_alone - 1);
  return d;
}

} // namespace troupe::cli

namespace troupe::cli {

namespace {

/// The main example's batch (examples/tiny-gpt.yaml), timed when no graph is given;
/// gpt_config's defaults are its model.
constexpr int main_example_batch = 12;

/// The cores this process may run on.
int detected_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    return std::max(CPU_COUNT(&set), 1);
  return 1;
}

double physical_memory() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

std::string cpu_name() {
  std::ifstream in{"/proc/cpuinfo"};
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name"))
      if (auto colon = line.find(':'); colon != std::string::npos)
        return line.substr(line.find_first_not_of(' ', colon + 1));
  return "unknown CPU";
}

/// `x` to six significant digits: what the file keeps, so that a device read
/// back is written again the same.
double six(double x) {
  return std::stod(fmt::format("{:.6g}", x));
}

/// The device and its measurements as one object, in the file's units (six digits).
nlohmann::ordered_json device_object(const sched::device_spec& d, const calibration_measurements& m) {
  auto ms = [](double s) { return six(s * 1e3); };
  return {
    {"name", d.name},
    {"cores", d.cores},
    {"peak_tflops",
     {{"f32", six(d.peak_f32 / 1e12)}, {"tf32", six(d.peak_tf32 / 1e12)}, {"bf16", six(d.peak_bf16 / 1e12)}}},
    {"memory_gbps", six(d.memory_bandwidth / 1e9)},
    {"memory_gb", six(d.memory_bytes / 1e9)},
    {"efficiency",
     {{"matmul", six(d.efficiency.matmul)},
      {"attention", six(d.efficiency.attention)},
      {"elementwise", six(d.efficiency.elementwise)},
      {"head", six(d.efficiency.head)}}},
    {"backward_ratio", six(d.backward_ratio)},
    {"embedding_ns", {{"forward", six(d.embedding_forward * 1e9)}, {"backward", six(d.embedding_backward * 1e9)}}},
    {"optimizer_ns_per_param", six(d.optimizer_per_param * 1e9)},
    {"action_overhead_us", six(d.action_overhead * 1e6)},
    {"shared_slowdown", six(d.shared_slowdown)},
    {"measured",
     {{"model",
       {{"d_model", m.model.d_model},
        {"heads", m.model.heads},
        {"context", m.model.context},
        {"vocab", m.model.vocab},
        {"batch", m.batch}}},
      {"gemm_gflops", six(m.gemm_flops / 1e9)},
      {"copy_gbps", six(m.copy_bytes / 1e9)},
      {"layer_ms", {{"forward", ms(m.layer_forward)}, {"backward", ms(m.layer_backward)}}},
      {"first_ms", {{"forward", ms(m.first_forward)}, {"backward", ms(m.first_backward)}}},
      {"last_ms", {{"forward", ms(m.last_forward)}, {"backward", ms(m.last_backward)}}},
      {"adamw_ns_per_param", six(m.adamw_per_param * 1e9)},
      {"layer_cpu_ms", {{"alone", ms(m.layer_alone)}, {"all_cores", ms(m.layer_shared)}}},
      {"action_overhead_us", six(m.action_overhead * 1e6)}}}};
}

/// `j` as YAML: mappings of scalars on one line, numbers to 6 significant digits.
void emit(YAML::Emitter& out, const nlohmann::ordered_json& j) {
  if (j.is_object()) {
    bool flat = std::none_of(j.begin(), j.end(), [](const auto& v) { return v.is_object(); });
    if (flat)
      out << YAML::Flow;
    out << YAML::BeginMap;
    for (const auto& [k, v] : j.items()) {
      out << YAML::Key << k << YAML::Value;
      emit(out, v);
    }
    out << YAML::EndMap;
  } else if (j.is_number_integer()) {
    out << j.get<std::int64_t>();
  } else if (j.is_number()) {
    out << fmt::format("{}", j.get<double>()); // already six digits: the shortest text that reads back the same
  } else {
    out << j.get<std::string>();
  }
}

} // namespace

std::string device_file_text(const sched::device_spec& d, const calibration_measurements& m, bool json) {
  auto j = device_object(d, m);
  if (json)
    return j.dump(2) + "\n";
  YAML::Emitter out;
  emit(out, j);
  return out.c_str() + std::string{"\n"};
}

int calibrate_machine(const calibrate_args& a) {
  if (!outputs_writable("sim --calibrate", {a.out}))
    return bad_input;
  ops::gpt_config model;
  int batch = main_example_batch;
  if (!a.graph.empty()) {
    auto loaded = load_graph_for_cli(a.graph, {}, /*check_corpus=*/false);
    if (!loaded.ok()) {
      for (const auto& d : loaded.errors)
        fmt::print(stderr, "{}\n", to_string(d));
      return bad_input;
    }
    const auto& g = *loaded.graph;
    model = ops::model_config(g); // its shape and family; measured on three layers (measure_machine)
    model.head_apart = false;
    batch = g.data.batch;
  }
  const int cores = a.cores > 0 ? a.cores : detected_cores();
  const auto started = std::chrono::steady_clock::now(); // wall time, for the report
  int step = 0;
  calibration_measurements m;
  try {
    m = measure_machine(model, batch, cores,
                        [&](const std::string& what) { fmt::print(stderr, "calibrate [{}/7] {}\n", ++step, what); });
  } catch (const std::exception& e) {
    fmt::print(stderr, "troupe sim --calibrate: {}\n", e.what());
    return runtime_failure;
  }
  auto d = fit_device(m, "calibrated");
  d.memory_bytes = physical_memory();
  const bool json_file = a.out.ends_with(".json");
  std::string text = device_file_text(d, m, json_file);
  if (!json_file) {
    std::time_t now = std::time(nullptr);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    text = fmt::format("# troupe sim --calibrate on {} ({} cores shared by the stage actors), {}.\n"
                       "# The ops of d_model {}, {} heads, context {}, vocab {} at {} sequences per microbatch,\n"
                       "# timed on this machine. Name this file as a graph's sim.device (or troupe sim --device).\n{}",
                       cpu_name(), cores, when, model.d_model, model.heads, model.context, model.vocab, batch, text);
  }
  std::ofstream out{a.out};
  out << text;
  out.close();
  if (!out) {
    fmt::print(stderr, "troupe sim --calibrate: {}: cannot write\n", a.out);
    return runtime_failure;
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (a.json) {
    auto j = device_object(d, m);
    j["file"] = a.out;
    j["wall_s"] = took;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print("calibrated in {:.1f} s: {}\n", took, a.out);
    fmt::print("  sgemm {:.1f} GFLOP/s, copy {:.1f} GB/s, {} cores shared\n", m.gemm_flops / 1e9, m.copy_bytes / 1e9,
               cores);
    fmt::print("  layer forward {:.3f} ms, backward {:.3f} ms (ratio {:.2f}); head +{:.3f} ms; embedding +{:.3f} "
               "ms; AdamW {:.2f} ns/parameter; all cores at once {:+.1f}%\n",
               m.layer_forward * 1e3, m.layer_backward * 1e3, d.backward_ratio,
               std::max(0.0, m.last_forward - m.layer_forward) * 1e3,
               std::max(0.0, m.first_forward - m.layer_forward) * 1e3, m.adamw_per_param * 1e9,
               100 * d.shared_slowdown);
  }
  return ok;
}

} // namespace troupe::cli
