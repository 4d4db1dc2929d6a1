// A sync policy's saved state (#25 item 4).
#include "schedulers/sync/sync_state.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

const std::vector<float>& sync_state::take(const std::string& name, std::size_t size) const {
  auto it = values.find(name);
  if (it == values.end())
    throw std::invalid_argument(fmt::format("no saved '{}'", name));
  if (it->second.size() != size)
    throw std::invalid_argument(fmt::format("'{}' holds {} values, this stage's {}", name, it->second.size(), size));
  return it->second;
}

std::int64_t sync_state::count(const std::string& name) const {
  auto it = counts.find(name);
  if (it == counts.end())
    throw std::invalid_argument(fmt::format("no saved count '{}'", name));
  return it->second;
}

} // namespace troupe::sched
