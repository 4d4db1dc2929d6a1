// Tests of the transports over real sockets on 127.0.0.1: frames and blobs,
// the token, malformed input, peer death, emulated links and a second process.
#include <doctest/doctest.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/transport_inbox.hpp"
#include "runtime/transport/transport_detail.hpp"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;

namespace {

std::vector<transport_kind> kinds() {
  if (!detail::ucx_unavailable_reason())
    return {transport_kind::tcp, transport_kind::ucx};
  return {transport_kind::tcp};
}

std::unique_ptr<server> start(transport_kind kind, inbox& in, std::string token = "s3cret", link_model link = {}) {
  server_options o;
  o.kind = kind;
  o.token = std::move(token);
  o.log = in.logger();
  o.link = link;
  auto s = listen(o, in.make());
  REQUIRE_MESSAGE(s, (s ? std::string() : error_message(s.error())));
  return std::move(*s);
}

std::unique_ptr<connection> dial(transport_kind kind, const server& s, inbox& in, std::string token = "s3cret",
                                 link_model link = {}) {
  connect_options o;
  o.kind = kind;
  o.host = "127.0.0.1";
  o.port = s.port();
  o.token = std::move(token);
  o.link = link;
  auto c = connect(o, in.make());
  REQUIRE_MESSAGE(c, (c ? std::string() : error_message(c.error())));
  return std::move(*c);
}

/// A client connected to a server that sends every frame straight back.
struct echo_link {
  inbox server_in;
  inbox client_in;
  std::unique_ptr<server> s;
  std::unique_ptr<connection> c; // destroyed first: its handlers use the inboxes

  explicit echo_link(transport_kind kind) {
    server_in.echo = true;
    s = start(kind, server_in);
    c = dial(kind, *s, client_in);
  }
};

/// A u8 blob of `n` bytes whose byte i is (i * 7 + seed) mod 251.
tensor_handle pattern(std::size_t n, int seed) {
  auto t = tensor_handle::empty({static_cast<std::int64_t>(n)}, dtype::u8);
  auto* p = t.data<std::uint8_t>();
  for (std::size_t i = 0; i < n; ++i)
    p[i] = static_cast<std::uint8_t>((i * 7 + static_cast<std::size_t>(seed)) % 251);
  return t;
}

bool has_pattern(const tensor_handle& t, std::size_t n, int seed) {
  if (t.nbytes() != n || t.type() != dtype::u8)
    return false;
  auto* p = t.data<std::uint8_t>();
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<std::uint8_t>((i * 7 + static_cast<std::size_t>(seed)) % 251))
      return false;
  return true;
}

frame make_frame(std::uint16_t kind, std::vector<std::size_t> sizes) {
  frame f;
  f.kind = kind;
  auto text = "frame " + std::to_string(kind);
  for (char ch : text)
    f.meta.push_back(static_cast<std::byte>(ch));
  for (std::size_t i = 0; i < sizes.size(); ++i)
    f.blobs.push_back(pattern(sizes[i], kind + static_cast<int>(i)));
  return f;
}

bool is_frame(const frame& f, std::uint16_t kind, std::vector<std::size_t> sizes) {
  auto want = make_frame(kind, {});
  if (f.kind != kind || f.meta != want.meta || f.blobs.size() != sizes.size())
    return false;
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (!has_pattern(f.blobs[i], sizes[i], kind + static_cast<int>(i)))
      return false;
  return true;
}

const std::vector<std::size_t> sizes_a = {0, 1, (1u << 20) + 3};

/// Sends `bytes` from a plain socket, then waits until the server hangs up.
bool send_raw_and_wait_for_hangup(std::uint16_t port, const std::vector<std::uint8_t>& bytes) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    return false;
  [[maybe_unused]] auto n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR); // a truncated frame ends here
  timeval tv{15, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  ssize_t r;
  while ((r = ::recv(fd, buf, sizeof buf, 0)) > 0) {
  }
  ::close(fd);
  return r == 0 || (r < 0 && errno == ECONNRESET);
}

std::vector<std::uint8_t> header_bytes(std::uint32_t magic, std::uint8_t type, std::uint32_t meta,
                                       std::uint32_t blobs) {
  std::vector<std::uint8_t> h(16);
  std::memcpy(h.data(), &magic, 4);
  h[4] = 1;
  h[5] = type;
  std::memcpy(h.data() + 8, &meta, 4);
  std::memcpy(h.data() + 12, &blobs, 4);
  return h;
}

} // namespace

TEST_CASE("frames with blobs of 0 bytes, 1 byte and 1 MiB + 3 arrive whole and in order") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox server_in;
    inbox client_in;
    auto s = start(kind, server_in);
    auto c = dial(kind, *s, client_in);
    for (std::uint16_t k = 1; k <= 20; ++k)
      c->send(make_frame(k, k % 2 ? sizes_a : std::vector<std::size_t>{}));
    REQUIRE(server_in.wait([&] { return server_in.frames.size() == 20; }));
    for (std::uint16_t k = 1; k <= 20; ++k)
      CHECK(is_frame(server_in.frames[k - 1u], k, k % 2 ? sizes_a : std::vector<std::size_t>{}));
    CHECK(server_in.logs.empty());
  }
}

TEST_CASE("a server answers on the connection it received from, and close() flushes what was queued") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    echo_link e(kind);
    auto& client_in = e.client_in;
    for (std::uint16_t k = 1; k <= 50; ++k)
      e.c->send(make_frame(k, {k * 1000u}));
    REQUIRE(client_in.wait([&] { return client_in.frames.size() == 50; }));
    for (std::uint16_t k = 1; k <= 50; ++k)
      CHECK(is_frame(client_in.frames[k - 1u], k, {k * 1000u}));

    inbox quiet;
    auto s2 = start(kind, quiet);
    auto c2 = dial(kind, *s2, client_in);
    for (std::uint16_t k = 1; k <= 30; ++k)
      c2->send(make_frame(k, {1u << 16}));
    c2->close();
    c2.reset();
    REQUIRE(quiet.wait([&] { return quiet.closes.size() == 1; }));
    CHECK(quiet.frames.size() == 30);
    CHECK(quiet.closes[0].find("closed the connection") != std::string::npos);
  }
}

TEST_CASE("a wrong token is refused and logged, and nothing is delivered") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox server_in;
    inbox client_in;
    auto s = start(kind, server_in);
    connect_options o;
    o.kind = kind;
    o.host = "127.0.0.1";
    o.port = s->port();
    o.token = "guess";
    auto c = connect(o, client_in.make());
    REQUIRE_FALSE(c);
    CHECK(error_message(c.error()).find("refused the connection: wrong token") != std::string::npos);
    REQUIRE(server_in.wait([&] { return !server_in.logs.empty(); }));
    CHECK(server_in.logs[0].rfind("refused connection from 127.0.0.1:", 0) == 0);
    CHECK(server_in.logs[0].find(": wrong token") != std::string::npos);
    CHECK(server_in.frames.empty());
    CHECK(server_in.closes.empty());
  }
}

TEST_CASE("garbage on the server port is rejected and logged, and the server still serves a good client") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox server_in;
    auto s = start(kind, server_in);
    std::mt19937 rng(7);
    std::vector<std::uint8_t> noise(4096);
    for (auto& b : noise)
      b = static_cast<std::uint8_t>(rng());
    auto absurd = header_bytes(detail::wire_magic, 1, 0xFFFFFFF0u, 0);
    auto many_blobs = header_bytes(detail::wire_magic, 1, 0, 1u << 30);
    auto truncated = header_bytes(detail::wire_magic, 1, 100, 0);
    truncated.resize(truncated.size() + 10, 'x');
    auto half_header = std::vector<std::uint8_t>(absurd.begin(), absurd.begin() + 7);
    for (auto* bytes : {&noise, &absurd, &many_blobs, &truncated, &half_header})
      CHECK(send_raw_and_wait_for_hangup(s->port(), *bytes));
    REQUIRE(server_in.wait([&] { return server_in.logs.size() == 5; }));
    for (auto& line : server_in.logs) {
      CAPTURE(line);
      CHECK(line.rfind("rejected connection from 127.0.0.1:", 0) == 0);
    }
    CHECK(server_in.logs[0].find("not a troupe frame") != std::string::npos);
    CHECK(server_in.logs[1].find("exceeds the limit") != std::string::npos);
    CHECK(server_in.logs[2].find("exceed the limit") != std::string::npos);
    CHECK(server_in.logs[3].find("truncated frame") != std::string::npos);
    CHECK(server_in.logs[4].find("truncated frame") != std::string::npos);
    CHECK(server_in.frames.empty());

    inbox client_in;
    auto c = dial(kind, *s, client_in);
    c->send(make_frame(9, sizes_a));
    REQUIRE(server_in.wait([&] { return server_in.frames.size() == 1; }));
    CHECK(is_frame(server_in.frames[0], 9, sizes_a));
  }
}

TEST_CASE("an authenticated tcp peer that sends an oversized frame is cut off and logged") {
  inbox server_in;
  auto s = start(transport_kind::tcp, server_in);
  std::string token = "s3cret";
  auto hello = header_bytes(detail::wire_magic, 1, static_cast<std::uint32_t>(token.size()), 0);
  hello.insert(hello.end(), token.begin(), token.end());
  auto big = header_bytes(detail::wire_magic, 0, 0, 1);
  std::uint64_t huge = max_blob_bytes + 1;
  big.resize(big.size() + 8);
  std::memcpy(big.data() + 16, &huge, 8);
  hello.insert(hello.end(), big.begin(), big.end());
  CHECK(send_raw_and_wait_for_hangup(s->port(), hello));
  REQUIRE(server_in.wait([&] { return !server_in.logs.empty() && !server_in.closes.empty(); }));
  CHECK(server_in.logs[0].find("blob 0 of 68719476737 bytes exceeds the limit") != std::string::npos);
  CHECK(server_in.closes[0].find("malformed frame") != std::string::npos);
  CHECK(server_in.frames.empty());
}

TEST_CASE("when the client goes away the server's on_close says who closed") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    inbox server_in;
    inbox client_in;
    auto s = start(kind, server_in);
    auto c = dial(kind, *s, client_in);
    c->send(make_frame(1, {}));
    REQUIRE(server_in.wait([&] { return server_in.frames.size() == 1; }));
    c.reset();
    REQUIRE(server_in.wait([&] { return server_in.closes.size() == 1; }));
    CHECK(server_in.closes[0].find("127.0.0.1:") != std::string::npos);
    CHECK(server_in.closes[0].find("closed the connection") != std::string::npos);
    CHECK(client_in.closes == std::vector<std::string>{"closed by this side"});
  }
}

TEST_CASE("frames sent from another thread at gaps around the idle spin all arrive, in order, echoed") {
  // The UCX progress thread polls for a bounded time when idle, then sleeps, and a
  // sender wakes it only while it sleeps: gaps from 0 to 4 spins hit every phase
  // of that hand-over. A lost wake-up leaves a frame queued and the wait fails.
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> gap_us(0, 200);
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    echo_link e(kind);
    auto& c = e.c;
    constexpr std::uint16_t n = 300;
    auto sizes = [](std::uint16_t k) { return k % 50 == 0 ? sizes_a : std::vector<std::size_t>{64}; };
    std::thread sender([&] {
      for (std::uint16_t k = 1; k <= n; ++k) {
        c->send(make_frame(k, sizes(k)));
        std::this_thread::sleep_for(std::chrono::microseconds(gap_us(rng)));
      }
    });
    sender.join();
    REQUIRE(e.client_in.wait([&] { return e.client_in.frames.size() == n; }, 300s));
    for (std::uint16_t k = 1; k <= n; ++k)
      CHECK(is_frame(e.client_in.frames[k - 1u], k, sizes(k)));
    c->close();
    c.reset();
    REQUIRE(e.server_in.wait([&] { return e.server_in.closes.size() == 1; }, 300s));
    CHECK(e.server_in.closes[0].find("closed the connection") != std::string::npos);
  }
}

TEST_CASE("an idle connection burns no core: its progress threads' spin is bounded") {
  for (auto kind : kinds()) {
    CAPTURE(to_string(kind));
    echo_link e(kind);
    for (std::uint16_t k = 1; k <= 20; ++k)
      e.c->send(make_frame(k, {64}));
    REQUIRE(e.client_in.wait([&] { return e.client_in.frames.size() == 20; }, 300s));
    auto cpu_s = [] {
      rusage u{};
      ::getrusage(RUSAGE_SELF, &u);
      return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    };
    auto before = cpu_s();
    std::this_thread::sleep_for(1s);
    // Two progress threads spinning on would use up to 2 s here (about 0.5 s
    // each even on a loaded 2-core machine); sleeping ones use next to none.
    CHECK(cpu_s() - before < 0.2);
  }
}
