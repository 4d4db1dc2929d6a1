// Ctrl-C and SIGTERM during `troupe run` and `troupe launch`: the first signal
// asks the run to stop cleanly (actors stopped, traces written, the last
// checkpoint named); a second SIGINT ends the process at once.
#pragma once

#include <atomic>

namespace troupe::cli {

/// While alive, SIGINT and SIGTERM set `signal()` instead of killing the process.
/// A second SIGINT restores the default action and raises it again. One at a time.
class interrupt_guard {
public:
  interrupt_guard();
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;
  ~interrupt_guard();

  /// The signal that arrived (SIGINT or SIGTERM), 0 while none has.
  static const std::atomic<int>& signal() noexcept;
};

/// The exit code of a run stopped by `sig`: 128 + sig, as a shell reports it.
constexpr int interrupted_exit_code(int sig) noexcept {
  return 128 + sig;
}

} // namespace troupe::cli
