// A point in a device's queued work: a tensor written by that work may be read
// only after it. How a CUDA stage hands activations to a reader on another stream.
#pragma once

#include <memory>

namespace troupe {

/// Marks the end of the queued device work that writes some tensor. A reader on
/// the same kind of device orders its own queue after the fence (a backend
/// downcasts to its kind: CUDA waits on an event with cudaStreamWaitEvent); a
/// reader on the host calls wait().
class device_fence {
public:
  virtual ~device_fence() = default;
  /// Blocks the calling thread until the work before the fence is done. Throws
  /// std::runtime_error when the device reports an error.
  virtual void wait() const = 0;
};

/// Shared by every message that carries a tensor the fenced work writes.
using device_fence_ptr = std::shared_ptr<const device_fence>;

} // namespace troupe
