// The control protocol's clock estimate and helpers (cluster_protocol.hpp); its
// frames are encoded by their inspect() through control_table.
#include "deploy/cluster/cluster_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace troupe::cluster {

net::frame encode(control_kind k) {
  return wire::write(static_cast<std::uint16_t>(k));
}

void clock_estimate::add(const clock_msg& answer, std::int64_t received_ns) {
  // Steady clocks count from boot: a negative reading is forged, and refusing
  // one keeps the arithmetic below from overflowing.
  if (answer.coordinator_ns < 0 || answer.node_ns < 0 || answer.coordinator_ns > received_ns)
    throw malformed_input(fmt::format("a clock answer (probe at {} ns, node at {} ns) that no probe sent at or "
                                      "before {} ns can have",
                                      answer.coordinator_ns, answer.node_ns, received_ns));
  auto rtt = received_ns - answer.coordinator_ns;
  if (samples_.size() == window)
    samples_.erase(samples_.begin());
  samples_.push_back({rtt, answer.node_ns - (answer.coordinator_ns + rtt / 2)});
}

const clock_estimate::sample* clock_estimate::best() const noexcept {
  auto b =
    std::min_element(samples_.begin(), samples_.end(), [](const sample& x, const sample& y) { return x.rtt < y.rtt; });
  return b == samples_.end() ? nullptr : &*b;
}

std::int64_t clock_estimate::offset_ns() const noexcept {
  auto b = best();
  return b ? b->offset : 0;
}

std::int64_t clock_estimate::error_ns() const noexcept {
  auto b = best();
  return b ? (b->rtt + 1) / 2 : 0;
}

std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

std::string clock_domain() {
  if (const char* forced = std::getenv("TROUPE_CLOCK_DOMAIN"))
    return forced;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::string id;
  std::getline(in, id);
  return id;
}

std::uint64_t file_hash(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return 0;
  std::uint64_t h = 14695981039346656037ull;
  for (std::istreambuf_iterator<char> it{in}, end; it != end; ++it)
    h = (h ^ static_cast<unsigned char>(*it)) * 1099511628211ull;
  return h;
}

} // namespace troupe::cluster
