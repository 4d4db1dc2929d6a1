// Tests with a second process (this executable, started again as a child):
// frames cross a real process boundary, which for UCX means shared memory.
#include <doctest/doctest.h>

#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/transport_inbox.hpp"
#include "runtime/transport/transport_detail.hpp"
#include "runtime/transport/transport_ucx.hpp"

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
  if (!cv.wait_for(l, 20s * static_cast<long>(sanitizer_time_factor), [&] { return answered; }))
    return 4;
  return answer_ok ? 0 : 5;
}

/// Runs the child before doctest sees the command line.
const bool child_ran = [] {
  if (const char* spec = std::getenv("TROUPE_TRANSPORT_CHILD"))
    std::_Exit(child_main(spec));
  return false;
}();

/// A child process, killed and reaped if it goes out of scope unwaited: a
/// failed REQUIRE must not leave a "hang" child behind for ctest to wait on.
struct child {
  pid_t pid = -1;
  explicit child(pid_t p) : pid(p) {}
  child(const child&) = delete;
  child& operator=(const child&) = delete;
  ~child() {
    if (pid > 0)
      ::kill(pid, SIGKILL), ::waitpid(pid, nullptr, 0);
  }
};

child spawn_child(transport_kind kind, std::uint16_t port, const char* mode) {
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
  return child{pid};
}

int wait_exit(child& c) {
  int status = 0;
  waitpid(std::exchange(c.pid, -1), &status, 0);
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
    auto kid = spawn_child(kind, s->port(), "answer");
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
    in.sender()->send(std::move(answer));
    CHECK(wait_exit(kid) == 0);
    REQUIRE(in.wait([&] { return in.closes.size() == 1; }));
    CHECK(in.closes[0].find("closed the connection") != std::string::npos);
  }
}

TEST_CASE("a child process killed mid-stream ends its connection with a reason, and the server lives on") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox in;
    auto s = serve(kind, in);
    auto kid = spawn_child(kind, s->port(), "hang");
    REQUIRE(in.wait([&] { return in.frames.size() >= 3; }));
    ::kill(kid.pid, SIGKILL);
    CHECK(wait_exit(kid) == 128 + SIGKILL);
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

namespace {

/// This process's stdout and stderr (and its children's) go to a file until
/// text() puts them back and returns what was written.
class captured_output {
public:
  captured_output() {
    std::fflush(stdout), std::fflush(stderr);
    saved_out_ = ::dup(1), saved_err_ = ::dup(2);
    int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(fd >= 0);
    ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
  }
  ~captured_output() { restore(); }
  std::string text() {
    restore();
    std::stringstream all;
    all << std::ifstream{path_}.rdbuf();
    ::unlink(path_.c_str());
    return all.str();
  }

private:
  void restore() {
    if (saved_out_ < 0)
      return;
    std::fflush(stdout), std::fflush(stderr);
    ::dup2(saved_out_, 1), ::dup2(saved_err_, 2);
    ::close(saved_out_), ::close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  std::string path_ = "/tmp/troupe-capture-" + std::to_string(::getpid()) + ".txt";
  int saved_out_ = -1, saved_err_ = -1;
};

} // namespace

// A peer on this host: its endpoint has no peer error mode (it would rule out
// shared memory), so the send UCX cannot release is left without its warning.
TEST_CASE("a UCX connection to a peer killed while sends are out ends without UCX's leak warnings") {
  if (auto why = detail::ucx_unavailable_reason()) {
    MESSAGE("not run: ", *why);
    return;
  }
  std::string said;
  {
    captured_output out;
    {
      inbox in;
      auto s = serve(transport_kind::ucx, in);
      auto kid = spawn_child(transport_kind::ucx, s->port(), "hang");
      REQUIRE(in.wait([&] { return in.frames.size() >= 3; }));
      for (std::uint16_t k = 0; k < 16; ++k) { // far more than goes out before the kill
        frame f;
        f.kind = k;
        f.blobs = {filled(big, static_cast<std::uint8_t>(k))};
        in.sender()->send(std::move(f));
      }
      ::kill(kid.pid, SIGKILL);
      CHECK(wait_exit(kid) == 128 + SIGKILL);
      REQUIRE(in.wait([&] { return in.closes.size() == 1; }));
    } // the connection and the server are gone: their workers destroyed
    said = out.text();
  }
  CAPTURE(said);
  CHECK(said.find("mpool") == std::string::npos);
  CHECK(said.find("was not returned") == std::string::npos);
}

// A peer on another host, played by a second worker of this process whose
// endpoints are made as for a remote peer: the peer error mode lets a forced
// close complete the send that was out (with an error), so no request is left
// for UCX to warn about when the worker goes.
TEST_CASE("a UCX send out to a lost peer on another host completes when the endpoint is force-closed") {
  if (auto why = detail::ucx_unavailable_reason()) {
    MESSAGE("not run: ", *why);
    return;
  }
  std::string said;
  ucs_status_t status = UCS_INPROGRESS;
  {
    captured_output out;
    detail::ucx_worker a, b;
    std::vector<std::byte> address_a, address_b;
    REQUIRE(!a.create());
    REQUIRE(!b.create());
    REQUIRE(!a.address(address_a));
    REQUIRE(!b.address(address_b));
    auto on_error = [](void* arg, ucp_ep_h, ucs_status_t) { *static_cast<bool*>(arg) = true; };
    bool a_failed = false, b_failed = false;
    REQUIRE(!a.connect(address_b, on_error, &a_failed, false));
    REQUIRE(!b.connect(address_a, on_error, &b_failed, false));
    CHECK(a.peer_mode);
    auto payload = filled(big, 7);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = [](void* req, ucs_status_t s, void* user) {
      *static_cast<ucs_status_t*>(user) = s;
      ucp_request_free(req);
    };
    p.user_data = &status;
    auto* req = ucp_tag_send_nbx(a.ep, payload.data<std::uint8_t>(), big, detail::ucx_tag(1, 0), &p);
    REQUIRE(UCS_PTR_IS_PTR(req)); // a rendezvous: it waits for the receiver, which never posts
    for (int i = 0; i < 200; ++i)
      ucp_worker_progress(a.worker), ucp_worker_progress(b.worker);
    b.reset(); // the peer's process is gone
    // What ucx_connection::teardown does before it resets a worker whose peer is lost.
    auto until = std::chrono::steady_clock::now() + 5s;
    while (status == UCS_INPROGRESS && std::chrono::steady_clock::now() < until)
      ucp_worker_progress(a.worker);
    a.reset(true);
    said = out.text();
  }
  CAPTURE(said);
  CHECK(status != UCS_INPROGRESS);
  CHECK(status != UCS_OK);
  CHECK(said.find("was not returned") == std::string::npos);
}

TEST_CASE("a loopback connection's peer is on this host; a socket that is not connected is not") {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0), client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  REQUIRE(client >= 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  CHECK(!detail::same_host(client));
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&at), sizeof at) == 0);
  int server = ::accept(listener, nullptr, nullptr);
  REQUIRE(server >= 0);
  CHECK(detail::same_host(client));
  CHECK(detail::same_host(server));
  ::close(server), ::close(client), ::close(listener);
}
