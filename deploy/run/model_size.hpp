// How many parameters a graph's model has, in total and per layer-holding
// actor, counted from `model:` and the actors' layer ranges without building it.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/graph/graph_spec.hpp"

namespace troupe {

/// Parameters of the graph's GPT: each actor that holds layers counts its
/// ranges (embeddings with layer 0, the head with the last layer), as
/// ops::gpt_parameter_count does; `total` is their sum.
struct parameter_count {
  std::int64_t total = 0;
  std::vector<std::pair<std::string, std::int64_t>> per_actor; ///< in the graph's actor order
};

parameter_count count_parameters(const graph_spec& g);

/// One line: `parameters: 1,234,567 (s0 600,000, s1 634,567)`.
std::string to_string(const parameter_count& p);

/// `{"total": N, "per_actor": {"s0": n, ...}}`.
nlohmann::json to_json(const parameter_count& p);

} // namespace troupe
