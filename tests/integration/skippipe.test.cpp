// SkipPipe through real actors (#14): each microbatch's forward and backward
// passes run on exactly the stage actors of its planned path (from the trace),
// every path starts and ends on one stage 0 and visits L positions once, stages
// off a path never see it, and validation reports the model with fewer layers.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/skippipe_plan.hpp"
#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/run_trace.hpp"

using namespace troupe;

namespace {

constexpr int steps = 3, stages = 4, replicas = 2, microbatches = 3, path_length = 3;

/// 4 positions × 2 replicas on 8 nodes of 3 locations, one link slow (a–c).
std::string graph_text(const std::string& extra = "") {
  return fmt::format(R"(model:    {{layers: 4, d_model: 32, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, warmup: 1, eval_batches: 2}}
pipeline: {{stages: {}, microbatches: {}, schedule: gpipe}}
data_parallel: {{replicas: {}}}
network:
  locations: [a, b, c]
  links:
    - {{between: [a, b], latency: 1ms, bandwidth: 1GB/s}}
    - {{between: [a, c], latency: 8ms, bandwidth: 100MB/s}}
    - {{between: [b, c], latency: 2ms, bandwidth: 1GB/s}}
  within_location: {{latency: 0ms, bandwidth: 10GB/s}}
  nodes: [a, a, b, b, c, c, a, b]
skip: {{path_length: {}, memory: 3}}
sim: {{device: a100_80gb}}
{})",
                     steps, stages, microbatches, replicas, path_length, extra);
}

load_result load(const std::string& text) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  return load_graph_text(text, "skippipe.yaml", opts);
}

/// Actor names of each pass of a microbatch, sorted: (step, microbatch) -> names.
using visits = std::map<std::pair<int, int>, std::multiset<std::string>>;

struct traced {
  run_result result;
  visits forwards, backwards;
};

traced run(const graph_spec& g) {
  auto [result, t] = testing::run_traced(g);
  traced out;
  out.result = result;
  auto name = t.names();
  for (const auto& s : t.spans) {
    if (s.step < 0 || name[s.actor].find('s') == std::string::npos || name[s.actor].ends_with("_ar"))
      continue;
    if (s.kind == span_kind::forward)
      out.forwards[{s.step, s.microbatch}].insert(name[s.actor]);
    else if (s.kind == span_kind::backward)
      out.backwards[{s.step, s.microbatch}].insert(name[s.actor]);
  }
  return out;
}

} // namespace

TEST_CASE("each microbatch runs forward and backward on exactly the stages of its planned path") {
  auto loaded = load(graph_text());
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  const auto& g = *loaded.graph;
  REQUIRE(g.skip_runs());
  auto plan = plan_skippipe_graph(g, false);
  REQUIRE(plan);
  auto routes = skippipe_route_names(g, *plan);
  REQUIRE(routes.size() == replicas * microbatches);

  // The path invariants, on the routes the run takes.
  std::set<std::string> visited_somewhere;
  for (const auto& r : routes) {
    CAPTURE(fmt::format("{}", fmt::join(r, " ")));
    REQUIRE(r.size() == path_length + 1);
    CHECK(r.front() == r.back().substr(0, r.back().size() - 2) + ".0"); // starts and ends on one stage 0
    CHECK(r.back().ends_with(".1"));                                    // ... at its head
    std::set<char> positions;
    for (std::size_t h = 0; h + 1 < r.size(); ++h) {
      auto name = r[h].substr(0, r[h].find('.'));
      positions.insert(name.back()); // `r1s2`: position 2
      visited_somewhere.insert(name);
    }
    CHECK(positions.size() == path_length); // L positions, none twice
    CHECK(positions.contains('0'));
  }

  auto t = run(g);
  // Each microbatch of each step: its forwards on exactly its path's actors (stage 0
  // twice: the embedding, then the head), its backwards on the same ones; none elsewhere.
  for (int step = 0; step < steps; ++step)
    for (int k = 0; k < replicas * microbatches; ++k) {
      CAPTURE(step);
      CAPTURE(k);
      std::multiset<std::string> want;
      for (const auto& hop : routes[static_cast<std::size_t>(k)])
        want.insert(hop.substr(0, hop.find('.')));
      CHECK(t.forwards[{step, k}] == want);
      CHECK(t.backwards[{step, k}] == want); // gradients come back only the way the path went
    }
  CHECK(t.forwards.size() == steps * replicas * microbatches); // no microbatch outside the plan
  // A path of L < S stages skips: some stage actor is on no path and computes nothing in training.
  int idle_stages = 0;
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < stages; ++s)
      idle_stages += !visited_somewhere.contains(grid_stage_name(g, r, s));
  std::multiset<std::string> busy;
  for (const auto& [key, names] : t.forwards)
    busy.insert(names.begin(), names.end());
  for (int r = 0; r < replicas; ++r)
    for (int s = 0; s < stages; ++s)
      if (!visited_somewhere.contains(grid_stage_name(g, r, s)))
        CHECK(busy.count(grid_stage_name(g, r, s)) == 0);
  MESSAGE("stage actors on no path: ", idle_stages);

  // Validation: the full model and the model with fewer layers, side by side.
  REQUIRE(t.result.val_loss);
  REQUIRE(t.result.val_loss_short);
  CHECK(std::isfinite(*t.result.val_loss_short));
  CHECK(*t.result.val_loss_short != *t.result.val_loss);
  CHECK(*t.result.val_loss < std::log(256.0)); // it trained
  MESSAGE("val loss ", *t.result.val_loss, ", on a path of ", path_length, " stages ", *t.result.val_loss_short);
}

TEST_CASE("the full planner runs every stage in order on each path, and validates once") {
  auto loaded = load(graph_text() + "");
  REQUIRE(loaded.ok());
  auto g = *loaded.graph;
  g.skip.planner = "full";
  auto plan = plan_skippipe_graph(g, false);
  REQUIRE(plan);
  for (const auto& r : skippipe_route_names(g, *plan)) {
    REQUIRE(r.size() == stages + 1);
    for (int s = 1; s < stages; ++s)
      CHECK(r[static_cast<std::size_t>(s)].back() == static_cast<char>('0' + s));
  }
}

TEST_CASE("SkipPipe graphs that cannot run say why, where") {
  // Schedules whose bounds come from a rank's place in one chain, or whose
  // chunks are virtual stages: the schedule is the reason, not the routes.
  for (auto [schedule, why] : {std::pair{"zb_h1", "SkipPipe's paths cannot run zb_h1: it defers at most r + 1"},
                               std::pair{"interleaved_1f1b, virtual: 2",
                                         "SkipPipe's paths cannot run interleaved_1f1b: its chunks are virtual"}}) {
    CAPTURE(std::string{schedule});
    auto text = graph_text();
    text.replace(text.find("layers: 4"), 9, "layers: 8"); // two chunks on each of 4 stages
    auto other = load(text.replace(text.find("schedule: gpipe"), 15, std::string{"schedule: "} + schedule));
    REQUIRE_FALSE(other.ok());
    CHECK(to_string(other.errors).find("skippipe.yaml:4:") != std::string::npos);
    CHECK(to_string(other.errors).find(why) != std::string::npos);
    CHECK(to_string(other.errors).find("holds 2 chunks") == std::string::npos);
  }
  // More network nodes than stage actors: plannable (troupe plan paths), not runnable.
  auto text = graph_text();
  text.replace(text.find("nodes: [a, a, b, b, c, c, a, b]"), 31, "nodes: 9");
  auto nine = load(text);
  INFO(to_string(nine.errors));
  REQUIRE(nine.ok());
  CHECK_FALSE(nine.graph->skip_runs());
  auto o = runtime_options_from_env();
  troupe_config cfg{o};
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *nine.graph);
  REQUIRE_FALSE(r);
  auto why = sys.render(r.error());
  CAPTURE(why);
  CHECK(why.find("skippipe.yaml:") != std::string::npos);
  CHECK(why.find("SkipPipe runs need pipeline.stages × data_parallel.replicas = 8 nodes, not 9") != std::string::npos);
}
