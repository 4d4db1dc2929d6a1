// The hang detector: every actor says which handler it is in and what it is
// doing (activity_board, a few atomic stores a message); a watcher thread
// names any actor whose one handler has run longer than `trace.hang_after`.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/trace/trace.hpp"

namespace troupe {

/// What an actor is doing inside a handler: the message it took, refined by
/// the action it runs (kind, microbatch, step, chunk) once it picks one.
struct activity {
  std::int64_t since_ns = 0;       ///< trace time the handler began
  const char* message = "";        ///< a string literal: `activation`, `continue`, ...
  std::optional<span_kind> action; ///< the action, when it runs one
  std::int32_t step = -1, microbatch = -1, chunk = -1;
};

/// One line for a person: `forward of microbatch 3, step 5, chunk 0 (handling
/// a continue message)`, or `handling a gradient message`.
std::string describe(const activity& a);

/// Per-actor activity, indexed by the actor's trace id (trace_recorder::register_actor).
/// Writers are the actors (lock-free); the reader is the watcher thread.
class activity_board {
public:
  static activity_board& global();
  /// Actor `id` entered a handler for `message` (a string literal).
  void enter(std::uint16_t id, const char* message) noexcept;
  /// Actor `id`, inside a handler, runs an action.
  void run(std::uint16_t id, span_kind kind, std::int32_t step, std::int32_t microbatch, std::int32_t chunk) noexcept;
  /// Actor `id` left its handler.
  void leave(std::uint16_t id) noexcept;
  /// What actor `id` is doing now, or nullopt between handlers.
  std::optional<activity> now(std::uint16_t id) const noexcept;
  /// Forgets everything (tests).
  void reset() noexcept;

  static constexpr std::size_t max_actors = trace_recorder::max_counted_actors;

private:
  struct slot {
    std::atomic<std::int64_t> since{0}; ///< 0: not in a handler
    std::atomic<const char*> message{""};
    std::atomic<std::uint64_t> action{0}; ///< kind+1 (0: none), step, microbatch, chunk packed
  };
  std::vector<slot> slots_ = std::vector<slot>(max_actors);
};

/// Actor `id` is in a handler of `message` (a string literal) for the scope's
/// life: what every actor type's handlers open, so the watcher sees them all.
class handler_scope {
public:
  handler_scope(std::uint16_t id, const char* message) noexcept : id_(id) {
    activity_board::global().enter(id, message);
  }
  ~handler_scope() { activity_board::global().leave(id_); }
  handler_scope(const handler_scope&) = delete;
  handler_scope& operator=(const handler_scope&) = delete;

private:
  std::uint16_t id_;
};

/// Watches the board from a thread of its own: an actor in one handler for
/// longer than `after` is reported once per handler through `report`
/// (stderr by default) with its name, node and what it was doing.
class hang_watch {
public:
  using report_fn = std::function<void(const std::string&)>;
  /// Starts watching the actors of this process, which is node `node` of
  /// the run; `after_s` <= 0 watches nothing.
  hang_watch(double after_s, int node, report_fn report = {});
  ~hang_watch();
  hang_watch(const hang_watch&) = delete;
  hang_watch& operator=(const hang_watch&) = delete;

  /// One scan at trace time `now_ns`: reports the fresh hangs and returns how many.
  std::size_t scan(std::int64_t now_ns);

private:
  double after_s_;
  int node_;
  report_fn report_;
  std::vector<std::int64_t> reported_; ///< per actor: the handler start already reported
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace troupe
