// The data source registry: the kinds by name, for the graph loader (their
// option schemas and checks) and the data loader (how each opens).
#include <stdexcept>

#include <fmt/format.h>

#include "actors/data/token_source.hpp"
#include "runtime/actor/named_registry.hpp"

namespace troupe {

namespace {

named_registry<data_source_kind>& registry() {
  static named_registry<data_source_kind> instance;
  return instance;
}

} // namespace

std::vector<std::size_t> token_stream::document_starts(document_source source) const {
  throw std::runtime_error(fmt::format("this data source cannot cut documents '{}'", to_string(source)));
}

bool register_data_source(data_source_kind kind) {
  auto name = kind.info.name;
  auto summary = kind.info.summary;
  return registry().add(std::move(name), std::move(kind), std::move(summary));
}

std::vector<data_source_kind> registered_data_sources() {
  std::vector<data_source_kind> out;
  for (const auto& name : registry().names())
    if (auto e = registry().find(name))
      out.push_back(e->factory);
  return out;
}

opened_source open_data_source(const graph_spec& g) {
  auto e = registry().find(g.data.source);
  if (!e)
    throw std::runtime_error(fmt::format("no data source kind '{}' is registered", g.data.source));
  auto opened = e->factory.open(g);
  if (!opened.train)
    throw std::runtime_error(fmt::format("data source '{}' opened no stream", g.data.source));
  return opened;
}

} // namespace troupe
