// Test support for the data sources: a scratch folder removed at the end, and a
// small graph around a `data:` section, loaded with the built-in data sources.
#pragma once

#include <filesystem>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "runtime/actor/registry.hpp"
#include "runtime/graph/graph_loader.hpp"

namespace troupe::testing {

/// A fresh folder `troupe_NAME_PID` under the temporary directory, removed with this.
struct scratch_dir {
  std::filesystem::path path;
  explicit scratch_dir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / fmt::format("troupe_{}_{}", name, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_dir() { std::filesystem::remove_all(path); }
};

/// A two-layer model of `vocab` tokens at context 16 with `data: DATA`, loaded
/// (and its data checked) as `DIR/g.yaml`.
inline load_result load_data_graph(const std::string& data, const std::filesystem::path& dir, int vocab = 300) {
  register_builtin_actors();
  load_options opts;
  opts.vocabulary = [] { return make_vocabulary(); };
  auto text = fmt::format("model: {{layers: 2, d_model: 32, heads: 2, context: 16, vocab: {}}}\n"
                          "data: {}\n"
                          "train: {{steps: 2}}\n",
                          vocab, data);
  return load_graph_text(text, dir / "g.yaml", opts);
}

} // namespace troupe::testing
