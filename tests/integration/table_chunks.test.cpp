// A `schedule: table` graph replays a table of several model chunks per stage
// (`virtual: 2`): examples/schedules/interleaved_4x8x2.csv, which
// `troupe schedule` replayed but no graph could (the loader refused virtual
// with a table), runs and trains the curve interleaved_1f1b trains.
#include <cmath>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::string graph(const std::string& schedule) {
  return fmt::format(R"(model: {{layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}}
data: {{corpus: kjv, batch: 2, seed: 3}}
train: {{steps: 4, lr: 2.0e-3, warmup: 1, eval_batches: 1}}
pipeline: {{stages: 4, microbatches: 8, virtual: 2, {}}}
)",
                     schedule);
}

} // namespace

TEST_CASE("a table of two chunks per stage runs as a graph and trains interleaved_1f1b's curve") {
  auto table = run_graph_text(graph("schedule: table, table: ../examples/schedules/interleaved_4x8x2.csv"),
                              "tests/table_chunks.yaml");
  auto rule = run_graph_text(graph("schedule: interleaved_1f1b"), "tests/interleaved.yaml");
  REQUIRE(table.losses.size() == 4);
  REQUIRE(rule.losses.size() == 4);
  for (std::size_t i = 0; i < 4; ++i)
    CHECK(table.losses[i] == doctest::Approx(rule.losses[i]).epsilon(1e-5));
}
