// The process-wide actor-type and section-expander registries, name
// suggestions and the loader's vocabulary.
#include "runtime/actor/registry.hpp"

#include <algorithm>
#include <numeric>

namespace troupe {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      // a swap of two neighbours counts as one edit ("1fb1" -> "1f1b")
      diag = up;
    }
  }
  return row[b.size()];
}

std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& known) {
  std::optional<std::string> best;
  std::size_t best_d = 0;
  for (const auto& k : known) {
    auto d = edit_distance(word, k);
    if (!best || d < best_d) {
      best = k;
      best_d = d;
    }
  }
  if (!best)
    return std::nullopt;
  auto longer = std::max(word.size(), best->size());
  auto allowed = std::max<std::size_t>(1, (longer + 2) / 3);
  if (best_d == 0 || best_d > allowed)
    return std::nullopt;
  return best;
}

named_registry<actor_type>& actor_registry() {
  static named_registry<actor_type> instance;
  return instance;
}

bool register_actor_type(std::string name, actor_type t, std::string summary) {
  return actor_registry().add(std::move(name), std::move(t), std::move(summary));
}

named_registry<section_expander>& section_expander_registry() {
  static named_registry<section_expander> instance;
  return instance;
}

bool register_section_expander(std::string section, section_expander e, std::string summary) {
  return section_expander_registry().add(std::move(section), std::move(e), std::move(summary));
}

graph_vocabulary make_vocabulary(const std::vector<std::string>& extra_schedules) {
  auto v = graph_vocabulary::builtin();
  for (const auto& name : actor_registry().names())
    if (auto e = actor_registry().find(name))
      v.actor_types[name] = e->factory.info;
  for (const auto& name : section_expander_registry().names())
    if (auto e = section_expander_registry().find(name))
      v.expanders.emplace_back(name, e->factory);
  for (const auto& s : extra_schedules)
    if (std::find(v.schedules.begin(), v.schedules.end(), s) == v.schedules.end())
      v.schedules.push_back(s);
  return v;
}

} // namespace troupe
