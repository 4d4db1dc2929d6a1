// The tiny example with its stages on a GPU follows the CPU run's loss curve
// to bf16 tolerance, under 1F1B, zero-bubble and interleaved schedules.
#include <cmath>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/stage/stage_model.hpp"
#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"

using namespace troupe;

namespace {

constexpr int steps = 30;

/// How many GPUs the CUDA backend sees; 0 when it sees none or is not built.
int gpus() {
  auto b = stage_model_backend_for(device::kind_t::cuda);
  if (!b)
    return 0;
  auto n = b->devices();
  return n ? *n : 0;
}

run_result run(std::vector<std::string> overrides) {
  overrides.push_back(fmt::format("train.steps={}", steps));
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  opts.overrides = overrides;
  auto loaded = load_graph("examples/tiny-gpt.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO(fmt::format("{}", fmt::join(overrides, " ")), ": ", r ? std::string{} : sys.render(r.error()));
  REQUIRE(r);
  return *r;
}

} // namespace

TEST_CASE("the tiny example with its stages on a GPU follows the CPU loss curve to bf16 tolerance") {
  if (gpus() == 0) {
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  for (auto schedule :
       {std::vector<std::string>{}, // the example as it is: 4 stages, 1F1B
        std::vector<std::string>{"pipeline.schedule=zb_h1"},
        std::vector<std::string>{"pipeline.stages=2", "pipeline.schedule=interleaved_1f1b", "pipeline.virtual=2"}}) {
    auto cpu = run(schedule);
    schedule.push_back("pipeline.device=cuda");
    auto gpu = run(schedule);
    INFO(fmt::format("{}", fmt::join(schedule, " ")));
    REQUIRE(cpu.losses.size() == steps);
    REQUIRE(gpu.losses.size() == steps);
    CHECK(cpu.losses.back() < cpu.losses.front()); // it learns
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      auto c = cpu.losses[std::size_t(s)], g = gpu.losses[std::size_t(s)];
      CAPTURE(s);
      REQUIRE(std::isfinite(g));
      CHECK(std::abs(g - c) <= 2e-2 * std::abs(c));
      worst = std::max(worst, std::abs(g - c) / std::abs(c));
    }
    REQUIRE(cpu.val_loss);
    REQUIRE(gpu.val_loss);
    CHECK(std::abs(*gpu.val_loss - *cpu.val_loss) <= 2e-2 * *cpu.val_loss);
    MESSAGE("final loss cpu ", cpu.losses.back(), " gpu ", gpu.losses.back(), "; worst relative step difference ",
            worst, "; ms/step cpu ", cpu.ms_per_step().value_or(0), " gpu ", gpu.ms_per_step().value_or(0));
  }
}
