// The example plugins: a graph loads the library, uses its stage policy or its
// local-update method by name, and trains.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include <sys/wait.h>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "schedulers/policies/stage_policy.hpp"
#include "schedulers/sync/sync_policy.hpp"

using namespace troupe;

namespace {

std::string plugin_path(const std::string& name = "greedy_policy") {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE_MESSAGE(build, "TROUPE_BUILD_DIR is set by CTest");
  return std::string{build} + "/examples/libtroupe_" + name + ".so";
}

/// `troupe check FILE --set SET` in a fresh process: its exit status and output.
std::pair<int, std::string> check_without_plugins(const std::string& file) {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  auto cmd = std::string{build} + "/deploy/troupe check " + file + " --set 'plugins=[]' 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  while (auto n = fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int status = pclose(p);
  return {WEXITSTATUS(status), out};
}

} // namespace

TEST_CASE("a graph trains with a stage policy that a plugin registers") {
  auto loaded = load_graph_for_cli("examples/plugin/greedy.yaml",
                                   {"plugins=[" + plugin_path() + "]", "train.steps=6", "train.eval_every=0",
                                    "train.eval_batches=2", "train.warmup=2", "pipeline.microbatches=4"});
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  CHECK(loaded.graph->pipeline.schedule == "greedy_backward_first");
  auto names = sched::policy_names();
  CHECK(std::find(names.begin(), names.end(), "greedy_backward_first") != names.end());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  REQUIRE_MESSAGE(r, sys.render(r.error()));
  CHECK(r->steps == 6);
  REQUIRE(r->train_loss.has_value());
  CHECK(*r->train_loss < 5.5);
}

TEST_CASE("without the plugin, troupe check rejects the policy name and lists the known ones") {
  // A fresh process: plugins stay loaded for the life of the one that loaded them.
  auto [status, out] = check_without_plugins("examples/plugin/greedy.yaml");
  INFO(out);
  CHECK(status == 2);
  CHECK(out.find("greedy.yaml:7:") != std::string::npos);
  CHECK(out.find("unknown schedule 'greedy_backward_first'") != std::string::npos);
  CHECK(out.find("known: ") != std::string::npos);
}

TEST_CASE("replicas train with a local-update method that a plugin registers, exchanging every H steps") {
  auto loaded =
    load_graph_for_cli("examples/plugin/periodic_average.yaml",
                       {"plugins=[" + plugin_path("periodic_average") + "]", "train.steps=8", "train.eval_every=0",
                        "train.eval_batches=2", "train.warmup=2", "local_update.sync_every=4"});
  INFO(to_string(loaded.errors));
  REQUIRE(loaded.ok());
  CHECK(loaded.graph->local_update.algorithm == "periodic_average");
  auto names = sched::sync_method_names();
  CHECK(std::find(names.begin(), names.end(), "periodic_average") != names.end());
  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto r = run_graph(sys, *loaded.graph);
  REQUIRE_MESSAGE(r, sys.render(r.error()));
  CHECK(r->steps == 8);
  REQUIRE(r->train_loss.has_value());
  CHECK(r->losses.back() < r->losses.front());
  // Each sync actor sent its reduce-scatter and all-gather twice (after steps 4
  // and 8); over the 4 replicas of a position that is 2(R-1) times the stage's
  // f32 parameters per exchange, exactly (a ring all-reduce's bytes).
  std::map<std::string, std::int64_t> params, sent;
  for (const auto& s : r->summaries)
    (s.actor.ends_with("_sync") ? sent[s.actor.substr(2, 2)] += s.bytes_sent : params[s.actor] = s.params_bytes);
  int syncs = 0;
  for (const auto& s : r->summaries)
    syncs += s.actor.ends_with("_sync");
  CHECK(syncs == 8);
  for (std::string pos : {"s0", "s1"}) {
    CAPTURE(pos);
    CHECK(params["r0" + pos] > 0);
    CHECK(sent[pos] == 2 * 2 * (4 - 1) * params["r0" + pos]);
  }
}

TEST_CASE("without the plugin, the local-update method is an unknown algorithm at its position") {
  auto [status, out] = check_without_plugins("examples/plugin/periodic_average.yaml");
  INFO(out);
  CHECK(status == 2);
  CHECK(out.find("periodic_average.yaml:10:") != std::string::npos);
  CHECK(out.find("unknown algorithm 'periodic_average'") != std::string::npos);
  CHECK(out.find("known: diloco, streaming_diloco, noloco, sparseloco, desloc") != std::string::npos);
}
