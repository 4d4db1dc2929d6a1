// A local-update sync actor's checkpoint part (#25 item 4).
#include "actors/outer_sync_checkpoint.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"

namespace troupe {

namespace {

const std::string prefix = "sync.";

std::int64_t number(const std::string& key, std::string_view text) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < 0)
    throw std::invalid_argument(fmt::format("'{}' in the metadata is '{}', not a count", key, text));
  return v;
}

std::string text_of(const std::map<int, step_t>& prepared) {
  std::string out;
  for (const auto& [f, step] : prepared)
    out += fmt::format("{}{}:{}", out.empty() ? "" : ",", f, step);
  return out;
}

} // namespace

std::vector<named_handle> outer_sync_tensors(const sched::sync_state& s) {
  std::vector<named_handle> out;
  for (const auto& [name, values] : s.values) {
    auto t = tensor_handle::empty({static_cast<std::int64_t>(values.size())});
    std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
    out.push_back({prefix + name, std::move(t)});
  }
  return out;
}

std::map<std::string, std::string> outer_sync_metadata(const outer_sync_saved& s) {
  std::map<std::string, std::string> md{{"outer.performed", std::to_string(s.performed)},
                                        {"outer.prepared", text_of(s.prepared)}};
  for (const auto& [name, n] : s.state.counts)
    md[prefix + name] = std::to_string(n);
  return md;
}

outer_sync_saved read_outer_sync_part(const safetensors_header& h, const safetensors_file* f) {
  outer_sync_saved out;
  auto get = [&](const std::string& key) -> const std::string& {
    auto it = h.metadata.find(key);
    if (it == h.metadata.end())
      throw std::invalid_argument(fmt::format("no '{}' in the metadata", key));
    return it->second;
  };
  out.performed = static_cast<long>(number("outer.performed", get("outer.performed")));
  const auto& prepared = get("outer.prepared");
  for (std::size_t at = 0; at < prepared.size();) {
    auto comma = std::min(prepared.find(',', at), prepared.size());
    auto item = std::string_view{prepared}.substr(at, comma - at);
    auto colon = item.find(':');
    if (colon == std::string_view::npos)
      throw std::invalid_argument(
        fmt::format("'outer.prepared' in the metadata is '{}', not FRAGMENT:STEP,…", prepared));
    out.prepared[static_cast<int>(number("outer.prepared", item.substr(0, colon)))] =
      number("outer.prepared", item.substr(colon + 1));
    at = comma + 1;
  }
  for (const auto& [key, value] : h.metadata)
    if (key.starts_with(prefix))
      out.state.counts[key.substr(prefix.size())] = number(key, value);
  for (const auto& t : h.tensors) {
    if (!t.name.starts_with(prefix) || t.type != dtype::f32 || t.shape.rank() != 1)
      throw std::invalid_argument(
        fmt::format("tensor '{}' is {} {}, not a 1-d f32 'sync.NAME'", t.name, to_string(t.type), to_string(t.shape)));
    std::vector<float> values(static_cast<std::size_t>(t.shape.numel()), 0.0f);
    if (f) {
      auto v = f->find(t.name);
      std::memcpy(values.data(), v.raw(), v.nbytes());
    }
    out.state.values[t.name.substr(prefix.size())] = std::move(values);
  }
  return out;
}

sync_place sync_place_of(const graph_spec& g, const actor_spec& stage) {
  // With replica groups the method runs between the groups: an outer_sync
  // speaks for its group, with the replicas of the same place in the other groups.
  const int group = g.sync_group_size();
  return {stage.replica / group, std::max(g.data_parallel.replicas, 1) / group};
}

std::map<std::string, std::string> outer_sync_identity(const graph_spec& g, const actor_spec& a) {
  std::map<std::string, std::string> id{{"local_update.algorithm", g.local_update.algorithm},
                                        {"data_parallel.replicas", std::to_string(g.data_parallel.replicas)},
                                        {"local_update.replica_groups", std::to_string(g.local_update.replica_groups)}};
  for (const auto& [key, value] : g.local_update.options) // the method's settings: its schedule and its state
    id["local_update." + key] = value;
  if (const auto* stage = g.served_stage(a))
    id["stage"] = stage->name;
  return id;
}

std::optional<std::string> check_outer_sync_part(const graph_spec& g, const actor_spec& a,
                                                 const safetensors_header& part) {
  const auto* stage = g.served_stage(a);
  const auto* method = sched::find_sync_method(g.local_update.algorithm);
  if (!stage || !method)
    return fmt::format("outer_sync '{}' has no stage or no method '{}'", a.name, g.local_update.algorithm);
  try {
    auto saved = read_outer_sync_part(part, nullptr);
    // The method made as the run will make it, with zeros of the stage's
    // fragment sizes, takes up the saved state or says why not.
    std::vector<std::vector<float>> start;
    for (auto n : sched::fragment_sizes(method->fragments(g.local_update), outer_tensor_sizes(g, *stage)))
      start.emplace_back(n, 0.0f);
    auto place = sync_place_of(g, *stage);
    method->make({g.local_update, place.replica, place.replicas, g.data.seed, std::move(start)})->restore(saved.state);
  } catch (const std::exception& e) {
    return e.what();
  }
  return std::nullopt;
}

} // namespace troupe
