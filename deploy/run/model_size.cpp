// Parameter counts of a graph's model, from its config (deploy/run/model_size.hpp).
#include "deploy/run/model_size.hpp"

#include <fmt/format.h>

#include "ops/gpt.hpp"
#include "ops/model_config.hpp"

namespace troupe {

namespace {

/// `n` with thousands separators: 124439808 -> 124,439,808.
std::string grouped(std::int64_t n) {
  auto digits = std::to_string(n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

} // namespace

parameter_count count_parameters(const graph_spec& g) {
  const auto cfg = ops::model_config(g); // SkipPipe: stage 0 holds the head (#14)
  parameter_count p;
  for (const auto& a : g.actors) {
    if (!a.role.holds_layers)
      continue;
    std::int64_t n = 0;
    for (const auto& r : a.layers)
      n += ops::gpt_parameter_count(cfg, r.begin, r.end);
    p.per_actor.emplace_back(a.name, n);
    if (a.replica == 0) // the model's size: replicas hold copies
      p.total += n;
  }
  return p;
}

std::string to_string(const parameter_count& p) {
  std::string parts;
  for (const auto& [name, n] : p.per_actor)
    parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", name, grouped(n));
  return fmt::format("parameters: {} ({})", grouped(p.total), parts);
}

nlohmann::json to_json(const parameter_count& p) {
  nlohmann::json per_actor = nlohmann::json::object();
  for (const auto& [name, n] : p.per_actor)
    per_actor[name] = n;
  return {{"total", p.total}, {"per_actor", per_actor}};
}

} // namespace troupe
