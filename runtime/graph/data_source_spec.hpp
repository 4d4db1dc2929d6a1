// What a data source kind registers for the graph loader: the `data:` key that
// selects it and names its file, the other keys it reads (an option schema
// checked at each key's position), the document cuts it makes, and a check of
// its files against the model. The sources themselves live in actors/data/.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/option_spec.hpp"

namespace troupe {

struct graph_spec;

/// One data source kind as the loader sees it.
struct data_source_info {
  std::string name;    ///< `text`, `tokens`, `jsonl`, or a plugin's
  std::string key;     ///< the `data:` key that selects it and names its file: `corpus`, `tokens`, `jsonl`
  std::string summary; ///< one line for listings
  /// Every other key it reads under `data:` (`dtype`, `tokenizer.model` for a nested one).
  std::vector<option_spec> options;
  /// The `data.documents` values it can cut its stream into (besides `none`).
  std::vector<std::string> documents;
  /// Checks the data against the graph (file contents, the vocabulary against
  /// model.vocab) once the file is known to be a readable regular file; reports
  /// at the keys' positions (graph_spec::where).
  std::function<void(const graph_spec&, diagnostics&)> check;
};

/// The data source kinds the loader accepts, as registered (actors/builtin.cpp sets them).
std::vector<data_source_info> data_sources();
/// Sets where data_sources() comes from: called once the kinds are registered.
void set_data_sources(std::function<std::vector<data_source_info>()> source);

} // namespace troupe
