// The graph's name index (graph_spec::find_actor, index_of, channels_from,
// channel_target): O(1) lookups that stay right however `actors` and `channels` change
// between them (grown, shrunk, renamed in place, copied).
#include "runtime/graph/graph_spec.hpp"

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe;

namespace {

actor_spec actor(const std::string& name, bool stage = false, int rank = -1) {
  actor_spec a;
  a.name = name;
  a.type = stage ? "pipeline_stage" : "data_loader";
  a.role.holds_layers = stage;
  a.rank = rank;
  return a;
}

} // namespace

TEST_CASE("lookups follow the actors as they grow, shrink, are renamed and copied") {
  graph_spec g;
  CHECK(g.find_actor("s0") == nullptr);
  for (int i = 0; i < 1000; ++i) {
    g.actors.push_back(actor(fmt::format("s{}", i), true, i));
    CHECK(g.index_of(fmt::format("s{}", i)) == i); // indexed as it grows (a lookup between each push)
  }
  CHECK(g.index_of("s999") == 999);
  CHECK(g.index_of("nobody") == -1);
  g.actors[500].name = "renamed"; // in place: the index must not answer with the old name
  CHECK(g.index_of("renamed") == 500);
  CHECK(g.index_of("s500") == -1);
  g.actors.erase(g.actors.begin() + 10); // everything after moves down by one
  CHECK(g.index_of("s11") == 10);
  CHECK(g.index_of("s10") == -1);
  CHECK(g.index_of("s999") == 998);
  auto copy = g;
  copy.actors.push_back(actor("extra"));
  CHECK(copy.index_of("extra") == 999);
  CHECK(g.index_of("extra") == -1); // the original did not grow
  CHECK(g.find_actor("s42") == &g.actors[41]);
  CHECK(copy.find_actor("s42") == &copy.actors[41]);
}

TEST_CASE("channels_from lists a name's channels in file order, however the list changed") {
  graph_spec g;
  for (auto n : {"a", "b", "c"})
    g.actors.push_back(actor(n));
  auto link = [&](std::string from, std::string to) {
    channel_spec c;
    c.from = std::move(from), c.to = std::move(to);
    g.channels.push_back(std::move(c));
  };
  link("a", "b"), link("b", "c"), link("a", "c");
  CHECK(g.channels_from("a") == std::vector<int>{0, 2});
  CHECK(g.channels_from("c").empty());
  g.channels.erase(g.channels.begin());
  CHECK(g.channels_from("a") == std::vector<int>{1});
  link("c", "a");
  CHECK(g.channels_from("c") == std::vector<int>{2});
  g.actors[2].type = "allreduce_peer";
  CHECK(g.channel_target(g.actors[0], "allreduce_peer") == &g.actors[2]);
  CHECK(g.channel_target(g.actors[1], "data_loader") == nullptr);
}
