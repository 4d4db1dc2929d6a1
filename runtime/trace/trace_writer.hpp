// The trace file of a run, written while the run goes: every few hundred
// milliseconds the recorder's new spans and counters are appended, so the
// file holds the whole run however long it is, and a run that crashes or is
// killed leaves a readable trace of what it did up to its last flush.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/trace/trace_export.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe {

/// Streams the global recorder into one Chrome Trace Event file (object form,
/// as to_chrome_json writes it). After every flush the file is complete JSON:
/// the new events overwrite the closing lines, which are written again after
/// them. A flush takes at most a few milliseconds on a thread of its own, so
/// the actors never wait for the disk (they only write their rings).
class trace_writer {
public:
  /// How often the thread flushes: often enough that no ring laps it (a
  /// thread would have to record 65,536 spans in that time), and that a crash
  /// loses little.
  static constexpr std::chrono::milliseconds default_interval{250};

  /// Creates `path` as a valid empty trace and starts flushing every
  /// `interval`. `tokens_per_step` > 0 adds a `tokens_per_s` sample after
  /// every `loss` sample. Recording must be on. An error names the path and
  /// the OS's reason.
  static caf::expected<std::unique_ptr<trace_writer>> open(const std::filesystem::path& path,
                                                           std::int64_t tokens_per_step,
                                                           std::chrono::milliseconds interval = default_interval);
  ~trace_writer();
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;

  /// Appends what the recorder gathered since the last flush.
  void flush();
  /// Stops the thread, flushes the rest and closes the file. An io_failed error
  /// says what went wrong and where: the trace is lost or incomplete. A file
  /// removed during the run is written again from the open copy.
  caf::error finish();

  std::uint64_t spans_written() const;
  /// Spans the rings overwrote before this writer took them.
  std::uint64_t dropped() const;
  /// CPU time spent writing (collecting, formatting, the writes), over all flushes.
  std::int64_t cpu_ns() const;
  const std::filesystem::path& path() const noexcept { return path_; }

private:
  trace_writer(std::filesystem::path path, int fd, std::int64_t tokens_per_step);
  void flush_locked();
  /// Writes `events` at the end of the event list, then the closing lines.
  void append(std::string events);
  /// Puts the file back at path_ from the open descriptor when it was removed or replaced.
  caf::error restore_if_moved();

  std::filesystem::path path_;
  int fd_ = -1;
  mutable std::mutex mtx_;     ///< one flush at a time (the thread's and finish's)
  std::uint64_t body_end_ = 0; ///< where the closing lines begin
  std::uint64_t file_end_ = 0;
  std::uint64_t spans_ = 0;
  std::int64_t cpu_ns_ = 0;
  std::size_t actors_written_ = 0;
  std::vector<int> nodes_written_;
  chrome_json_events events_;
  trace_recorder::cursor cursor_;
  throughput_meter meter_;
  std::optional<std::string> error_; ///< the first failed write; nothing is written after it
  std::jthread thread_;
};

} // namespace troupe
