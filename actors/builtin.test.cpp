// Tests of the built-in registrations: runtime/ names none of the types
// registered here, and their roles reach the graph loader.
#include "actors/builtin.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

/// The runtime/ C++ sources that make up the library, in every subfolder: tests
/// and benchmarks may name any type (the dashboard's npm packages are not ours).
std::vector<fs::path> runtime_sources() {
  std::vector<fs::path> out;
  for (auto it = fs::recursive_directory_iterator(fs::path{TROUPE_SOURCE_DIR} / "runtime");
       it != fs::recursive_directory_iterator(); ++it) {
    auto name = it->path().filename().string();
    if (name == "node_modules" || name == "dist") {
      it.disable_recursion_pending();
      continue;
    }
    bool code = name.ends_with(".cpp") || name.ends_with(".hpp") || name.ends_with(".cu");
    if (it->is_regular_file() && code && !name.ends_with(".test.cpp") && !name.ends_with(".bench.cpp"))
      out.push_back(it->path());
  }
  return out;
}

graph_spec load(const std::string& text) {
  register_builtin_actors();
  load_options o;
  o.check_corpus = false;
  o.vocabulary = [] { return make_vocabulary(); };
  auto r = load_graph_text(text, "g.yaml", o);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  return *r.graph;
}

} // namespace

TEST_CASE("runtime/ names no actor type that actors/builtin.cpp registers") {
  register_builtin_actors();
  auto types = actor_registry().names();
  REQUIRE(types.size() >= 2);
  auto files = runtime_sources();
  REQUIRE(files.size() > 20); // the scan found the sources
  std::string found;
  for (const auto& f : files) {
    std::ifstream in(f);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n)
      for (const auto& t : types)
        if (line.find(t) != std::string::npos)
          found += fmt::format("{}:{}: names '{}': {}\n", fs::relative(f, TROUPE_SOURCE_DIR).string(), n, t, line);
  }
  CHECK_MESSAGE(found.empty(), "runtime/ must apply role rules (actor_role), not type names:\n" << found);
}

TEST_CASE("the built-in roles: stages hold layers and spread over nodes, the loader goes with the first stage") {
  auto g = load(R"(model: {layers: 4, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 4}
cluster: {nodes: 2}
)");
  REQUIRE(g.actors.size() == 5);
  const auto& loader = *g.find_actor("loader");
  CHECK_FALSE(loader.role.holds_layers);
  CHECK(g.node_of(loader) == 0);
  CHECK(g.node_of(*g.find_actor("s1")) == 0);
  CHECK(g.node_of(*g.find_actor("s2")) == 1);
  CHECK(g.find_actor("s3")->role.holds_layers);
  CHECK(checkpoint_actors(g) == std::vector<std::string>{"loader", "s0", "s1", "s2", "s3"});
  auto stage_id = checkpoint_identity(g, *g.find_actor("s2"));
  CHECK(stage_id.at("type") == "pipeline_stage");
  CHECK(stage_id.at("layers") == "[2, 3)");
  CHECK(stage_id.at("model.d_model") == "8");
  auto loader_id = checkpoint_identity(g, loader);
  CHECK(loader_id.at("type") == "data_loader");
  CHECK(loader_id.at("data.batch") == "1");
  CHECK(loader_id.count("layers") == 0);
}

TEST_CASE("the loader follows the first stage when that stage is placed on another node") {
  auto g = load(R"(model: {layers: 2, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 2}
cluster: {nodes: 2}
actors:
  - {name: s0, node: 1}
  - {name: s1, node: 0}
)");
  CHECK(g.node_of(*g.find_actor("loader")) == 1);
}
