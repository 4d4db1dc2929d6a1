// The CAF actor-system bootstrap: one config that registers every message
// type and error category, and picks the scheduler policy and thread count.
#pragma once

#include <cstddef>
#include <string>

#include <caf/actor_system_config.hpp>

namespace troupe {

/// Scheduler settings for one actor system.
struct runtime_options {
  /// Worker threads; 0 = one per hardware core (`TROUPE_THREADS` overrides).
  std::size_t threads = 0;
  /// `sharing` (one shared queue: lowest latency here) or `stealing`.
  std::string policy = "sharing";
  /// Messages an actor may handle before yielding its worker thread.
  std::size_t max_throughput = 1000;
};

/// The options from the environment: `TROUPE_THREADS`, `TROUPE_SCHEDULER`
/// (`sharing`/`stealing`), `TROUPE_MAX_THROUGHPUT`, over the defaults above.
runtime_options runtime_options_from_env();

/// The actor_system_config every troupe process uses: message types from
/// runtime/actor/messages.hpp, the `troupe` error category, quiet logging and the
/// scheduler from `opts`.
class troupe_config : public caf::actor_system_config {
public:
  explicit troupe_config(const runtime_options& opts = runtime_options_from_env());
  const runtime_options& options() const noexcept { return opts_; }

private:
  runtime_options opts_;
};

/// Registers the types of runtime/actor/messages.hpp with `cfg` (troupe_config does it).
void register_message_types(caf::actor_system_config& cfg);

} // namespace troupe
