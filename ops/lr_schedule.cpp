// Warmup + cosine schedule (nanoGPT's get_lr).
#include "ops/lr_schedule.hpp"

#include <cmath>
#include <numbers>

namespace troupe::ops {

float warmup_cosine::at(long step) const {
  if (step < warmup)
    return max_lr * float(step + 1) / float(warmup);
  if (step >= total)
    return min_lr;
  double progress = double(step - warmup) / double(total - warmup > 0 ? total - warmup : 1);
  double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return min_lr + float(coeff) * (max_lr - min_lr);
}

} // namespace troupe::ops
