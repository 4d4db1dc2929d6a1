// The middle value of a sample, for the straggler statistics of real runs
// (step_stats.cpp) and of simulated ones (schedulers/sim/straggler.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace troupe {

/// The middle value (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty())
    return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1)
    return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

} // namespace troupe
