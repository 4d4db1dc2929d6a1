// Routing around stragglers through real actors: with `data_parallel.route:
// least_loaded` and one replica's stage an emulated slow device, microbatches
// leave the slow stage for its twins, every one still visits each position
// once, and the loss curve is the one `own` routing gives (to float-summation order).
#include <cmath>
#include <map>
#include <string>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/run_trace.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int steps = 8;
constexpr int microbatches = 4;

std::string graph_text(const char* route, double slowdown, const char* schedule = "1f1b") {
  return fmt::format(R"(model:    {{layers: 4, d_model: 64, heads: 2, context: 32, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 3, eval_batches: 2}}
pipeline: {{stages: 2, microbatches: {}, schedule: {}}}
data_parallel: {{replicas: 4, bucket: 64KB, route: {}}}
actors:
  - {{name: r1s1, slowdown: {}}}
)",
                     steps, microbatches, schedule, route, slowdown);
}

struct traced {
  std::vector<double> losses;
  std::map<std::string, int> forwards; ///< training forwards per stage actor
};

traced run(const std::string& text) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(text, "least_loaded.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  auto o = runtime_options_from_env();
  o.threads = 10; // a sleeping (slow) stage must not hold up the others' worker
  troupe_config cfg{o};
  traced out;
  auto t = record_trace([&] {
    caf::actor_system sys{cfg};
    auto r = run_graph(sys, *loaded.graph);
    INFO(text, r ? std::string{} : sys.render(r.error()));
    REQUIRE(r);
    out.losses = r->losses;
  });
  std::map<std::uint16_t, std::string> name;
  for (const auto& [n, id] : t.ids)
    name[id] = n;
  for (const auto& s : t.spans)
    if (s.kind == span_kind::forward && s.step >= 0 && name[s.actor].size() == 4) // r{i}s{j}
      ++out.forwards[name[s.actor]];
  return out;
}

} // namespace

TEST_CASE("least_loaded moves work off a slow replica's stage and keeps the loss curve of own routing") {
  auto own = run(graph_text("own", 1.0));
  auto ll = run(graph_text("least_loaded", 4.0));
  REQUIRE(own.losses.size() == steps);
  REQUIRE(ll.losses.size() == steps);
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(ll.losses[i] - own.losses[i]) <= 1e-5 * std::fabs(own.losses[i]));
    worst = std::max(worst, std::fabs(ll.losses[i] - own.losses[i]) / std::fabs(own.losses[i]));
  }
  MESSAGE("largest relative loss difference: ", worst);
  // Every microbatch once per position: each s0 ran its own, the s1s split them.
  const int per_replica = steps * microbatches;
  int s1 = 0;
  for (int r = 0; r < 4; ++r) {
    CHECK(own.forwards[fmt::format("r{}s1", r)] == per_replica);
    CHECK(ll.forwards[fmt::format("r{}s0", r)] == per_replica);
    s1 += ll.forwards[fmt::format("r{}s1", r)];
  }
  CHECK(s1 == 4 * per_replica);
  MESSAGE("least_loaded forwards: r0s1 ", ll.forwards["r0s1"], ", r1s1 (4x slower) ", ll.forwards["r1s1"], ", r2s1 ",
          ll.forwards["r2s1"], ", r3s1 ", ll.forwards["r3s1"]);
  CHECK(ll.forwards["r1s1"] < per_replica);
}

TEST_CASE("least_loaded under interleaved_1f1b moves first chunks off a slow stage and keeps own routing's losses") {
  // 2 chunks per stage: a microbatch's second chunk goes back to the stages its
  // first was routed to, so each stage runs both chunks of what it took.
  const char* schedule = "interleaved_1f1b, virtual: 2";
  auto own = run(graph_text("own", 1.0, schedule));
  auto ll = run(graph_text("least_loaded", 4.0, schedule));
  REQUIRE(own.losses.size() == steps);
  REQUIRE(ll.losses.size() == steps);
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(std::fabs(ll.losses[i] - own.losses[i]) <= 1e-6 * std::fabs(own.losses[i]));
  }
  const int per_replica = steps * microbatches * 2; // both chunks
  int s1 = 0;
  for (int r = 0; r < 4; ++r) {
    CHECK(ll.forwards[fmt::format("r{}s0", r)] == per_replica);
    s1 += ll.forwards[fmt::format("r{}s1", r)];
  }
  CHECK(s1 == 4 * per_replica);
  MESSAGE("interleaved least_loaded forwards: r0s1 ", ll.forwards["r0s1"], ", r1s1 (4x slower) ", ll.forwards["r1s1"],
          ", r2s1 ", ll.forwards["r2s1"], ", r3s1 ", ll.forwards["r3s1"]);
  CHECK(ll.forwards["r1s1"] < per_replica);
}
