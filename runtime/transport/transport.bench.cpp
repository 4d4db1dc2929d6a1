// bench_transport: bandwidth of 64 MB frames and ping-pong latency between two
// real processes on this machine, over tcp and ucx, plus one emulated link.
//   bench_transport [runs]      (the peer is this program, started with --peer)
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/transport_inbox.hpp"

extern char** environ;

using namespace troupe;
using namespace troupe::net;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr std::uint16_t go_kind = 1;   // meta: count and size; the peer answers with `count` frames
constexpr std::uint16_t echo_kind = 2; // the peer sends it straight back
const char* token = "bench-token";

/// The next frame to arrive; gives up the whole run after a minute.
frame next(inbox& box) {
  if (!box.wait([&] { return !box.frames.empty(); }, std::chrono::seconds(60))) {
    std::fprintf(stderr, "bench_transport: no frame within 60 s\n");
    std::exit(1);
  }
  std::lock_guard g{box.m};
  auto f = std::move(box.frames.front());
  box.frames.pop_front();
  return f;
}

/// The peer process: answers `go` with frames of one reused blob and echoes the rest.
int peer_main(transport_kind kind, std::uint16_t port, link_model link) {
  std::mutex m;
  std::condition_variable cv;
  bool closed = false;
  tensor_handle blob;
  handlers h{[&](connection& c, frame&& f) {
               if (f.kind != go_kind) {
                 c.send(std::move(f));
                 return;
               }
               std::uint64_t count = 0;
               std::uint64_t size = 0;
               std::memcpy(&count, f.meta.data(), 8);
               std::memcpy(&size, f.meta.data() + 8, 8);
               if (!blob.defined() || blob.nbytes() != size) // one buffer, reused: steady state
                 blob = tensor_handle::zeros({static_cast<std::int64_t>(size)}, dtype::u8);
               for (std::uint64_t i = 0; i < count; ++i)
                 c.send(frame{3, {}, {blob}});
             },
             [&](connection&, std::string) {
               std::lock_guard g{m};
               closed = true;
               cv.notify_all();
             }};
  auto c = connect(connect_options{kind, "127.0.0.1", port, token, link, std::chrono::seconds(10)}, h);
  if (!c) {
    std::fprintf(stderr, "peer: %s\n", error_message(c.error()).c_str());
    return 1;
  }
  (*c)->send(frame{0, {}, {}}); // ready
  std::unique_lock l{m};
  cv.wait(l, [&] { return closed; });
  return 0;
}

pid_t spawn_peer(const char* self, transport_kind kind, std::uint16_t port, link_model link) {
  std::vector<std::string> args = {self,
                                   "--peer",
                                   std::string(to_string(kind)),
                                   std::to_string(port),
                                   fmt::format("{}", link.bytes_per_s),
                                   fmt::format("{}", link.latency_s)};
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  return pid;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median over runs of (count frames of `size` bytes) / time, in GB/s.
double bandwidth(inbox& box, std::size_t size, int count, int runs) {
  std::vector<double> rates;
  for (int r = -1; r < runs; ++r) { // run -1 warms the pools up
    frame go{go_kind, std::vector<std::byte>(16), {}};
    std::uint64_t c = static_cast<std::uint64_t>(count);
    std::uint64_t s = size;
    std::memcpy(go.meta.data(), &c, 8);
    std::memcpy(go.meta.data() + 8, &s, 8);
    auto t0 = clock_type::now();
    box.sender()->send(std::move(go));
    for (int i = 0; i < count; ++i)
      next(box); // dropped at once: the pool reuses its buffer
    auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (r >= 0)
      rates.push_back(static_cast<double>(size) * count / secs / 1e9);
  }
  return median(rates);
}

/// Median round trip in microseconds of a frame with `meta` bytes and one blob of `blob` bytes (0: none).
double round_trip(inbox& box, std::size_t meta, std::size_t blob, int iterations) {
  frame f{echo_kind, std::vector<std::byte>(meta), {}};
  if (blob > 0)
    f.blobs.push_back(tensor_handle::zeros({static_cast<std::int64_t>(blob)}, dtype::u8));
  std::vector<double> us;
  for (int i = -iterations / 10; i < iterations; ++i) {
    auto t0 = clock_type::now();
    box.sender()->send(f);
    next(box);
    if (i >= 0)
      us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return median(us);
}

struct row {
  transport_kind kind;
  link_model link;
  std::size_t bulk;
  int count;
};

void measure(const char* self, const row& r, int runs) {
  inbox box;
  server_options so;
  so.kind = r.kind;
  so.token = token;
  so.link = r.link;
  auto s = listen(so, box.make());
  if (!s) {
    std::fprintf(stderr, "bench_transport: %s\n", error_message(s.error()).c_str());
    std::exit(1);
  }
  auto pid = spawn_peer(self, r.kind, (*s)->port(), r.link);
  next(box); // the peer's "ready": now box.conn is its connection
  auto gbps = bandwidth(box, r.bulk, r.count, runs);
  int iterations = r.link.latency_s > 0 ? 50 : 2000;
  auto small = round_trip(box, 64, 0, iterations);
  auto meta4k = round_trip(box, 4096, 0, iterations);
  auto blob4k = round_trip(box, 0, 4096, iterations);
  auto link = r.link.bytes_per_s > 0
                ? fmt::format("{:g}Gbit/s {:g}ms", r.link.bytes_per_s * 8 / 1e9, r.link.latency_s * 1e3)
                : std::string("none");
  fmt::print("{:<9} {:<16} {:>6} MB {:>10.2f} {:>12.1f} {:>12.1f} {:>12.1f}\n", to_string(r.kind), link,
             r.bulk / 1'000'000, gbps, small, meta4k, blob4k);
  std::fflush(stdout);
  s->reset(); // closes the connection: the peer exits
  int status = 0;
  waitpid(pid, &status, 0);
}

} // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string_view(argv[1]) == "--peer")
    return peer_main(*parse_transport(argv[2]), static_cast<std::uint16_t>(std::stoi(argv[3])),
                     link_model{std::stod(argv[4]), std::stod(argv[5])});
  int runs = argc > 1 ? std::max(5, std::atoi(argv[1])) : 7;
  std::vector<row> rows = {{transport_kind::tcp, {}, 64'000'000, 4}};
  if (auto ucx = parse_transport("ucx");
      ucx && listen(server_options{transport_kind::ucx, "127.0.0.1", 0, token, {}, {}}, {}))
    rows.push_back({transport_kind::ucx, {}, 64'000'000, 4});
  else
    fmt::print("ucx: not available here\n");
  rows.push_back({transport_kind::tcp, {125e6, 1e-3}, 8'000'000, 4});
  fmt::print("two processes on one machine; bandwidth: median of {} runs of 4 frames; round trips: median\n", runs);
  fmt::print("{:<9} {:<16} {:>9} {:>10} {:>12} {:>12} {:>12}\n", "transport", "emulated link", "frame", "GB/s",
             "rtt 64B us", "rtt 4KiB us", "rtt 4KiB-blob");
  for (auto& r : rows)
    measure(argv[0], r, runs);
  return 0;
}
