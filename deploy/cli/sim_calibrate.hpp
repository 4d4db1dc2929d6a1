// `troupe sim --calibrate`: times this machine's real ops at a graph's sizes
// (a layer's forward and backward, the embedding and the head, AdamW, the
// layer's GEMMs, a memory copy) and fits a device description to them.
#pragma once

#include <functional>
#include <string>

#include "ops/gpt.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sim/cost_model.hpp"

namespace troupe::cli {

/// What calibration measured, per microbatch of `batch` sequences, in seconds
/// (each the median of several calls after warm-up: wall time, but the
/// shared-core pair in CPU time, which other programs on the cores do not stretch).
struct calibration_measurements {
  ops::gpt_config model;
  int batch = 1;
  double gemm_flops = 0;                        ///< FLOP/s of the layer's four forward GEMMs, one thread
  double copy_bytes = 0;                        ///< bytes/s of a large memory copy (read + write), one thread
  double layer_forward = 0, layer_backward = 0; ///< one middle layer
  double first_forward = 0, first_backward = 0; ///< the embedding and one layer
  double last_forward = 0, last_backward = 0;   ///< one layer, the final norm, head and loss
  double adamw_per_param = 0;                   ///< one AdamW step, per parameter
  /// A middle layer's forward + backward in CPU time, alone and while every core runs one.
  double layer_alone = 0, layer_shared = 0;
  double action_overhead = 0; ///< a stage actor's cost per action besides its op (a message, the policy)
  int cores = 1;              ///< cores the stage actors share (detected or given)
};

/// Times the ops of `model` at `batch` sequences per microbatch; `progress`
/// hears a line as each measurement starts. Throws std::runtime_error when an op fails.
calibration_measurements measure_machine(const ops::gpt_config& model, int batch, int cores,
                                         const std::function<void(const std::string&)>& progress);

/// The device that reproduces `m` through the cost model (sched::costs_of):
/// peak = the GEMM rate, the layer's remaining forward time as its memory-bound
/// part, the measured backward/forward ratio, the ends and the per-action costs.
sched::device_spec fit_device(const calibration_measurements& m, const std::string& name);

} // namespace troupe::cli

namespace troupe::cli {

/// What `troupe sim --calibrate` was asked.
struct calibrate_args {
  std::string graph;                   ///< the graph whose sizes are timed; empty: the main example's
  std::string out = "calibrated.yaml"; ///< the device file (YAML, or JSON when it ends in .json)
  int cores = 0;                       ///< cores the stage actors share; 0: this process's (sched_getaffinity)
  bool json = false;                   ///< print the device and measurements as one JSON object
};

/// The device `s.device` names: a preset, a `devices:` entry over its base, or
/// a device file (read into `s.devices` by the graph loader).
sched::expected<sched::device_spec> resolve_device(const sim_spec& s);

/// Measures, fits and writes the device file: the exit code.
int calibrate_machine(const calibrate_args& a);

/// The device file's text for `d` (what calibration measured under `measured`):
/// YAML, or JSON when `json`. Read back by the graph loader (`sim.device: FILE`).
std::string device_file_text(const sched::device_spec& d, const calibration_measurements& m, bool json);

} // namespace troupe::cli
