// The coordinator's control frames: spans batches, clock probes and acks round
// trip, hostile sizes and values are refused before anything is allocated, every
// kind survives damage without a crash, and the clock estimate keeps its best sample.
#include "deploy/cluster/cluster_protocol.hpp"

#include <limits>

#include <doctest/doctest.h>

#include "tests/wire_fuzz.hpp"

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
  auto f = wire::write(static_cast<std::uint16_t>(control_kind::spans), std::uint64_t{1}, std::uint64_t{0}, actors,
                       spans, counters);
  f.meta.resize(f.meta.size() + tail);
  return f;
}

template <class T>
std::string what(const caf::expected<T>& x) {
  return x ? std::string{"no error"} : error_message(x.error());
}

} // namespace

TEST_CASE("a spans batch round trips with every field of its actors, spans and counters") {
  auto m = sample_batch();
  auto decoded = decode<spans_msg>(encode(m));
  REQUIRE(decoded);
  auto& got = *decoded;
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
    CHECK(!decode<spans_msg>(cut));
  }
  f.meta.push_back(std::byte{0});
  CHECK(what(decode<spans_msg>(f)).starts_with("1 unexpected trailing bytes"));
}

TEST_CASE("counts larger than a spans frame are refused before anything is allocated") {
  constexpr auto huge = std::numeric_limits<std::uint32_t>::max();
  CHECK(what(decode<spans_msg>(spans_frame(huge, 0, 0))).starts_with("a count larger than the message"));
  CHECK(what(decode<spans_msg>(spans_frame(0, huge, 0))).starts_with("a count larger than the message"));
  CHECK(what(decode<spans_msg>(spans_frame(0, 0, huge))).starts_with("a count larger than the message"));
  // One span more than the bytes that follow can hold.
  CHECK(what(decode<spans_msg>(spans_frame(0, 2, 0, 48 + 4))) ==
        "a count larger than the message (in spans_msg, at byte 24)");
  // A name longer than the frame.
  net::frame f = spans_frame(1, 0, 0);
  f.meta.resize(f.meta.size() - 8); // drop the span and counter counts: the actor follows
  // id, a name longer than the frame, type, node, role, position
  auto actor =
    wire::write(0, std::uint16_t{0}, huge, std::uint32_t{0}, std::uint32_t{0}, std::uint32_t{0}, std::uint32_t{0});
  f.meta.insert(f.meta.end(), actor.meta.begin(), actor.meta.end());
  CHECK(what(decode<spans_msg>(f)) == "truncated message (in spans_msg > actor_info[0], at byte 26)");
}

TEST_CASE("a span of an unknown kind, one that ends before it begins, or a flag of 2 is refused") {
  auto bad = [](auto change) {
    auto m = sample_batch();
    change(m.batch.spans[0]);
    return encode(m);
  };
  CHECK(what(decode<spans_msg>(bad([](span& s) { s.kind = static_cast<span_kind>(200); })))
          .starts_with("span kind 200 (known: 0 to 12) (in spans_msg > span[0], at byte"));
  CHECK(what(decode<spans_msg>(bad([](span& s) { s.end_ns = s.begin_ns - 1; }))).starts_with("a span that ends"));
  CHECK(what(decode<spans_msg>(bad([](span& s) { s.flow_end = 2; }))).starts_with("a flag of 2 (expected 0 or 1)"));
}

TEST_CASE("a spans frame is not taken for another kind, nor with tensor payloads") {
  auto f = encode(sample_batch());
  CHECK(!decode<clock_msg>(f));
  CHECK(!decode<spans_msg>(encode(control_kind::heartbeat)));
  f.blobs.push_back(tensor_handle::zeros({4}, dtype::u8));
  CHECK(what(decode<spans_msg>(f)).starts_with("1 tensor payloads for 0 tensors"));
}

TEST_CASE("clock probes, their answers and span acks round trip") {
  auto c = decode<clock_msg>(encode(clock_msg{123, 456}));
  REQUIRE(c);
  CHECK(c->coordinator_ns == 123);
  CHECK(c->node_ns == 456);
  CHECK(decode<spans_ack_msg>(encode(spans_ack_msg{42}))->seq == 42);
  auto ack = encode(spans_ack_msg{42});
  ack.meta.pop_back();
  CHECK(!decode<spans_ack_msg>(ack));
  CHECK(decode<replica_lost_msg>(encode(replica_lost_msg{3}))->replica == 3);
  CHECK(what(decode<replica_lost_msg>(encode(replica_lost_msg{-1}))).starts_with("replica_lost names replica -1"));
}

TEST_CASE("hello and plan carry the clock domain and the stream flag") {
  hello_msg h{3, "host", 99, "10.0.0.1", 4000, "boot-id"};
  auto got = decode<hello_msg>(encode(h));
  REQUIRE(got);
  CHECK(got->clock_domain == "boot-id");
  CHECK(got->data_port == 4000);
  plan_msg p;
  p.stream_trace = true;
  p.nodes = {{"a", 1}, {"b", 2}};
  auto gp = decode<plan_msg>(encode(p));
  REQUIRE(gp);
  CHECK(gp->stream_trace);
  REQUIRE(gp->nodes.size() == 2);
  CHECK(gp->nodes[1].host == "b");
  CHECK(gp->nodes[1].port == 2);
  CHECK(!clock_domain().empty());
}

TEST_CASE("a run summary crosses processes with every field its inspect() lists, the short-path loss too") {
  run_summary s;
  s.actor = "r0s3", s.steps = 5, s.tokens = 640, s.train_loss = 2.5, s.val_loss = 2.75, s.val_loss_short = 3.0;
  s.losses = {4.0, 3.5, 3.0}, s.params_bytes = 1024, s.bytes_sent = 7;
  auto got = decode<run_summary>(encode(s));
  REQUIRE(got);
  CHECK(got->val_loss_short == 3.0);
  CHECK(got->losses == s.losses);
  CHECK(got->params_bytes == 1024);
  CHECK(got->grads_bytes == -1);
}

TEST_CASE("a span takes 48 bytes on the wire, so the largest spans batch fits a frame's meta") {
  CHECK(wire::min_size<span>() == 48);
  spans_msg m;
  m.batch.spans.resize(max_batch_spans);
  m.batch.counters.resize(max_batch_counters, counter_sample{0, "tokens_per_s", 0, 0});
  m.batch.actors.resize(256, actor_info{0, "r15s15 with a long name", "pipeline_stage", 0, "stage"});
  CHECK(wire::size_of(m).meta < net::max_meta_bytes);
}

TEST_CASE("every control frame kind round trips, and each damaged copy is refused or read, never a crash") {
  int kinds = 0;
  control_table::for_each([&]<class Entry>(Entry) {
    using message = std::tuple_element_t<0, typename Entry::values>;
    ++kinds;
    CAPTURE(Entry::tag);
    auto good = encode(testing::sample<message>());
    auto again = decode<message>(good);
    REQUIRE(again);
    CHECK(testing::bytes_of(encode(*again)) == testing::bytes_of(good));
    for (auto& d : testing::damage(good)) {
      CAPTURE(d.how);
      auto got = decode<message>(d.f);
      if (d.must_fail)
        CHECK(!got);
      if (!got)
        CHECK(is_error(got.error(), errc::malformed_frame));
    }
  });
  CHECK(kinds == 13);
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
