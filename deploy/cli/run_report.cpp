// How `troupe run` and `troupe launch` begin and end: their shared options,
// the graph loaded and resumed; one summary line, the summary JSON, the exit code.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <string_view>

#include <fmt/format.h>

#include "actors/skippipe_plan.hpp"
#include "deploy/cli/commands.hpp"
#include "deploy/cli/interrupt.hpp"
#include "deploy/cli/memory_estimate.hpp"
#include "deploy/cli/run_command.hpp"
#include "ops/lr_schedule.hpp"
#include "runtime/actor/errors.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe::cli {

namespace {

/// `text` as a YAML single-quoted scalar: a path read back exactly, whatever it holds.
std::string yaml_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string{"''"} : std::string(1, c);
  return out + "'";
}

/// The `--set` values that keep a resumed run saving as the run it came from:
/// into the folder its checkpoint is in, as often, keeping as many; each only
/// where `sets` (the command line) does not say otherwise. They go to the
/// nodes of a launch with the user's own.
std::vector<std::string> continued_checkpoint_sets(const resume_point& from, const std::vector<std::string>& sets) {
  auto given = [&](std::string_view key) {
    for (std::string_view s : sets) {
      auto k = s.substr(0, s.find('='));
      while (!k.empty() && k.back() == ' ')
        k.remove_suffix(1);
      if (k == "checkpoint" || k == key)
        return true;
    }
    return false;
  };
  std::vector<std::string> out;
  auto dir = std::filesystem::absolute(from.dir).lexically_normal();
  if (!dir.has_filename())
    dir = dir.parent_path(); // `ckpt/`
  if (!given("checkpoint.dir"))
    out.push_back("checkpoint.dir=" + yaml_quoted(dir.string()));
  if (from.every > 0 && !given("checkpoint.every"))
    out.push_back(fmt::format("checkpoint.every={}", from.every));
  if (from.keep > 0 && !given("checkpoint.keep"))
    out.push_back(fmt::format("checkpoint.keep={}", from.keep));
  return out;
}

} // namespace

run_graph_load load_run_graph(const char* cmd, run_args& a, std::chrono::milliseconds& timeout) {
  run_graph_load out{std::nullopt, bad_input};
  if (a.timeout_s > 0)
    timeout = std::chrono::seconds(a.timeout_s);
  auto cannot_resume = [&](const caf::error& e) {
    fmt::print(stderr, "troupe {}: cannot resume: {}\n", cmd, error_message(e));
    return out;
  };
  if (!a.resume.empty()) {
    auto found = find_checkpoint(a.resume);
    if (!found)
      return cannot_resume(found.error());
    auto sets = continued_checkpoint_sets(*found, a.graph.sets);
    a.graph.sets.insert(a.graph.sets.begin(), sets.begin(), sets.end());
  }
  auto res = load_graph_for_cli(a.graph.file, a.graph.overrides());
  if (!res.ok()) {
    fmt::print(stderr, "{}", to_string(res.errors));
    return out;
  }
  auto& g = *res.graph;
  if (auto d = skippipe_not_runnable(g)) { // the data loader refused it after the actors were made
    fmt::print(stderr, "troupe {}: {}\n", cmd, to_string(*d));
    return out;
  }
  if (auto why = memory_problem(g, machine_memory())) { // it would die of std::bad_alloc in some actor
    fmt::print(stderr, "troupe {}: {}: {}\n", cmd, a.graph.file, *why);
    return out;
  }
  if (!a.resume.empty()) {
    // Every part is complete and fits the graph before any actor exists.
    auto from = open_resume(a.resume, g);
    if (!from)
      return cannot_resume(from.error());
    if (from->step == g.train.steps) {
      fmt::print("troupe {}: nothing to do: checkpoint {} is the run's last step (train.steps {}); raise --steps "
                 "to train further\n",
                 cmd, from->folder.string(), g.train.steps);
      out.exit_code = ok;
      return out;
    }
    g.checkpoint.resume_folder = from->folder;
    g.checkpoint.resume_step = from->step;
    a.resume = from->folder.string(); // exactly this step, whatever `latest` says later
    const auto& c = g.checkpoint;
    fmt::print("resuming from {} after step {} of {}; {}\n", a.resume, from->step, g.train.steps,
               c.every > 0 && !c.dir_path.empty()
                 ? fmt::format("saving checkpoints to {} every {} steps", c.dir_path.string(), c.every)
                 : std::string{"saving no checkpoints (checkpoint.every is 0)"});
    if (from->steps > 0 && from->steps != g.train.steps) {
      // The cosine decays to train.steps: other steps bend the curve from the first resumed step on.
      auto schedule = [&](std::int64_t total) {
        return ops::warmup_cosine{static_cast<float>(g.train.lr), static_cast<float>(g.train.lr * 0.1),
                                  static_cast<long>(g.train.warmup), static_cast<long>(total)};
      };
      auto step = static_cast<long>(from->step);
      fmt::print("note: the learning-rate schedule changes: the checkpoint's run decays it over {} steps, this one "
                 "over {} (step {}: lr {:.3e}, not {:.3e}); --steps {} keeps the old schedule\n",
                 from->steps, g.train.steps, step + 1, schedule(g.train.steps).at(step), schedule(from->steps).at(step),
                 from->steps);
    }
  }
  if (g.checkpoint.resume_folder.empty() && !g.train.init.empty()) {
    // Every stage finds the part it starts from before any actor exists.
    auto init = check_init(g);
    if (!init) {
      fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(init.error()));
      return out;
    }
    if (init->weights_file)
      fmt::print("starting from the weights in {} (fresh optimizer state, step 0)\n", init->from.folder.string());
    else
      fmt::print("starting from the weights of {} (after its step {}; fresh optimizer state, step 0)\n",
                 init->from.folder.string(), init->from.step);
  }
  if (g.local_update.present)
    if (const auto* method = sched::find_sync_method(g.local_update.algorithm)) {
      // A run shorter than the exchange period trains each replica alone, which is a mistake to mention.
      std::int64_t exchanges = 0;
      try {
        auto schedule = method->schedule(g.local_update);
        for (std::int64_t step = 0; step < g.train.steps; ++step)
          for (auto e : schedule->after_inner_step())
            exchanges += step >= g.checkpoint.resume_step && e.what == sched::fragment_event::kind::perform;
      } catch (const std::exception&) {
        exchanges = -1; // the spawn reports it
      }
      if (exchanges == 0)
        fmt::print("note: local_update never exchanges in this run: {} steps{} and {} exchanges every {} steps "
                   "(local_update.sync_every); the replicas train alone\n",
                   g.train.steps,
                   g.checkpoint.resume_step > 0 ? fmt::format(" from step {}", g.checkpoint.resume_step) : "",
                   g.local_update.algorithm, g.local_update.sync_every);
    }
  out.graph = std::move(res.graph);
  return out;
}

int report_run(const char* cmd, const graph_spec& g, const std::string& file, const caf::expected<run_result>& result,
               const std::string& summary_path) {
  if (!result) {
    fmt::print(stderr, "troupe {}: {}\n", cmd, error_message(result.error()));
    if (is_error(result.error(), errc::interrupted))
      return interrupted_exit_code(interrupt_guard::signal().load());
    return runtime_failure;
  }
  auto fmt_opt = [](std::optional<double> v, const char* spec) {
    return v ? fmt::format(fmt::runtime(spec), *v) : std::string{"-"};
  };
  fmt::print("{}: {} steps in {:.2f} s, {} ms/step, {} tokens/s, train loss {}, val loss {}\n", file, result->steps,
             result->seconds, fmt_opt(result->ms_per_step(), "{:.2f}"), fmt_opt(result->tokens_per_s(), "{:.0f}"),
             fmt_opt(result->train_loss, "{:.4f}"), fmt_opt(result->val_loss, "{:.4f}"));
  if (result->val_loss_short && result->val_loss) // SkipPipe's model with fewer layers, beside the full one
    fmt::print("{}: validation on a path of {} of {} stages: loss {:.4f}, perplexity {:.3f} (the full model: {:.3f})\n",
               file, g.skip.path_length, g.pipeline.stages, *result->val_loss_short, std::exp(*result->val_loss_short),
               std::exp(*result->val_loss));
  std::fflush(stdout);
  if (!summary_path.empty()) {
    std::ofstream out{summary_path};
    out << summary_json(*result, count_parameters(g)).dump() << "\n";
    out.close(); // the bytes reach the file here (a full disk fails here, not at <<)
    if (!out) {
      fmt::print(stderr, "troupe {}: cannot write the summary to '{}': {}\n", cmd, summary_path, std::strerror(errno));
      return runtime_failure;
    }
  }
  return ok;
}

} // namespace troupe::cli
