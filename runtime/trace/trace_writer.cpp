// The streaming trace file (runtime/trace/trace_writer.hpp).
#include "runtime/trace/trace_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

/// Writes all of `data` at `offset`; false with errno set when the disk refuses.
bool write_at(int fd, std::string_view data, std::uint64_t offset) {
  while (!data.empty()) {
    auto n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

} // namespace

trace_writer::trace_writer(std::filesystem::path path, int fd, std::int64_t tokens_per_step)
    : path_(std::move(path)), fd_(fd) {
  meter_.tokens_per_step = tokens_per_step;
}

caf::expected<std::unique_ptr<trace_writer>> trace_writer::open(const std::filesystem::path& path,
                                                                std::int64_t tokens_per_step,
                                                                std::chrono::milliseconds interval) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_failed, fmt::format("{}: cannot write trace: {}", path.string(), std::strerror(errno)));
  std::unique_ptr<trace_writer> w{new trace_writer(path, fd, tokens_per_step)};
  auto head = chrome_json_head();
  w->body_end_ = w->file_end_ = head.size();
  if (!write_at(fd, head, 0)) {
    auto why = std::strerror(errno);
    ::close(std::exchange(w->fd_, -1));
    ::unlink(path.c_str());
    return make_error(errc::io_failed, fmt::format("{}: cannot write trace: {}", path.string(), why));
  }
  w->append({}); // the closing lines: valid from the start
  w->thread_ = std::jthread{[raw = w.get(), interval](std::stop_token st) {
    std::mutex m;
    std::condition_variable_any wake;
    std::unique_lock lock{m};
    while (!wake.wait_for(lock, st, interval, [] { return false; }) && !st.stop_requested())
      raw->flush();
  }};
  return w;
}

trace_writer::~trace_writer() {
  if (fd_ >= 0)
    finish();
}

void trace_writer::flush() {
  std::lock_guard guard{mtx_};
  if (fd_ < 0 || error_)
    return;
  auto t0 = thread_cpu_ns();
  flush_locked();
  cpu_ns_ += thread_cpu_ns() - t0;
}

void trace_writer::flush_locked() {
  auto& r = trace_recorder::global();
  std::vector<span> spans;
  std::vector<counter_sample> counters;
  auto missed = cursor_.missed;
  r.collect(cursor_, spans, &counters);
  auto actors = r.actors(); // after the spans: every span's actor is named
  if (spans.empty() && counters.empty() && actors.size() == actors_written_ && missed == cursor_.missed)
    return;
  for (auto i = actors_written_; i < actors.size(); ++i) {
    if (std::find(nodes_written_.begin(), nodes_written_.end(), actors[i].node) == nodes_written_.end()) {
      nodes_written_.push_back(actors[i].node);
      events_.add_node(actors[i].node);
    }
    events_.add_actor(actors[i]);
  }
  actors_written_ = actors.size();
  // Each batch in time order per actor; across batches a span that closed
  // late (an idle span, say) may begin before the last one written, which
  // Perfetto and chrome://tracing sort out as they load.
  std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) {
    return a.actor != b.actor ? a.actor < b.actor : a.begin_ns < b.begin_ns;
  });
  for (const auto& s : spans)
    events_.add_span(s, s.actor < actors.size() ? actors[s.actor].node : 0);
  for (const auto& c : counters) {
    events_.add_counter(c);
    if (auto tps = meter_.on_sample(c))
      events_.add_counter(*tps);
  }
  spans_ += spans.size();
  append(events_.take());
}

void trace_writer::append(std::string events) {
  auto tail = chrome_json_tail(cursor_.missed, trace_epoch_ns());
  auto size = events.size();
  events += tail; // one write: the events and the closing lines after them
  if (!write_at(fd_, events, body_end_)) {
    error_ = fmt::format("{}: writing trace failed: {}", path_.string(), std::strerror(errno));
    // Best effort: close the list after the last whole event, so what was written still reads.
    if (write_at(fd_, tail, body_end_) && ::ftruncate(fd_, static_cast<off_t>(body_end_ + tail.size())) == 0)
      *error_ += " (the file holds the run up to then)";
    return;
  }
  body_end_ += size;
  auto end = body_end_ + tail.size();
  if (end < file_end_ && ::ftruncate(fd_, static_cast<off_t>(end)) != 0)
    error_ = fmt::format("{}: writing trace failed: {}", path_.string(), std::strerror(errno));
  file_end_ = end;
}

caf::error trace_writer::restore_if_moved() {
  struct stat open_st {
  }, path_st{};
  if (::fstat(fd_, &open_st) == 0 && ::stat(path_.c_str(), &path_st) == 0 && open_st.st_dev == path_st.st_dev &&
      open_st.st_ino == path_st.st_ino)
    return {};
  // Removed or replaced while the run went on: write it again from what is open.
  auto tmp = path_;
  tmp += ".tmp";
  auto fail = [&](std::string why) {
    ::unlink(tmp.c_str());
    return make_error(errc::io_failed, fmt::format("{}: cannot write trace: {} (the file was removed during the run)",
                                                   path_.string(), why));
  };
  int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0)
    return fail(std::strerror(errno));
  std::string buf(1 << 20, '\0');
  for (std::uint64_t at = 0; at < file_end_;) {
    auto n = ::pread(fd_, buf.data(), std::min<std::uint64_t>(buf.size(), file_end_ - at), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || !write_at(out, std::string_view{buf.data(), static_cast<std::size_t>(n)}, at)) {
      auto why = std::strerror(n == 0 ? EIO : errno);
      ::close(out);
      return fail(why);
    }
    at += static_cast<std::uint64_t>(n);
  }
  if (::close(out) != 0)
    return fail(std::strerror(errno));
  if (::rename(tmp.c_str(), path_.c_str()) != 0)
    return fail(std::strerror(errno));
  return {};
}

caf::error trace_writer::finish() {
  thread_.request_stop();
  if (thread_.joinable())
    thread_.join();
  flush();
  std::lock_guard guard{mtx_};
  auto err = error_ ? make_error(errc::io_failed, *error_) : caf::error{};
  if (fd_ < 0)
    return err;
  if (!err)
    err = restore_if_moved();
  if (::close(std::exchange(fd_, -1)) != 0 && !err)
    err =
      make_error(errc::io_failed, fmt::format("{}: writing trace failed: {}", path_.string(), std::strerror(errno)));
  return err;
}

std::uint64_t trace_writer::spans_written() const {
  std::lock_guard guard{mtx_};
  return spans_;
}

std::int64_t trace_writer::cpu_ns() const {
  std::lock_guard guard{mtx_};
  return cpu_ns_;
}

std::uint64_t trace_writer::dropped() const {
  std::lock_guard guard{mtx_};
  return cursor_.missed;
}

} // namespace troupe
