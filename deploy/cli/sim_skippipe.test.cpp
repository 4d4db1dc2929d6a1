// SkipPipe's paths under the simulated clock (#16): one microbatch alone takes
// its path's closed form, and the plan's own estimate differs from it only by
// SkipPipe's loss (f₀/4 where the simulator runs the head).
#include <doctest/doctest.h>

#include "actors/skippipe_plan.hpp"
#include "deploy/run/run_graph.hpp"
#include "deploy/cli/sim_calibrate.hpp"
#include "deploy/cli/sim_skippipe.hpp"

using namespace troupe;
using namespace troupe::sched;

TEST_CASE("one microbatch alone on a SkipPipe path takes the closed form under the simulated clock") {
  // Six nodes, one per position, one microbatch: nothing shares a node or a link.
  // No clipping: the norm reduction would add a round trip over the links. (Six
  // nodes on six positions run in `troupe run` too, which takes gpipe only.)
  auto loaded = load_graph_for_cli(
    "examples/skippipe-geo20.yaml",
    {"network.nodes=6", "pipeline.microbatches=1", "pipeline.schedule=gpipe", "train.grad_clip=0"}, false);
  REQUIRE(loaded.ok());
  const auto& g = *loaded.graph;
  auto plan = plan_skippipe_graph(g, false);
  REQUIRE(plan);
  REQUIRE(plan->paths.size() == 1);
  const auto& nodes = plan->paths[0].nodes;
  REQUIRE(nodes.size() == 4);

  cluster_config base;
  base.model = {g.model.layers, g.model.d_model, g.model.heads, g.model.context, g.model.vocab, g.data.batch};
  auto device = cli::resolve_device(g.sim);
  REQUIRE(device);
  base.costs.device = *device;
  base.costs.dtype = "f32";
  base.activation_bytes = 4;
  base.reduce_norm = false;
  base.steps = 1;
  auto c = cli::skippipe_cluster(g, plan->where, plan->paths, 4, base);
  REQUIRE(c);
  auto r = simulate_cluster(*c);
  REQUIRE_MESSAGE(r, r.error().message);

  // Forward on every node, the head on the start, backward back along the path,
  // each hop's delay twice (latency + bytes / bandwidth + overhead); before the
  // first forward, the second node's credit grant crosses their link (a stage
  // runs a forward only with its receiver's credit).
  const int k = g.model.layers / g.pipeline.stages;
  const auto first = costs_of(base.model, base.costs, k, false, true);
  const auto block = costs_of(base.model, base.costs, k, false);
  const auto head = costs_of(base.model, base.costs, 0, true);
  const double bytes = 4.0 * g.model.d_model * g.model.context * g.data.batch;
  double delays = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    auto l = g.network.link(nodes[i], nodes[(i + 1) % nodes.size()]);
    delays += l.latency + bytes / l.bandwidth + g.network.overhead;
  }
  const double closed =
    first.forward + first.backward + head.forward + head.backward + 3 * (block.forward + block.backward) + 2 * delays;
  const double credit = g.network.link(nodes[1], nodes[0]).latency;
  CHECK(r->iteration_s == doctest::Approx(closed + credit).epsilon(1e-9));
  // The plan: SkipPipe's f₀/4 for the loss, a backward of 1.5 forwards (the
  // example's backward_ratio) and no credits.
  CHECK(plan->planned == doctest::Approx(closed - head.forward - head.backward + first.forward / 4).epsilon(1e-6));
}
