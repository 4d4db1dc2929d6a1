// Real actors, real messages: a GPT trained through 1, 2 or 4 pipeline-stage
// actors under every schedule follows the same loss curve as one stage.
#include <cmath>
#include <fstream>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "schedulers/policies/orders.hpp"
#include "schedulers/policies/stage_policy.hpp"

using namespace troupe;

namespace {

constexpr int microbatches = 4;

std::string graph_text(int stages, const std::string& schedule, int virt, const std::string& table) {
  return fmt::format(R"(model:    {{layers: 4, d_model: 64, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: 4, seed: 3}}
train:    {{steps: 20, lr: 2.0e-3, weight_decay: 0.1, warmup: 5, eval_batches: 2}}
pipeline: {{stages: {}, microbatches: {}, schedule: {}, virtual: {}{}}}
)",
                     stages, microbatches, schedule, virt, table.empty() ? "" : ", table: " + table);
}

/// Writes the canonical 1F1B order of `stages` ranks as a table file.
std::string write_table(int stages) {
  auto path = std::filesystem::temp_directory_path() / fmt::format("troupe_1f1b_{}x{}.csv", stages, microbatches);
  std::ofstream out(path);
  for (int r = 0; r < stages; ++r)
    out << sched::to_string(sched::one_f_one_b_order(r, stages, microbatches)) << "\n";
  return path.string();
}

run_result run(int stages, const std::string& schedule, int virt = 1) {
  auto table = schedule == "table" ? write_table(stages) : std::string{};
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(graph_text(stages, schedule, virt, table), "equivalence.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  INFO(schedule, " with ", stages, " stages: ", r ? std::string{} : sys.render(r.error()));
  REQUIRE(r);
  return *r;
}

const std::vector<double>& losses_of(const run_result& r) {
  for (const auto& s : r.summaries)
    if (!s.losses.empty())
      return s.losses;
  FAIL("no actor reported a loss curve");
  static std::vector<double> none;
  return none;
}

} // namespace

TEST_CASE("1, 2 and 4 stage actors under every schedule follow the one-stage loss curve to 1e-5") {
  auto reference = run(1, "gpipe");
  auto ref = losses_of(reference);
  REQUIRE(ref.size() == 20);
  CHECK(ref.back() < ref.front()); // it learns
  CHECK(reference.val_loss.has_value());
  struct config {
    int stages;
    std::string schedule;
    int virt = 1;
  };
  for (const auto& c : std::vector<config>{{2, "1f1b"},
                                           {2, "gpipe"},
                                           {2, "interleaved_1f1b", 2},
                                           {4, "1f1b"},
                                           {4, "gpipe"},
                                           {4, "zb_h1"},
                                           {4, "table"},
                                           {2, "zb_h1"}}) {
    auto got = losses_of(run(c.stages, c.schedule, c.virt));
    INFO(c.schedule, " with ", c.stages, " stages");
    REQUIRE(got.size() == ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i)
      CHECK(std::fabs(got[i] - ref[i]) <= 1e-5 * std::fabs(ref[i]));
  }
}
