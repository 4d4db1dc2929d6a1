// Built-in `network:` presets: named sets of locations with measured links
// between them, for planning and emulating geo-distributed training.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/graph/graph_spec.hpp"

namespace troupe {

/// A preset: its locations, the links between every two of them, and where the numbers come from.
struct network_preset {
  std::string name;
  std::string source;
  std::vector<std::string> locations;
  std::vector<std::vector<network_link>> links; ///< [i][j], symmetric
  network_link within;                          ///< two nodes at one location
};

/// Every preset, `geo12` first.
const std::vector<network_preset>& network_presets();
/// Their names.
std::vector<std::string> network_preset_names();
/// The preset called `name`, or nullptr.
const network_preset* find_network_preset(std::string_view name);

} // namespace troupe
