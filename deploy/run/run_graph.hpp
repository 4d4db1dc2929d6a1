// Loading a graph for the command line, and running it in one process: spawn
// every actor from the registry, connect, start, and wait for their reports.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

#include <nlohmann/json.hpp>

#include "deploy/run/model_size.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_loader.hpp"
#include "runtime/actor/messages.hpp"

namespace troupe {

/// Registers the built-in actor types and returns the names a graph may use
/// (registered actor types, registered schedule policies, built-ins).
graph_vocabulary troupe_vocabulary();

/// Loads `file` with `overrides` the way `troupe check` and `troupe run` do
/// (built-in actors registered, plugins loaded, vocabulary from the registries).
/// `check_corpus` false: for commands that read no data (`sim`, `plan`).
load_result load_graph_for_cli(const std::filesystem::path& file, std::vector<std::string> overrides,
                               bool check_corpus = true);

/// How long `run_graph` waits.
struct run_options {
  std::chrono::milliseconds connect_timeout{30'000}; ///< for each actor's reply to connect
  std::chrono::milliseconds timeout{0};              ///< for the whole run; 0 = no limit
  /// When it turns non-zero (a signal number), the run stops every actor and
  /// returns errc::interrupted; polled about every 100 ms.
  const std::atomic<int>* interrupt = nullptr;
};

/// What a finished run reports (aggregated as runtime/actor/messages.hpp describes).
struct run_result {
  std::int64_t steps = 0;
  std::int64_t tokens = 0;
  double seconds = 0; ///< from start to the last `done`
  std::optional<double> train_loss;
  std::optional<double> val_loss;
  std::optional<double> val_loss_short; ///< SkipPipe: validation on a path of skip.path_length stages
  std::int64_t first_step = 0;          ///< the step training started at (checkpoint.resume_step)
  std::vector<double> losses;           ///< train loss per step from first_step on (the loss stage's)
  std::int64_t checkpoints = 0;         ///< checkpoints completed
  std::int64_t restarts = 0;            ///< times `troupe launch` restarted the run after losing a node
  std::int64_t rollbacks = 0;           ///< post-validation: steps rolled back and redone clipped (any stage's)
  std::vector<run_summary> summaries;   ///< one per actor, in arrival order
  std::string kernel_target;            ///< the CPU kernels' SIMD target where run_graph ran them (this process);
  std::string blas_core;                ///< and OpenBLAS's core; both empty for a launch, whose nodes choose their own

  std::optional<double> tokens_per_s() const;
  std::optional<double> ms_per_step() const;
};

/// Fills steps, tokens and losses of `r` from its summaries (steps = max,
/// tokens = sum, the losses of the actor that reports them).
void aggregate(run_result& r);

/// Runs the validated graph `g` in `sys`: spawns each actor through its
/// registered factory, sends connect and start, and waits until every actor
/// reported done. A failure report, an abnormal exit or the timeout stops every
/// actor and returns an error (errc::actor_failed, errc::unknown_actor_type,
/// errc::spawn_failed) saying which actor and why. With `checkpoint.every` set
/// it completes checkpoints as runtime/checkpoint/checkpoint.hpp describes, printing one
/// line per checkpoint; a checkpoint that cannot be completed fails the run.
caf::expected<run_result> run_graph(caf::actor_system& sys, const graph_spec& g, const run_options& opts = {});

/// The runner's side of checkpoints, shared by run_graph and the multi-process
/// coordinator: completes a checkpoint once every part is in (runtime/checkpoint/checkpoint.hpp).
class run_checkpoints {
public:
  explicit run_checkpoints(const graph_spec& g);
  /// Records `m`; when it completes a step, commits it (DIR/latest) and prints
  /// one line. Returns why the run must stop (the commit failed), else nullopt.
  std::optional<std::string> on_report(const checkpoint_msg& m, run_result& res);
  /// `why`, plus where the last complete checkpoint is when there is one.
  /// Discards the incomplete step folders: call it once every actor has stopped.
  std::string explain_failure(std::string why) const;
  /// The error a run stopped by signal `sig` returns: errc::interrupted, saying
  /// how many actors had finished and where the last complete checkpoint is.
  caf::error interrupted(int sig, std::size_t done, std::size_t actors) const;

private:
  std::filesystem::path dir_;
  std::optional<checkpoint_tracker> tracker_;
};

/// Who failed, for a supervision message: `actor 'r1s2' (node 1, replica 1,
/// position 2, in step 6)`, each part where the graph (or `step` >= 0) knows it.
std::string describe_actor(const graph_spec& g, const std::string& name, step_t step = -1);

/// `{"steps":…, "tokens_per_s":…, "ms_per_step":…, "train_loss":…, "val_loss":…,
/// "val_loss_short":… (SkipPipe), "first_step":…, "losses": […], "parameters": {"total":…, "per_actor": {…}},
/// "stragglers": the stages' step times (runtime/trace/step_stats.hpp's to_json)}`,
/// null where unknown; `steps` counts this run's.
nlohmann::json summary_json(const run_result& r, const parameter_count& parameters);

} // namespace troupe
