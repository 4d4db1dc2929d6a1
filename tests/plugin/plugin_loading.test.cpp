// Tests of plugins: a graph's `plugins:` loads a shared library whose actor
// types then validate and run like built-in ones; bad libraries are graph errors.
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>

#include <caf/all.hpp>

#include "deploy/run/run_graph.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/actor/plugin.hpp"

namespace {

using namespace troupe;
namespace fs = std::filesystem;

fs::path env_path(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (run through ctest)");
  return v;
}

load_result load_with(const std::string& plugins, const std::string& actors, const fs::path& file) {
  load_options o;
  o.check_corpus = false;
  o.vocabulary = troupe_vocabulary;
  return load_graph_text("model: {layers: 1, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\n"
                         "train: {steps: 1}\nplugins: [" +
                           plugins + "]\nactors:\n" + actors,
                         file, o);
}

} // namespace

TEST_CASE("a plugin named relative to the graph file registers an actor type that runs") {
  auto lib = env_path("TROUPE_TEST_PLUGIN");
  auto graph_file = lib.parent_path() / "plugin_graph.yaml";
  auto actors = "  - {name: p, type: plugin_echo, steps: 7}\n  - {name: q, type: plugin_echo}\n"
                "channels:\n  - {from: p, to: q}\n";
  auto before = load_with("", actors, graph_file);
  REQUIRE(before.errors.size() == 2);
  CHECK(to_string(before.errors[0]).find("unknown actor type 'plugin_echo'") != std::string::npos);

  auto r = load_with(lib.filename().string(), actors, graph_file);
  REQUIRE_MESSAGE(r.ok(), to_string(r.errors));
  CHECK(r.graph->plugins.at(0).resolved == lib);
  auto loaded = loaded_plugins().size();
  CHECK(loaded >= 1);
  CHECK(load_with(lib.string(), actors, graph_file).ok()); // loading again changes nothing
  CHECK(loaded_plugins().size() == loaded);

  troupe_config cfg;
  caf::actor_system sys{cfg};
  auto run = run_graph(sys, *r.graph);
  REQUIRE_MESSAGE(run, error_message(run.error()));
  CHECK(run->steps == 7);
  CHECK(run->tokens == 2); // p and q each saw the one channel between them
}

TEST_CASE("a plugin's own check rejects its bad keys") {
  auto lib = env_path("TROUPE_TEST_PLUGIN");
  auto r = load_with(lib.string(), "  - {name: p, type: plugin_echo, steps: 0}\n", "g.yaml");
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) == "g.yaml:6:5: steps: plugin_echo needs a positive 'steps'");
}

TEST_CASE("libraries that are missing, not libraries, or not plugins are reported at their entry") {
  auto no_entry = env_path("TROUPE_TEST_NO_ENTRY");
  auto r = load_with(no_entry.string() + ", missing.so", "  - {name: x, type: data_loader}\n", "g.yaml");
  REQUIRE(r.errors.size() == 2);
  CHECK(to_string(r.errors[0]) == "g.yaml:4:11: plugins[0]: cannot load plugin '" + no_entry.string() +
                                    "': it does not export `extern \"C\" void troupe_register_plugin()`");
  CHECK(to_string(r.errors[1]) == "g.yaml:4:" + std::to_string(13 + no_entry.string().size()) +
                                    ": plugins[1]: cannot load plugin 'missing.so': no such file");
  auto text = fs::temp_directory_path() / ("troupe_not_a_library_" + std::to_string(::getpid()) + ".so");
  {
    std::ofstream out{text};
    for (int i = 0; i < 100; ++i)
      out << "this is text, not a shared library\n";
  }
  auto err = load_plugin(text);
  REQUIRE(err);
  CHECK(error_message(err) == "invalid ELF header");
  fs::remove(text);
}
