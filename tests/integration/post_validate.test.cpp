// Optimizer post-validation (`train.clip: post_validate`) as real actors: zb_h1
// and zbv on 2 stages step before the global norm is back, roll back and redo
// the steps where the clip binds, and follow synchronous clipping's loss curve,
// alone and with the mechanisms it composes with.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"
#include "tests/integration/run_trace.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int steps = 8;

// grad_clip chosen so that the clip binds on some steps and not on others:
// the global norm is 3.64 and 2.24 in steps 0 and 1, then 1.45 to 1.59.
std::string graph(const std::string& schedule, int virt, const std::string& clip) {
  return fmt::format(R"(model: {{layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}}
data: {{corpus: kjv, batch: 4, seed: 3}}
train: {{steps: {}, lr: 3.0e-3, warmup: 2, eval_batches: 1, grad_clip: 2.0, clip: {}}}
pipeline: {{stages: 2, microbatches: 4, schedule: {}, virtual: {}}}
)",
                     steps, clip, schedule, virt);
}

/// Steps in which `stage` began an optimizer span before the global norm reached it
/// (its `grad_norm:STAGE` counter, recorded as the total arrives).
int early_steps(const run_trace& t, const std::string& stage) {
  std::map<std::int32_t, std::int64_t> first_optimizer, total_at;
  auto id = t.ids.at(stage);
  for (const auto& s : t.spans)
    if (s.actor == id && s.kind == span_kind::optimizer && s.step >= 0) {
      auto [it, fresh] = first_optimizer.try_emplace(s.step, s.begin_ns);
      it->second = std::min(it->second, s.begin_ns);
    }
  for (const auto& c : t.counters)
    if (c.name == "grad_norm:" + stage)
      total_at[c.step] = c.t_ns;
  int early = 0;
  for (auto [step, at] : total_at)
    if (auto o = first_optimizer.find(step); o != first_optimizer.end() && o->second < at)
      ++early;
  CHECK(total_at.size() == static_cast<std::size_t>(steps));
  return early;
}

} // namespace

TEST_CASE(
  "post_validate on zb_h1 and zbv follows synchronous clipping to 1e-6 and rolls back the steps the clip binds") {
  for (auto [schedule, virt] : {std::pair<std::string, int>{"zb_h1", 1}, std::pair<std::string, int>{"zbv", 2}}) {
    INFO(schedule);
    auto sync = run_traced(load_graph_or_fail(graph(schedule, virt, "sync"), "tests/sync.yaml"));
    auto post = run_traced(load_graph_or_fail(graph(schedule, virt, "post_validate"), "tests/post_validate.yaml"));
    REQUIRE(sync.result.losses.size() == static_cast<std::size_t>(steps));
    REQUIRE(post.result.losses.size() == static_cast<std::size_t>(steps));
    for (std::size_t i = 0; i < sync.result.losses.size(); ++i)
      CHECK(std::fabs(post.result.losses[i] - sync.result.losses[i]) <= 1e-6 * std::fabs(sync.result.losses[i]));
    CHECK(post.result.val_loss.value_or(-1) == doctest::Approx(sync.result.val_loss.value_or(-2)).epsilon(1e-6));
    // The clip binds on some steps, not all: rollbacks really ran, and so did kept early updates.
    CHECK(post.result.rollbacks == 2); // steps 0 and 1
    CHECK(post.result.rollbacks < steps);
    CHECK(sync.result.rollbacks == 0);
    // s0 holds the route's head and reduces; s1 stepped before its total came back, in every step,
    // and never does with synchronous clipping.
    CHECK(early_steps(post.trace, "s1") == steps);
    CHECK(early_steps(sync.trace, "s1") == 0);
  }
}

TEST_CASE("post_validate composes with DDP replicas, a DiLoCo exchange and attention servers: sync's curve") {
  for (std::string extra : {"data_parallel: {replicas: 2, bucket: 16KB}\n",
                            "data_parallel: {replicas: 2}\nlocal_update: {algorithm: diloco, sync_every: 4}\n",
                            "attention: {servers: in_place, nano_batches: 2}\n"}) {
    INFO(extra);
    auto sync = run_graph_text(graph("zb_h1", 1, "sync") + extra, "tests/sync.yaml");
    auto post = run_graph_text(graph("zb_h1", 1, "post_validate") + extra, "tests/post_validate.yaml");
    REQUIRE(post.losses.size() == sync.losses.size());
    for (std::size_t i = 0; i < sync.losses.size(); ++i)
      CHECK(std::fabs(post.losses[i] - sync.losses[i]) <= 1e-6 * std::fabs(sync.losses[i]));
    CHECK(post.rollbacks > 0);
    CHECK(post.rollbacks < steps);
  }
}

TEST_CASE("post_validate is refused with ZeRO's optimizer shards, which cannot roll back") {
  load_options opts;
  opts.vocabulary = troupe_vocabulary;
  auto loaded = load_graph_text(graph("zb_h1", 1, "post_validate") + "data_parallel: {replicas: 2, zero: 1}\n",
                                "tests/post_validate_zero.yaml", opts);
  REQUIRE(!loaded.ok());
  CHECK(to_string(loaded.errors).find("tests/post_validate_zero.yaml:3:") != std::string::npos);
  CHECK(to_string(loaded.errors).find("keep no copy to roll back to") != std::string::npos);
}
