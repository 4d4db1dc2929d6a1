// Tests of emulated links (on real sockets) and of the transport, bandwidth
// and duration parsers.
#include <doctest/doctest.h>

#include <condition_variable>

#include "runtime/actor/errors.hpp"
#include "runtime/transport/link_model.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/transport_detail.hpp"
#include "runtime/transport/transport_inbox.hpp"

using namespace troupe;
using namespace troupe::net;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using on_frame_fn = std::function<void(connection&, frame&&)>;

namespace {

/// A server (echoing or collecting) and a client with the given links.
struct pair_of_ends {
  std::mutex m;
  std::condition_variable cv;
  std::vector<clock_type::time_point> arrivals; // at the server, or echoes back at the client
  std::unique_ptr<server> srv;
  std::unique_ptr<connection> cli;

  pair_of_ends(transport_kind kind, link_model server_link, link_model client_link, bool echo) {
    server_options so;
    so.kind = kind;
    so.token = "link-test-token";
    so.link = server_link;
    auto note = [this](connection&, frame&&) {
      std::lock_guard g{m};
      arrivals.push_back(clock_type::now());
      cv.notify_all();
    };
    handlers sh{echo ? on_frame_fn{[](connection& c, frame&& f) { c.send(std::move(f)); }} : note, {}};
    auto s = listen(so, sh);
    REQUIRE(s);
    srv = std::move(*s);
    connect_options co;
    co.kind = kind;
    co.host = "127.0.0.1";
    co.port = srv->port();
    co.token = "link-test-token";
    co.link = client_link;
    auto c = connect(co, handlers{echo ? note : on_frame_fn{}, {}});
    REQUIRE(c);
    cli = std::move(*c);
  }

  clock_type::time_point wait_for(std::size_t n) {
    std::unique_lock l{m};
    REQUIRE(cv.wait_for(l, 20s * static_cast<long>(sanitizer_time_factor), [&] { return arrivals.size() >= n; }));
    return arrivals[n - 1];
  }
};

frame blob_frame(std::size_t bytes) {
  frame f;
  f.blobs.push_back(tensor_handle::zeros({static_cast<std::int64_t>(bytes)}, dtype::u8));
  return f;
}

std::string error_of(const caf::expected<double>& r) {
  return r ? std::string() : error_message(r.error());
}

} // namespace

TEST_CASE("a 20 MB frame over a 100 MB/s emulated link takes about 0.2 s") {
  for (auto kind : {transport_kind::tcp, transport_kind::ucx}) {
    if (kind == transport_kind::ucx && detail::ucx_unavailable_reason())
      continue;
    CAPTURE(to_string(kind));
    pair_of_ends ends(kind, {}, link_model{100e6, 0}, false);
    auto f = blob_frame(20'000'000);
    auto t0 = clock_type::now();
    ends.cli->send(std::move(f));
    auto took = std::chrono::duration<double>(ends.wait_for(1) - t0).count();
    CHECK(took >= 0.17);
    CHECK(took <= 1.0 * sanitizer_time_factor);
  }
}

TEST_CASE("a round trip over links with 5 ms latency each way takes at least 10 ms") {
  for (auto kind : {transport_kind::tcp, transport_kind::ucx}) {
    if (kind == transport_kind::ucx && detail::ucx_unavailable_reason())
      continue;
    CAPTURE(to_string(kind));
    link_model five_ms{0, 0.005};
    pair_of_ends ends(kind, five_ms, five_ms, true);
    for (std::size_t i = 1; i <= 3; ++i) {
      auto t0 = clock_type::now();
      ends.cli->send(frame{});
      auto took = std::chrono::duration<double>(ends.wait_for(i) - t0).count();
      CHECK(took >= 0.010);
      CHECK(took <= 0.5 * sanitizer_time_factor);
    }
  }
}

TEST_CASE("frames queued back to back on an emulated link wait for the ones before them") {
  link_pacer p(link_model{1000, 0.5}); // 1000 B/s, half a second of latency
  auto t = clock_type::now();
  auto s1 = p.start(500, t);
  auto s2 = p.start(500, t);
  CHECK(s1 == t);
  CHECK(std::chrono::duration<double>(s2 - t).count() == doctest::Approx(0.5));
  CHECK(std::chrono::duration<double>(p.release(s2, 500) - t).count() == doctest::Approx(1.5));
  CHECK(link_pacer(link_model{}).active() == false);
}

TEST_CASE("bandwidths and durations parse with decimal units, and bad ones say what is expected") {
  CHECK(*parse_bandwidth("10Gbit/s") == doctest::Approx(1.25e9));
  CHECK(*parse_bandwidth("1.5GB/s") == doctest::Approx(1.5e9));
  CHECK(*parse_bandwidth("200MB/s") == doctest::Approx(2e8));
  CHECK(*parse_bandwidth("800Kbit/s") == doctest::Approx(1e5));
  CHECK(*parse_bandwidth("1 Gbit/s") == doctest::Approx(1.25e8));
  CHECK(error_of(parse_bandwidth("10 GB")) ==
        "'10 GB' is not a bandwidth: expected a number and a unit such as 10Gbit/s, 1.5GB/s, 200MB/s");
  CHECK_FALSE(parse_bandwidth("fast"));
  CHECK_FALSE(parse_bandwidth("-1GB/s"));
  CHECK(error_of(parse_bandwidth("0GB/s")).find("more than zero") != std::string::npos);

  CHECK(*parse_duration("5ms") == doctest::Approx(0.005));
  CHECK(*parse_duration("200us") == doctest::Approx(200e-6));
  CHECK(*parse_duration("0.25s") == doctest::Approx(0.25));
  CHECK(*parse_duration("1500ns") == doctest::Approx(1.5e-6));
  CHECK(error_of(parse_duration("5 minutes")) ==
        "'5 minutes' is not a duration: expected a number and a unit such as 5ms, 200us, 0.25s, 1500ns");
}

TEST_CASE("transport names parse, and auto picks one that works here") {
  CHECK(*parse_transport("tcp") == transport_kind::tcp);
  CHECK(*parse_transport("ucx") == transport_kind::ucx);
  auto bad = parse_transport("udp");
  REQUIRE_FALSE(bad);
  CHECK(error_message(bad.error()) == "unknown transport 'udp' (known: auto, tcp, ucx)");
  auto chosen = parse_transport("auto");
  REQUIRE(chosen);
  CHECK(*chosen == (!detail::ucx_unavailable_reason() ? transport_kind::ucx : transport_kind::tcp));
}
