// The registry of step-boundary components and the making of a stage's stack.
#include "actors/boundary/step_boundary.hpp"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace troupe {

namespace {
std::mutex registry_mutex;
std::vector<step_boundary_type>& registry() { // in registration order: the stack's order
  static std::vector<step_boundary_type> types;
  return types;
}
void add_type(step_boundary_type t) {
  std::lock_guard lock{registry_mutex};
  auto& types = registry();
  auto it = std::find_if(types.begin(), types.end(), [&](const auto& x) { return x.name == t.name; });
  if (it != types.end())
    *it = std::move(t);
  else
    types.push_back(std::move(t));
}
/// The built-ins come first, whoever registers first: a plugin's component
/// stacks after them.
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, register_builtin_step_boundaries);
}
} // namespace

void register_builtin_step_boundaries() {
  add_type(ddp_ring_boundary());
  add_type(tied_embeddings_boundary()); // below the ring (it adds the summed gradients), above ZeRO's shards
  add_type(zero_shards_boundary());
  add_type(local_optimizer_boundary());
  add_type(outer_exchange_boundary());
}

void register_step_boundary(step_boundary_type t) {
  ensure_builtins();
  add_type(std::move(t));
}

std::vector<boundary_choice> select_step_boundaries(const graph_spec& g, const actor_spec& stage) {
  ensure_builtins();
  std::vector<boundary_choice> out;
  std::lock_guard lock{registry_mutex};
  for (const auto& t : registry())
    if (t.select)
      if (auto c = t.select(g, stage)) {
        c->type = t.name;
        out.push_back(std::move(*c));
      }
  return out;
}

std::vector<std::unique_ptr<step_boundary>> make_step_boundaries(stage_host& host,
                                                                 const std::vector<boundary_choice>& choices) {
  ensure_builtins();
  std::vector<std::unique_ptr<step_boundary>> out;
  {
    std::lock_guard lock{registry_mutex};
    const auto& types = registry();
    auto make = [&](const boundary_choice& c) {
      auto it = std::find_if(types.begin(), types.end(), [&](const auto& x) { return x.name == c.type; });
      if (it == types.end()) {
        std::string known;
        for (const auto& t : types)
          known += (known.empty() ? "" : ", ") + t.name;
        throw std::invalid_argument(fmt::format("no step-boundary component '{}' (registered: {})", c.type, known));
      }
      out.push_back(it->make(host, c));
    };
    for (const auto& c : choices)
      make(c);
    if (std::none_of(out.begin(), out.end(), [](const auto& b) { return b->applies_update(); }))
      make({"local_optimizer", -1, {}}); // the default: the stage updates its own parameters
  }
  auto applying = std::count_if(out.begin(), out.end(), [](const auto& b) { return b->applies_update(); });
  if (applying != 1)
    throw std::invalid_argument(
      fmt::format("a stage's step boundary needs exactly one component that applies the update, not {}", applying));
  return out;
}

} // namespace troupe
