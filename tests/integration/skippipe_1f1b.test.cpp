// SkipPipe's paths under 1F1B (#25): the same paths and microbatches as under
// GPipe, so the same losses; but stage 0 starts a microbatch only while it holds
// fewer than the hops left on that microbatch's path, so backwards interleave
// with forwards and what each node holds, counted from the trace, stays within
// its bound.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/trace/trace.hpp"
#include "tests/integration/run_trace.hpp"
#include "tests/integration/skip_network.hpp"

using namespace troupe;

namespace {

// Six microbatches per stage-0 node, paths of 3 stages: 1F1B's bound on stage 0
// is the embedding's hops left, 3 stages plus the head, so 4 < 6.
constexpr int steps = 3, microbatches = 6, path_length = 3, memory = 4;

std::string graph_text(const std::string& schedule) {
  return fmt::format(R"(model:    {{layers: 8, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:     {{corpus: kjv, batch: 2, seed: 5}}
train:    {{steps: {}, lr: 2.0e-3, warmup: 1, eval_batches: 1}}
pipeline: {{stages: 4, microbatches: {}, schedule: {}}}
data_parallel: {{replicas: 2}}
{}skip: {{path_length: {}, memory: {}}}
)",
                     steps, microbatches, schedule, testing::skip_network8, path_length, memory);
}

/// One microbatch of one step on one stage actor: from its first forward's
/// start to its last backward's end there (on stage 0 the embedding's forward
/// opens it and the embedding's backward closes it, the head's passes inside).
struct held {
  std::int64_t first_forward = -1, last_forward = -1, first_backward_end = -1, last_backward_end = -1;
};

struct traced {
  run_result result;
  /// Stage actor name -> (step, microbatch) -> its passes there.
  std::map<std::string, std::map<std::pair<int, int>, held>> passes;
};

traced run(const std::string& schedule) {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(graph_text(schedule), "skippipe_1f1b.yaml", opts);
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  REQUIRE(loaded.graph->skip_runs());
  auto [result, t] = testing::run_traced(*loaded.graph);
  traced out;
  out.result = result;
  auto name = t.names();
  for (const auto& s : t.spans) {
    bool forward = s.kind == span_kind::forward, backward = s.kind == span_kind::backward;
    if (s.step < 0 || (!forward && !backward))
      continue;
    auto& h = out.passes[name[s.actor]][{s.step, s.microbatch}];
    auto low = [](std::int64_t& at, std::int64_t t) { at = at < 0 ? t : std::min(at, t); };
    if (forward)
      low(h.first_forward, s.begin_ns), h.last_forward = std::max(h.last_forward, s.begin_ns);
    else
      low(h.first_backward_end, s.end_ns), h.last_backward_end = std::max(h.last_backward_end, s.end_ns);
  }
  return out;
}

/// The most microbatches an actor held at once: a sweep over the intervals
/// from each one's first forward to its last backward (an end before a start at
/// the same instant).
int peak_held(const std::map<std::pair<int, int>, held>& passes) {
  std::vector<std::pair<std::int64_t, int>> events;
  for (const auto& [key, h] : passes) {
    REQUIRE(h.first_forward >= 0);
    REQUIRE(h.last_backward_end >= h.first_forward);
    events.emplace_back(h.first_forward, +1);
    events.emplace_back(h.last_backward_end, -1);
  }
  std::sort(events.begin(), events.end());
  int now = 0, peak = 0;
  for (auto [t, d] : events)
    peak = std::max(peak, now += d);
  return peak;
}

bool is_stage0(const std::string& actor) {
  return actor.ends_with("s0");
}

} // namespace

TEST_CASE("SkipPipe's paths under 1f1b give gpipe's losses, start microbatches after backwards, and hold what "
          "their plan allows") {
  auto gpipe = run("gpipe");
  auto one = run("1f1b");

  // The same paths and microbatches: the schedule only reorders a step's work.
  REQUIRE(gpipe.result.losses.size() == steps);
  REQUIRE(one.result.losses.size() == gpipe.result.losses.size());
  for (std::size_t i = 0; i < gpipe.result.losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(one.result.losses[i] - gpipe.result.losses[i]) <= 1e-6 * std::fabs(gpipe.result.losses[i]));
  }
  CHECK(gpipe.result.losses.back() < gpipe.result.losses.front()); // it trained

  int stage0 = 0;
  for (const auto* t : {&gpipe, &one}) {
    const bool is_1f1b = t == &one;
    for (const auto& [actor, passes] : t->passes) {
      CAPTURE(actor);
      CAPTURE(is_1f1b);
      int peak = peak_held(passes);
      MESSAGE(actor, std::string{is_1f1b ? " under 1f1b" : " under gpipe"}, " held at most ", peak, " microbatches");
      if (!is_stage0(actor)) {
        CHECK(peak <= memory); // skip.memory: the plan routes no more through a node past stage 0
        continue;
      }
      stage0 += is_1f1b;
      CHECK(passes.size() == steps * microbatches); // each start node's own microbatches
      // Interleaving, step by step: the embedding's forward is each microbatch's
      // first here; under 1F1B some backward ends before the last of them starts.
      // (GPipe's order is not checked here: it runs a backward whenever no forward
      // has arrived, which a loaded machine makes happen; its peak below says it held all.)
      for (int step = 0; is_1f1b && step < steps; ++step) {
        CAPTURE(step);
        std::int64_t last_embedding = 0, first_backward = INT64_MAX;
        for (const auto& [key, h] : passes)
          if (key.first == step)
            last_embedding = std::max(last_embedding, h.first_forward),
            first_backward = std::min(first_backward, h.first_backward_end);
        CHECK(first_backward < last_embedding);
      }
      // 1F1B holds a microbatch only while fewer than its hops left (path_length
      // + 1 with the head) are held; GPipe holds all of its node's microbatches.
      CHECK(peak == (is_1f1b ? path_length + 1 : microbatches));
    }
  }
  CHECK(stage0 == 2); // both stage-0 nodes were traced
}
