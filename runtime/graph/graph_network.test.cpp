// The `network:` and `skip:` sections: the geo12 preset's measured links, nodes
// placed round robin, and channels whose emulated links come from the network.
#include "runtime/graph/graph_loader.hpp"
#include "runtime/graph/network_presets.hpp"

#include <string>

#include <doctest/doctest.h>

#include "actors/builtin.hpp"

namespace {

using namespace troupe;

[[maybe_unused]] const bool builtin_types = (register_builtin_actors(), true);

load_result load(std::string_view text) {
  load_options o;
  o.check_corpus = false;
  return load_graph_text(text, "g.yaml", o);
}

constexpr const char* head = R"(model:    {layers: 4, d_model: 32, heads: 2, context: 16}
data:     {corpus: kjv, batch: 2}
train:    {steps: 1}
pipeline: {stages: 2, microbatches: 2}
)";

} // namespace

TEST_CASE("the geo12 preset holds SkipPipe's measured links between 12 regions, both ways") {
  const auto* p = find_network_preset("geo12");
  REQUIRE(p);
  REQUIRE(p->locations.size() == 12);
  for (std::size_t a = 0; a < 12; ++a)
    for (std::size_t b = 0; b < 12; ++b)
      if (a != b) {
        CHECK(p->links[a][b].latency > 0);
        CHECK(p->links[a][b].latency == p->links[b][a].latency);
        CHECK(p->links[a][b].bandwidth == p->links[b][a].bandwidth);
      }
  // communication_costs.py: "Australia-Belgium": (129, 0.00982666015625) in ms and GiB/s.
  CHECK(p->links[0][1].latency == doctest::Approx(0.129));
  CHECK(p->links[0][1].bandwidth == doctest::Approx(0.00982666015625 * 1024 * 1024 * 1024));
}

TEST_CASE("network nodes go round robin over the locations, and a node pair prices a channel's link") {
  auto r = load(std::string{head} + R"(network: {preset: geo12, nodes: 14, overhead: 350ms}
channels:
  - {from: s0, to: s1, network: [0, 13]}
  - {from: s1, to: s0, network: [1, 13], latency: 2ms}
)");
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  const auto& g = *r.graph;
  CHECK(g.network.nodes() == 14);
  CHECK(g.network.node_locations[12] == 0); // Australia again
  CHECK(g.network.node_locations[13] == 1); // Belgium
  auto find = [&](std::string_view from) {
    for (const auto& c : g.channels)
      if (c.from == from && !c.expanded)
        return c;
    FAIL("no channel");
    return channel_spec{};
  };
  auto there = find("s0");
  CHECK(there.latency == doctest::Approx(0.129 + 0.35)); // Australia-Belgium + overhead
  CHECK(there.bandwidth == doctest::Approx(0.00982666015625 * 1024 * 1024 * 1024));
  auto back = find("s1");
  CHECK(back.latency == doctest::Approx(0.002));                      // written: kept
  CHECK(back.bandwidth == doctest::Approx(2.0 * 1024 * 1024 * 1024)); // same region: SkipPipe's 2 GiB/s
}

TEST_CASE("a channel naming network nodes needs a network: section and nodes within it") {
  auto none = load(std::string{head} + "channels:\n  - {from: s0, to: s1, network: [0, 1]}\n");
  CHECK(to_string(none.errors).find("no `network:` section") != std::string::npos);
  auto far = load(std::string{head} +
                  "network: {preset: geo12, nodes: 3}\nchannels:\n  - {from: s0, to: s1, network: [0, 3]}\n");
  CHECK(to_string(far.errors).find("channels[0].network[1]: must be at most 2, got 3") != std::string::npos);
}
