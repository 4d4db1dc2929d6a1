// What a local-update method saves of one replica's side of its exchanges: the
// sync actor writes it as that actor's checkpoint part and hands it back on a
// resume (#25 item 4). Plain named values, so each method says what it keeps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace troupe::sched {

/// A sync policy's state: named lists of f32 values (saved globals, outer
/// momentum, error feedback, an exchange's own input) and named counts.
struct sync_state {
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::int64_t> counts;

  /// Saved value list `name`, which must hold `size` values; throws
  /// std::invalid_argument naming it otherwise.
  const std::vector<float>& take(const std::string& name, std::size_t size) const;
  /// Saved count `name`; throws std::invalid_argument naming it when absent.
  std::int64_t count(const std::string& name) const;
};

} // namespace troupe::sched
