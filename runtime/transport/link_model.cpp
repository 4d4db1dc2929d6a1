// The emulated link's schedule: serialisation behind earlier frames plus latency.
#include "runtime/transport/link_model.hpp"

#include <algorithm>

namespace troupe::net {

namespace {

link_pacer::clock::duration seconds(double s) {
  return std::chrono::duration_cast<link_pacer::clock::duration>(std::chrono::duration<double>(s));
}

} // namespace

link_pacer::clock::time_point link_pacer::start(std::size_t bytes, clock::time_point queued) {
  auto s = std::max(queued, busy_until_);
  busy_until_ = m_.bytes_per_s > 0 ? s + seconds(static_cast<double>(bytes) / m_.bytes_per_s) : s;
  return s;
}

link_pacer::clock::time_point link_pacer::release(clock::time_point start, std::size_t end) const {
  auto t = start + seconds(m_.latency_s);
  if (m_.bytes_per_s > 0)
    t += seconds(static_cast<double>(end) / m_.bytes_per_s);
  return t;
}

std::size_t link_pacer::chunk_bytes() const noexcept {
  if (m_.bytes_per_s <= 0)
    return std::size_t{1} << 30; // latency only: one write per frame
  auto per_ms = static_cast<std::size_t>(m_.bytes_per_s / 1000);
  return std::clamp<std::size_t>(per_ms, 4096, std::size_t{1} << 20);
}

} // namespace troupe::net
