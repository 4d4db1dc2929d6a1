// The example plugin: a graph loads the library, uses its policy by name, and trains.
#include <cstdio>
#include <cstdlib>

#include <sys/wait.h>

#include <caf/actor_system.hpp>
#include <doctest/doctest.h>

#include "deploy/cli/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "schedulers/stage_policy.hpp"

using namespace troupe;

namespace {

std::string plugin_path() {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE_MESSAGE(build, "TROUPE_BUILD_DIR is set by CTest");
  return std::string{build} + "/examples/libtroupe_greedy_policy.so";
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
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  auto cmd = std::string{build} + "/deploy/troupe check examples/plugin/greedy.yaml --set 'plugins=[]' 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  while (auto n = fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int status = pclose(p);
  INFO(out);
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(out.find("greedy.yaml:7:") != std::string::npos);
  CHECK(out.find("unknown schedule 'greedy_backward_first'") != std::string::npos);
  CHECK(out.find("known: ") != std::string::npos);
}
