// Core attention on attention servers (DistCA, #15): training with servers in
// place or apart, one or two nano-batches, follows the colocated loss curve, and
// the servers really ran the attention: every query token of every layer, once.
#include <set>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "tests/integration/run_text.hpp"
#include "tests/integration/run_trace.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int layers = 2, d_model = 32, context = 64, batch = 4, microbatches = 2, replicas = 2, stages = 2, steps = 20;

struct traced_run {
  std::vector<double> losses;
  run_trace trace;
};

traced_run run(const std::string& attention, const std::string& schedule = "1f1b") {
  auto text = fmt::format(R"(model:    {{layers: {}, d_model: {}, heads: 4, context: {}, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 5, documents: long_tail, deal: heaviest_first}}
train:    {{steps: {}, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: {}, schedule: {}}}
data_parallel: {{replicas: {}}}
{})",
                          layers, d_model, context, batch, steps, stages, microbatches, schedule, replicas, attention);
  traced_run out;
  out.trace = record_trace([&] { out.losses = run_graph_text(text, "attention.yaml").losses; });
  REQUIRE(out.losses.size() == std::size_t(steps));
  return out;
}

/// Attention spans an actor recorded, and the bytes of their forward answers.
std::pair<int, std::uint64_t> served(const run_trace& t, const std::string& actor) {
  std::pair<int, std::uint64_t> n{0, 0};
  auto id = t.ids.find(actor);
  REQUIRE(id != t.ids.end());
  for (const auto& s : t.spans)
    if (s.actor == id->second && s.kind == span_kind::attention)
      ++n.first, n.second += s.bytes;
  return n;
}

void check_curve(const std::vector<double>& got, const std::vector<double>& colocated) {
  for (int i = 0; i < steps; ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[std::size_t(i)] - colocated[std::size_t(i)]) <= 1e-5 * colocated[std::size_t(i)]);
  }
}

} // namespace

TEST_CASE("separate attention servers give the colocated loss curve and run every query of every layer") {
  auto colocated = run("");
  for (int servers : {1, 2, 3, 4})
    for (int nano : {1, 2}) {
      CAPTURE(servers);
      CAPTURE(nano);
      auto r = run(fmt::format("attention: {{servers: {}, nano_batches: {}}}", servers, nano));
      check_curve(r.losses, colocated.losses);
      // Each layer's output for every training token comes back from a server once:
      // steps × replicas × microbatches × batch × context tokens, d_model f32 each.
      std::uint64_t answered = 0;
      for (int s = 0; s < servers; ++s) {
        auto [spans, bytes] = served(r.trace, fmt::format("attention{}", s));
        CHECK(spans > 0); // the planner spreads the pairs over every server
        answered += bytes;
      }
      CHECK(answered == std::uint64_t(steps) * replicas * microbatches * batch * context * layers * d_model * 4);
      for (int rep = 0; rep < replicas; ++rep)
        for (int st = 0; st < stages; ++st)
          CHECK(served(r.trace, fmt::format("r{}s{}", rep, st)).first == 0);
    }
}

TEST_CASE("attention servers in place give the colocated loss curve, and replicas serve each other's documents") {
  auto colocated = run("");
  for (int nano : {1, 2}) {
    CAPTURE(nano);
    auto r = run(fmt::format("attention: {{servers: in_place, nano_batches: {}}}", nano));
    check_curve(r.losses, colocated.losses);
    // Replica 0 draws the heaviest sequences (heaviest_first): the planner moves
    // part of its pairs to replica 1, whose stages serve them.
    for (int st = 0; st < stages; ++st)
      CHECK(served(r.trace, fmt::format("r1s{}", st)).first > 0);
  }
}

TEST_CASE("zb_h1 with attention servers: the input-gradient half in pieces, each nano-batch's W later, the colocated "
          "curve") {
  auto colocated = run("", "zb_h1");
  for (int nano : {1, 2}) {
    CAPTURE(nano);
    auto r = run(fmt::format("attention: {{servers: 2, nano_batches: {}}}", nano), "zb_h1");
    check_curve(r.losses, colocated.losses);
    // The backward really split: every microbatch's I (in pieces: spans of each
    // piece) and W (one span) on every stage, no fused B.
    for (int rep = 0; rep < replicas; ++rep)
      for (int st = 0; st < stages; ++st) {
        auto id = r.trace.ids.at(fmt::format("r{}s{}", rep, st));
        std::set<std::pair<int, int>> inputs;
        int weights = 0, fused = 0;
        for (const auto& sp : r.trace.spans)
          if (sp.actor == id) {
            if (sp.kind == span_kind::backward_input)
              inputs.emplace(sp.step, sp.microbatch);
            weights += sp.kind == span_kind::backward_weight, fused += sp.kind == span_kind::backward;
          }
        CHECK(inputs.size() == std::size_t(steps * microbatches));
        CHECK(weights == steps * microbatches);
        CHECK(fused == 0);
      }
    CHECK(served(r.trace, "attention0").first > 0);
  }
}

TEST_CASE("local-update replicas with attention servers and documents give the colocated curve") {
  // Each replica trains on its own and exchanges every 2 steps; the servers
  // still plan each round over every replica's documents (the router emits
  // replica by replica, so a round's microbatches line up).
  auto text = [](const std::string& method, const std::string& attention) {
    return fmt::format(R"(model:    {{layers: {}, d_model: {}, heads: 4, context: {}, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 5, documents: long_tail}}
train:    {{steps: 8, lr: 2.0e-3, warmup: 2, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: {}, schedule: 1f1b}}
data_parallel: {{replicas: {}}}
local_update: {}
{})",
                       layers, d_model, context, batch, stages, microbatches, replicas, method, attention);
  };
  for (std::string method :
       {"{algorithm: diloco, sync_every: 2}", "{algorithm: streaming_diloco, sync_every: 2, fragments: 2}",
        "{algorithm: noloco, sync_every: 2, route: chain}", "{algorithm: sparseloco, sync_every: 2}"}) {
    CAPTURE(method);
    auto colocated = run_graph_text(text(method, ""), "lu.yaml").losses;
    REQUIRE(colocated.size() == 8);
    for (std::string attention : {"attention: {servers: in_place, nano_batches: 2}", "attention: {servers: 2}"}) {
      CAPTURE(attention);
      std::vector<double> got;
      auto trace = record_trace([&] { got = run_graph_text(text(method, attention), "lu.yaml").losses; });
      REQUIRE(got.size() == 8);
      // The servers ran the attention: separate ones, or replica 1's stages serving replica 0's heavy documents.
      CHECK(served(trace, attention.find("in_place") != std::string::npos ? "r1s0" : "attention1").first > 0);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        CHECK(std::abs(got[i] - colocated[i]) <= 1e-5 * colocated[i]);
      }
    }
  }
}
