// The coordinator's control frames: spans batches, clock probes and acks round
// trip, hostile sizes and values are refused before anything is allocated, and
// the clock estimate keeps its best sample.
#include "deploy/cluster/cluster_protocol.hpp"

#include <limits>

#include <doctest/doctest.h>

#include "runtime/transport/bytes.hpp"

using namespace troupe;
using namespace troupe::cluster;

namespace {

spans_msg sample_batch() {
  spans_msg m;
  m.seq = 7;
  m.batch.dropped = 3;
  m.batch.actors = {{0, "s0", "pipeline_stage", 0, "stage"}, {5, "to s2", "channel", 0}};
  span s;
  s.begin_ns = 1'000'000'000'000, s.end_ns = s.begin_ns + 2500, s.bytes = 4096, s.flow = 99, s.step = 4,
  s.microbatch = 2, s.actor = 5, s.kind = span_kind::send, s.flow_end = 0, s.mailbox = 3;
  m.batch.spans.push_back(s);
  s.kind = span_kind::backward_weight, s.flow = 0, s.flow_end = 1, s.actor = 0;
  m.batch.spans.push_back(s);
  m.batch.counters.push_back({1'000'000'005'000, "loss", 4.5, 4});
  return m;
}

/// A spans frame's meta with its three counts chosen by the caller.
net::frame spans_frame(std::uint32_t actors, std::uint32_t spans, std::uint32_t counters, std::size_t tail = 0) {
  net::frame f;
  f.kind = static_cast<std::uint16_t>(control_kind::spans);
  byte_writer w{f.meta};
  w.put(std::uint64_t{1}), w.put(std::uint64_t{0});
  w.put(actors);
  w.put(spans);
  w.put(counters);
  f.meta.resize(f.meta.size() + tail);
  return f;
}

} // namespace

TEST_CASE("a spans batch round trips with every field of its actors, spans and counters") {
  auto m = sample_batch();
  auto got = decode_spans(encode(m));
  CHECK(got.seq == 7);
  CHECK(got.batch.dropped == 3);
  REQUIRE(got.batch.actors.size() == 2);
  CHECK(got.batch.actors[1].id == 5);
  CHECK(got.batch.actors[1].name == "to s2");
  CHECK(got.batch.actors[1].type == "channel");
  CHECK(got.batch.actors[0].role == "stage");
  CHECK(got.batch.actors[1].role.empty());
  REQUIRE(got.batch.spans.size() == 2);
  const auto& a = got.batch.spans[0];
  const auto& e = m.batch.spans[0];
  CHECK(a.begin_ns == e.begin_ns);
  CHECK(a.end_ns == e.end_ns);
  CHECK(a.bytes == e.bytes);
  CHECK(a.flow == e.flow);
  CHECK(a.step == e.step);
  CHECK(a.microbatch == e.microbatch);
  CHECK(a.actor == e.actor);
  CHECK(a.kind == e.kind);
  CHECK(a.mailbox == e.mailbox);
  CHECK(got.batch.spans[1].kind == span_kind::backward_weight);
  CHECK(got.batch.spans[1].flow_end == 1);
  REQUIRE(got.batch.counters.size() == 1);
  CHECK(got.batch.counters[0].name == "loss");
  CHECK(got.batch.counters[0].value == 4.5);
  CHECK(got.batch.counters[0].step == 4);
  CHECK(got.batch.counters[0].t_ns == 1'000'000'005'000);
}

TEST_CASE("a spans frame cut short anywhere is refused") {
  auto f = encode(sample_batch());
  for (std::size_t n = 0; n < f.meta.size(); ++n) {
    CAPTURE(n);
    auto cut = f;
    cut.meta.resize(n);
    CHECK_THROWS_AS(decode_spans(cut), malformed_input);
  }
  f.meta.push_back(std::byte{0});
  CHECK_THROWS_WITH_AS(decode_spans(f), "1 unexpected trailing bytes", malformed_input);
}

TEST_CASE("counts larger than a spans frame are refused before anything is allocated") {
  constexpr auto huge = std::numeric_limits<std::uint32_t>::max();
  CHECK_THROWS_WITH_AS(decode_spans(spans_frame(huge, 0, 0)), "a count larger than the message", malformed_input);
  CHECK_THROWS_WITH_AS(decode_spans(spans_frame(0, huge, 0)), "a count larger than the message", malformed_input);
  CHECK_THROWS_WITH_AS(decode_spans(spans_frame(0, 0, huge)), "a count larger than the message", malformed_input);
  // One span more than the bytes that follow can hold.
  CHECK_THROWS_WITH_AS(decode_spans(spans_frame(0, 2, 0, 48 + 4)), "a count larger than the message",
                       malformed_input);
  // A name longer than the frame.
  net::frame f = spans_frame(1, 0, 0);
  f.meta.resize(f.meta.size() - 8);  // drop the span and counter counts: the actor follows
  byte_writer w{f.meta};
  // id, a name longer than the frame, type, role
  w.put(std::uint16_t{0}), w.put(huge), w.put(std::uint32_t{0}), w.put(std::uint32_t{0});
  CHECK_THROWS_WITH_AS(decode_spans(f), "truncated message", malformed_input);
}

TEST_CASE("a span of an unknown kind, one that ends before it begins, or a flag of 2 is refused") {
  auto bad = [](auto change) {
    auto m = sample_batch();
    change(m.batch.spans[0]);
    return encode(m);
  };
  CHECK_THROWS_WITH_AS(decode_spans(bad([](span& s) { s.kind = static_cast<span_kind>(200); })),
                       "span kind 200 (known: 0 to 11)", malformed_input);
  CHECK_THROWS_AS(decode_spans(bad([](span& s) { s.end_ns = s.begin_ns - 1; })), malformed_input);
  CHECK_THROWS_WITH_AS(decode_spans(bad([](span& s) { s.flow_end = 2; })), "a flag of 2 (expected 0 or 1)",
                       malformed_input);
}

TEST_CASE("a spans frame is not taken for another kind, nor with tensor payloads") {
  auto f = encode(sample_batch());
  CHECK_THROWS_AS(decode_clock(f), malformed_input);
  CHECK_THROWS_AS(decode_spans(encode(control_kind::heartbeat)), malformed_input);
}

TEST_CASE("clock probes, their answers and span acks round trip") {
  auto c = decode_clock(encode(clock_msg{123, 456}));
  CHECK(c.coordinator_ns == 123);
  CHECK(c.node_ns == 456);
  CHECK(decode_spans_ack(encode_spans_ack(42)) == 42);
  auto ack = encode_spans_ack(42);
  ack.meta.pop_back();
  CHECK_THROWS_AS(decode_spans_ack(ack), malformed_input);
}

TEST_CASE("hello and plan carry the clock domain and the stream flag") {
  hello_msg h{3, "host", 99, "10.0.0.1", 4000, "boot-id"};
  auto got = decode_hello(encode(h));
  CHECK(got.clock_domain == "boot-id");
  CHECK(got.data_port == 4000);
  plan_msg p;
  p.stream_trace = true;
  p.nodes = {{"a", 1}, {"b", 2}};
  auto gp = decode_plan(encode(p));
  CHECK(gp.stream_trace);
  CHECK(gp.nodes.size() == 2);
  CHECK(!clock_domain().empty());
}

TEST_CASE("the clock estimate keeps the answer with the shortest round trip") {
  clock_estimate c;
  CHECK_FALSE(c.known());
  // Node clock = coordinator clock + 5000 ns. A slow answer (rtt 4000, node
  // answered late in it) would say +6000; a quick one (rtt 200) says +5000.
  c.add({10'000, 10'000 + 5000 + 3000}, 14'000);
  CHECK(c.offset_ns() == 6000);
  CHECK(c.error_ns() == 2000);
  c.add({20'000, 20'000 + 5000 + 100}, 20'200);
  CHECK(c.offset_ns() == 5000);
  CHECK(c.error_ns() == 100);
  // Enough later, slower samples push the quick one out of the window.
  for (std::size_t i = 0; i < clock_estimate::window; ++i)
    c.add({30'000, 30'000 + 5000 + 500}, 31'000);
  CHECK(c.offset_ns() == 5000);
  CHECK(c.error_ns() == 500);
}

TEST_CASE("a clock answer from the future or with negative times is refused") {
  clock_estimate c;
  CHECK_THROWS_AS(c.add({2000, 5}, 1000), malformed_input);
  CHECK_THROWS_AS(c.add({std::numeric_limits<std::int64_t>::min(), 5}, 1000), malformed_input);
  CHECK_THROWS_AS(c.add({10, std::numeric_limits<std::int64_t>::min()}, 1000), malformed_input);
  CHECK_FALSE(c.known());
}
