// Emulating a slower link on the sending side: when each piece of a frame may
// be handed to the real transport so the bytes flow at the modelled rate and delay.
#pragma once

#include <chrono>
#include <cstddef>

#include "runtime/transport/transport.hpp"

namespace troupe::net {

/// Schedules the frames of one connection direction on an emulated link.
///
/// A frame queued at `t_q` starts transmitting at max(t_q, busy-until), occupies
/// the link for bytes / bandwidth, and its byte `k` may leave once it would have
/// arrived: start + (k + 1) / bandwidth + latency. Frames back to back keep the
/// link busy, so latency costs no throughput. Not thread-safe: one sender uses it.
class link_pacer {
public:
  using clock = std::chrono::steady_clock;

  explicit link_pacer(link_model m) : m_(m) {}

  /// True when the model limits anything.
  bool active() const noexcept { return m_.bytes_per_s > 0 || m_.latency_s > 0; }

  /// Reserves the link for a frame of `bytes` queued at `queued`; returns its start.
  clock::time_point start(std::size_t bytes, clock::time_point queued);

  /// When the first `end` bytes of a frame that started at `start` may be sent.
  clock::time_point release(clock::time_point start, std::size_t end) const;

  /// How many bytes to write at a time so the rate is smooth: about a
  /// millisecond of transmission, between 4 KiB and 1 MiB.
  std::size_t chunk_bytes() const noexcept;

private:
  link_model m_;
  clock::time_point busy_until_{};
};

} // namespace troupe::net
