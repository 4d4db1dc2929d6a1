// A collector of what a connection's handlers and a server's log see, with
// waiting; shared by the transport tests and bench_transport.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/transport/transport.hpp"
#include "tests/sanitizer_time.hpp"

namespace troupe::net {

using troupe::testing::sanitizer_time_factor;

/// Frames, close reasons and log lines in arrival order. With `echo` set, frames
/// are sent straight back instead of kept.
struct inbox {
  std::mutex m;
  std::condition_variable cv;
  std::deque<frame> frames;
  std::vector<std::string> closes;
  std::vector<std::string> logs;
  connection* conn = nullptr; ///< where the last frame came from (read it through sender())
  bool echo = false;

  handlers make() {
    return {[this](connection& c, frame&& f) {
              if (echo) {
                c.send(std::move(f));
                return;
              }
              std::lock_guard g{m};
              conn = &c;
              frames.push_back(std::move(f));
              cv.notify_all();
            },
            [this](connection&, std::string why) {
              std::lock_guard g{m};
              closes.push_back(std::move(why));
              cv.notify_all();
            }};
  }

  std::function<void(std::string)> logger() {
    return [this](std::string line) {
      std::lock_guard g{m};
      logs.push_back(std::move(line));
      cv.notify_all();
    };
  }

  /// Where the last frame came from, read under the lock: the connection's
  /// receive thread writes `conn` at every frame (ThreadSanitizer reported a
  /// test reading it bare while frames still arrived).
  connection* sender() {
    std::lock_guard g{m};
    return conn;
  }

  /// Waits until `p()` holds (checked under the lock); false on timeout (`t`
  /// times sanitizer_time_factor).
  template <class Pred>
  bool wait(Pred p, std::chrono::milliseconds t = std::chrono::seconds(20)) {
    std::unique_lock l{m};
    return cv.wait_for(l, t * static_cast<long>(sanitizer_time_factor), p);
  }
};

} // namespace troupe::net
