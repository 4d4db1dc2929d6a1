// The calibration's device file: what fit_device makes of measurements gives
// them back through the cost model, the file reads back as the same device, and
// a bad file is refused with positions in it.
#include "deploy/cli/sim_calibrate.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "deploy/run/run_graph.hpp"
#include "tests/troupe_command.hpp"

using namespace troupe;
using namespace troupe::cli;
using troupe::testing::run_troupe;

namespace {

/// Measurements as this machine gives them (numbers from one calibration).
calibration_measurements sample() {
  calibration_measurements m;
  m.batch = 12;
  m.gemm_flops = 88e9, m.copy_bytes = 18e9;
  m.layer_forward = 3.34e-3, m.layer_backward = 7.13e-3;
  m.first_forward = 3.45e-3, m.first_backward = 7.4e-3;
  m.last_forward = 4.1e-3, m.last_backward = 8.6e-3;
  m.adamw_per_param = 0.29e-9;
  m.layer_alone = 10e-3, m.layer_shared = 10.4e-3;
  m.cores = 2;
  return m;
}

/// A fitted device with the memory calibration reads from the system.
sched::device_spec fitted(const calibration_measurements& m) {
  auto d = fit_device(m, "calibrated");
  d.memory_bytes = 8e9;
  return d;
}

/// A scratch folder with a graph naming `device.yaml` and that file holding `text`.
struct scratch {
  static inline int made = 0;
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("troupe_calibrate_" + std::to_string(::getpid()) + "_" + std::to_string(++made));
  explicit scratch(const std::string& text) {
    std::filesystem::create_directories(dir);
    std::ofstream{dir / "device.yaml"} << text;
    std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}\n"
                                         "data: {corpus: kjv, batch: 12}\n"
                                         "train: {steps: 10}\n"
                                         "pipeline: {stages: 4, microbatches: 8}\n"
                                         "sim: {device: device.yaml}\n";
  }
  ~scratch() { std::filesystem::remove_all(dir); }
  std::string graph() const { return (dir / "graph.yaml").string(); }
  std::string device() const { return (dir / "device.yaml").string(); }
};

/// The graph's errors, one per line.
std::string load_errors(const scratch& s) {
  auto loaded = load_graph_for_cli(s.graph(), {}, false);
  std::string out;
  for (const auto& d : loaded.errors)
    out += to_string(d) + "\n";
  return out;
}

} // namespace

TEST_CASE("The fitted device gives the measured layer, ends and optimizer back through the cost model") {
  auto m = sample();
  auto d = fit_device(m, "calibrated");
  sched::transformer_shape shape{4, 128, 4, 64, 256, 12};
  sched::cost_settings s{d, sched::network_spec{}, "f32", 1, false, true};
  auto layer = sched::costs_of(shape, s, 1, false), first = sched::costs_of(shape, s, 1, false, true),
       last = sched::costs_of(shape, s, 1, true);
  CHECK(layer.forward == doctest::Approx(m.layer_forward));
  CHECK(layer.backward == doctest::Approx(m.layer_backward));
  CHECK(first.forward == doctest::Approx(m.first_forward));
  CHECK(first.backward == doctest::Approx(m.first_backward));
  CHECK(last.forward == doctest::Approx(m.last_forward));
  CHECK(d.optimizer_per_param == m.adamw_per_param);
  CHECK(d.cores == 2);
  CHECK(d.shared_slowdown == doctest::Approx(0.04));
}

TEST_CASE("A device file reads back as the device that was written, in YAML and in JSON") {
  auto m = sample();
  auto d = fitted(m);
  for (bool json : {false, true}) {
    scratch s{device_file_text(d, m, json)};
    auto loaded = load_graph_for_cli(s.graph(), {}, false);
    REQUIRE_MESSAGE(loaded.ok(), load_errors(s));
    auto back = resolve_device(loaded.graph->sim);
    REQUIRE(back);
    for (auto [a, b] : {std::pair{back->peak_f32, d.peak_f32},
                        {back->peak_bf16, d.peak_bf16},
                        {back->memory_bandwidth, d.memory_bandwidth},
                        {back->efficiency.matmul, d.efficiency.matmul},
                        {back->efficiency.attention, d.efficiency.attention},
                        {back->efficiency.elementwise, d.efficiency.elementwise},
                        {back->efficiency.head, d.efficiency.head},
                        {back->backward_ratio, d.backward_ratio},
                        {back->embedding_forward, d.embedding_forward},
                        {back->embedding_backward, d.embedding_backward},
                        {back->optimizer_per_param, d.optimizer_per_param},
                        {back->action_overhead, d.action_overhead},
                        {back->shared_slowdown, d.shared_slowdown}})
      CHECK(a == doctest::Approx(b).epsilon(1e-5)); // six significant digits in the file
    CHECK(back->cores == 2);
    // And what is read is written again the same.
    back->name = d.name;
    CHECK(device_file_text(*back, m, json) == device_file_text(d, m, json));
  }
}

TEST_CASE("A bad device file is refused with the file, line and column of each mistake") {
  SUBCASE("a misspelt key, a value out of range and a wrong type, all reported") {
    scratch s{"name: calibrated\ncores: -1\npeak_tflops: {f32: 0.1, tf32: 0.1, bf16: 0.1}\nmemory_gbps: fast\n"
              "memory_gb: 8\nefficiency: {matmul: 2}\nbackwards_ratio: 2\n"};
    auto errors = load_errors(s);
    CHECK_MESSAGE(errors.find(s.device() + ":2:8: cores:") != std::string::npos, errors);
    CHECK_MESSAGE(errors.find(s.device() + ":4:14: memory_gbps:") != std::string::npos, errors);
    CHECK_MESSAGE(errors.find(s.device() + ":6:22: efficiency.matmul:") != std::string::npos, errors);
    CHECK_MESSAGE(errors.find(s.device() + ":7:1: backwards_ratio: unknown key") != std::string::npos, errors);
    CHECK_MESSAGE(errors.find("did you mean 'backward_ratio'") != std::string::npos, errors);
  }
  SUBCASE("a missing required key") {
    scratch s{"name: calibrated\npeak_tflops: {f32: 0.1}\nmemory_gb: 8\n"};
    auto errors = load_errors(s);
    CHECK_MESSAGE(errors.find(s.device() + ":1:1: missing required key 'memory_gbps'") != std::string::npos, errors);
  }
  SUBCASE("not YAML, not a mapping") {
    scratch bad{"name: [calibrated\n"};
    CHECK_MESSAGE(load_errors(bad).find(bad.device() + ":2:1: YAML syntax error") != std::string::npos,
                  load_errors(bad));
    scratch list{"- 1\n- 2\n"};
    CHECK_MESSAGE(load_errors(list).find(list.device() + ":1:1: a device file is a mapping") != std::string::npos,
                  load_errors(list));
  }
  SUBCASE("a file that is not there points at sim.device in the graph") {
    scratch s{""};
    std::filesystem::remove(s.device());
    auto errors = load_errors(s);
    CHECK_MESSAGE(errors.find(s.graph() + ":5:15: sim.device: cannot read the device file") != std::string::npos,
                  errors);
    CHECK_MESSAGE(errors.find("unknown device") == std::string::npos, errors);
  }
}

TEST_CASE("troupe sim --device names a device file, and --cores overrides its cores") {
  auto m = sample();
  scratch s{device_file_text(fitted(m), m, false)};
  auto shared = run_troupe("sim examples/tiny-gpt.yaml --json --device " + s.device());
  auto own = run_troupe("sim examples/tiny-gpt.yaml --json --cores 0 --device " + s.device());
  REQUIRE_MESSAGE(shared.code == 0, shared.out);
  REQUIRE_MESSAGE(own.code == 0, own.out);
  CHECK(shared.has(s.device()));
  // Four stage actors on two cores take longer than on a device each.
  CHECK(nlohmann::json::parse(shared.out)["iteration_s"].get<double>() >
        nlohmann::json::parse(own.out)["iteration_s"].get<double>());
  auto missing = run_troupe("sim");
  CHECK(missing.code == 2);
  CHECK(missing.has("FILE is required"));
}
