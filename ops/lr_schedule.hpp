// Learning-rate schedule: linear warmup, then cosine decay to a floor.
#pragma once

namespace troupe::ops {

/// lr(step) rises linearly from max_lr/warmup to max_lr over `warmup` steps, then
/// follows a half cosine from max_lr down to min_lr at `total` steps, and stays there.
struct warmup_cosine {
  float max_lr = 6e-4f;
  float min_lr = 6e-5f;
  long warmup = 100;
  long total = 5000;

  /// The learning rate of step `step` (counting from 0).
  float at(long step) const;
};

} // namespace troupe::ops
