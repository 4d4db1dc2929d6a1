// The activity board and the watcher thread of the hang detector (hang_watch.hpp).
#include "runtime/trace/hang_watch.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace troupe {

namespace {

// An action packs into one word, so a reader never sees half of one: kind + 1
// (0: none), then step, microbatch and chunk, each as many low bits as fit.
constexpr std::uint64_t pack(span_kind k, std::int32_t step, std::int32_t mb, std::int32_t chunk) {
  return (static_cast<std::uint64_t>(k) + 1) | (static_cast<std::uint64_t>(step) & 0xffffff) << 8 |
         (static_cast<std::uint64_t>(mb) & 0xffff) << 32 | (static_cast<std::uint64_t>(chunk) & 0xffff) << 48;
}

std::int32_t field(std::uint64_t w, int shift, std::uint64_t mask) {
  auto v = (w >> shift) & mask;
  return v == mask ? -1 : static_cast<std::int32_t>(v);
}

} // namespace

std::string describe(const activity& a) {
  std::string handling =
    fmt::format("handling a{} {} message",
                std::string_view{"aeiou"}.find(a.message[0]) != std::string_view::npos ? "n" : "", a.message);
  if (!a.action)
    return handling;
  std::string out{to_string(*a.action)};
  if (a.microbatch >= 0)
    out += fmt::format(" of microbatch {}", a.microbatch);
  out += fmt::format("{} step {}", a.microbatch >= 0 ? "," : " of", a.step + 1);
  if (a.chunk >= 0)
    out += fmt::format(", chunk {}", a.chunk);
  return out + " (" + handling + ")";
}

activity_board& activity_board::global() {
  static activity_board b;
  return b;
}

void activity_board::enter(std::uint16_t id, const char* message) noexcept {
  if (id >= max_actors)
    return;
  auto& s = slots_[id];
  s.since.store(0);
  s.message.store(message);
  s.action.store(0);
  s.since.store(std::max<std::int64_t>(1, trace_now()));
}

void activity_board::run(std::uint16_t id, span_kind kind, std::int32_t step, std::int32_t microbatch,
                         std::int32_t chunk) noexcept {
  if (id < max_actors)
    slots_[id].action.store(pack(kind, step, microbatch, chunk));
}

void activity_board::leave(std::uint16_t id) noexcept {
  if (id < max_actors)
    slots_[id].since.store(0);
}

std::optional<activity> activity_board::now(std::uint16_t id) const noexcept {
  if (id >= max_actors)
    return std::nullopt;
  const auto& s = slots_[id];
  activity a;
  a.since_ns = s.since.load();
  if (a.since_ns == 0)
    return std::nullopt;
  a.message = s.message.load();
  auto w = s.action.load();
  if (s.since.load() != a.since_ns) // it left and entered another handler meanwhile
    return std::nullopt;
  if (w != 0) {
    a.action = static_cast<span_kind>((w & 0xff) - 1);
    a.step = field(w, 8, 0xffffff), a.microbatch = field(w, 32, 0xffff), a.chunk = field(w, 48, 0xffff);
  }
  return a;
}

void activity_board::reset() noexcept {
  for (auto& s : slots_)
    s.since.store(0), s.action.store(0);
}

hang_watch::hang_watch(double after_s, int node, report_fn report)
    : after_s_(after_s), node_(node), report_(std::move(report)) {
  if (!report_)
    report_ = [](const std::string& line) {
      fmt::print(stderr, "{}\n", line);
      std::fflush(stderr);
    };
  if (after_s_ <= 0)
    return;
  // Four looks per period: a hang is named within 1.25 × after_s.
  auto period = std::chrono::duration<double>(after_s_ / 4);
  thread_ = std::thread([this, period] {
    std::unique_lock lock{mtx_};
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
      lock.unlock();
      scan(trace_now());
      lock.lock();
    }
  });
}

hang_watch::~hang_watch() {
  {
    std::lock_guard lock{mtx_};
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

std::size_t hang_watch::scan(std::int64_t now_ns) {
  auto limit = static_cast<std::int64_t>(after_s_ * 1e9);
  std::size_t fresh = 0;
  for (const auto& info : trace_recorder::global().actors()) {
    auto a = activity_board::global().now(info.id);
    if (!a || now_ns - a->since_ns <= limit)
      continue;
    if (reported_.size() <= info.id)
      reported_.resize(info.id + 1u, 0);
    if (reported_[info.id] == a->since_ns)
      continue; // this handler was named already
    reported_[info.id] = a->since_ns;
    ++fresh;
    report_(fmt::format("hang: actor '{}' ({}, node {}) has been in one handler for {:.1f} s, longer than "
                        "trace.hang_after ({} s): {}",
                        info.name, info.type, node_, static_cast<double>(now_ns - a->since_ns) * 1e-9, after_s_,
                        describe(*a)));
  }
  return fresh;
}

} // namespace troupe
