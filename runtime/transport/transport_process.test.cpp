// Tests with a second process (this executable, started again as a child):
// frames cross a real process boundary, which for UCX means shared memory.
#include <doctest/doctest.h>

#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/transport_inbox.hpp"
#include "runtime/transport/transport_detail.hpp"

extern char** environ;

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t big = (8u << 20) + 5; // large enough for UCX's zero-copy protocols

tensor_handle filled(std::size_t n, std::uint8_t seed) {
  auto t = tensor_handle::empty({static_cast<std::int64_t>(n)}, dtype::u8);
  for (std::size_t i = 0; i < n; ++i)
    t.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 13 + seed);
  return t;
}

bool is_filled(const tensor_handle& t, std::size_t n, std::uint8_t seed) {
  if (t.nbytes() != n)
    return false;
  for (std::size_t i = 0; i < n; ++i)
    if (t.data<std::uint8_t>()[i] != static_cast<std::uint8_t>(i * 13 + seed))
      return false;
  return true;
}

/// The child: TROUPE_TRANSPORT_CHILD="kind port mode". It connects, sends ten
/// frames, then either waits for the parent's answer (mode "answer") or hangs
/// until it is killed (mode "hang").
int child_main(const char* spec) {
  char kind[8] = {};
  char mode[8] = {};
  unsigned port = 0;
  if (std::sscanf(spec, "%7s %u %7s", kind, &port, mode) != 3)
    return 2;
  std::mutex m;
  std::condition_variable cv;
  bool answered = false;
  bool answer_ok = false;
  handlers h{[&](connection&, frame&& f) {
               std::lock_guard g{m};
               answered = true;
               answer_ok = f.kind == 99 && f.blobs.size() == 1 && is_filled(f.blobs[0], 3u << 20, 42);
               cv.notify_all();
             },
             {}};
  connect_options o;
  o.kind = std::string_view(kind) == "ucx" ? transport_kind::ucx : transport_kind::tcp;
  o.host = "127.0.0.1";
  o.port = static_cast<std::uint16_t>(port);
  o.token = "process-token";
  auto c = connect(o, h);
  if (!c) {
    std::fprintf(stderr, "child: %s\n", error_message(c.error()).c_str());
    return 3;
  }
  for (std::uint16_t k = 0; k < 10; ++k) {
    frame f;
    f.kind = k;
    f.blobs = {filled(0, 0), filled(1, static_cast<std::uint8_t>(k)), filled(big, static_cast<std::uint8_t>(k))};
    (*c)->send(std::move(f));
  }
  if (std::string_view(mode) == "hang")
    for (;;)
      pause();
  std::unique_lock l{m};
  if (!cv.wait_for(l, 20s, [&] { return answered; }))
    return 4;
  return answer_ok ? 0 : 5;
}

/// Runs the child before doctest sees the command line.
const bool child_ran = [] {
  if (const char* spec = std::getenv("TROUPE_TRANSPORT_CHILD"))
    std::_Exit(child_main(spec));
  return false;
}();

pid_t spawn_child(transport_kind kind, std::uint16_t port, const char* mode) {
  auto spec = "TROUPE_TRANSPORT_CHILD=" + std::string(to_string(kind)) + " " + std::to_string(port) + " " + mode;
  std::vector<char*> env;
  for (char** e = environ; *e; ++e)
    env.push_back(*e);
  env.push_back(spec.data());
  env.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, exe, nullptr, nullptr, argv, env.data()) == 0);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<transport_kind> kinds() {
  if (!detail::ucx_unavailable_reason())
    return {transport_kind::tcp, transport_kind::ucx};
  return {transport_kind::tcp};
}

std::unique_ptr<server> serve(transport_kind kind, inbox& in) {
  server_options o;
  o.kind = kind;
  o.token = "process-token";
  auto s = listen(o, in.make());
  REQUIRE(s);
  return std::move(*s);
}

} // namespace

TEST_CASE("frames with an 8 MiB blob cross from a child process and an answer goes back") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox in;
    auto s = serve(kind, in);
    auto pid = spawn_child(kind, s->port(), "answer");
    REQUIRE(in.wait([&] { return in.frames.size() == 10; }));
    for (std::uint16_t k = 0; k < 10; ++k) {
      auto& f = in.frames[k];
      CHECK(f.kind == k);
      REQUIRE(f.blobs.size() == 3);
      CHECK(f.blobs[0].nbytes() == 0);
      CHECK(is_filled(f.blobs[1], 1, static_cast<std::uint8_t>(k)));
      CHECK(is_filled(f.blobs[2], big, static_cast<std::uint8_t>(k)));
    }
    frame answer;
    answer.kind = 99;
    answer.blobs = {filled(3u << 20, 42)};
    in.conn->send(std::move(answer));
    CHECK(wait_exit(pid) == 0);
    REQUIRE(in.wait([&] { return in.closes.size() == 1; }));
    CHECK(in.closes[0].find("closed the connection") != std::string::npos);
  }
}

TEST_CASE("a child process killed mid-stream ends its connection with a reason, and the server lives on") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox in;
    auto s = serve(kind, in);
    auto pid = spawn_child(kind, s->port(), "hang");
    REQUIRE(in.wait([&] { return in.frames.size() >= 3; }));
    ::kill(pid, SIGKILL);
    CHECK(wait_exit(pid) == 128 + SIGKILL);
    REQUIRE(in.wait([&] { return in.closes.size() == 1; }));
    auto& why = in.closes[0];
    CAPTURE(why);
    CHECK(why.find("127.0.0.1:") != std::string::npos);
    // The socket's end of stream (between frames, or inside one: "truncated
    // frame: end of stream after N of M bytes"), or UCX noticing first that the endpoint is gone.
    CHECK((why.find("closed the connection") != std::string::npos || why.find("end of stream") != std::string::npos ||
           why.find("failed") != std::string::npos));
  }
}
