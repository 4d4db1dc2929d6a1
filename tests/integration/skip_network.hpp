// The network the SkipPipe integration tests plan over: eight nodes in three
// locations (4 positions × 2 replicas), links that make some paths cheaper.
#pragma once

#include <string>

namespace troupe::testing {

inline const std::string skip_network8 = R"(network:
  locations: [a, b, c]
  links:
    - {between: [a, b], latency: 1ms, bandwidth: 1GB/s}
    - {between: [a, c], latency: 8ms, bandwidth: 100MB/s}
    - {between: [b, c], latency: 2ms, bandwidth: 1GB/s}
  within_location: {latency: 0ms, bandwidth: 10GB/s}
  nodes: [a, a, b, b, c, c, a, b]
sim: {device: a100_80gb}
)";

} // namespace troupe::testing
