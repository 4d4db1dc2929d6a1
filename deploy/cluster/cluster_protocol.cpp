// Encoding of the control frames declared in cluster_protocol.hpp.
#include "deploy/cluster/cluster_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "runtime/transport/bytes.hpp"

namespace troupe::cluster {

namespace {

template <class... Fields>
net::frame make(control_kind k, const Fields&... fields) {
  net::frame f;
  f.kind = static_cast<std::uint16_t>(k);
  byte_writer w{f.meta};
  (w.put(fields), ...);
  return f;
}

byte_reader reader_for(const net::frame& f, control_kind k) {
  if (f.kind != static_cast<std::uint16_t>(k))
    throw malformed_input(fmt::format("expected control frame {}, got {}", static_cast<int>(k), f.kind));
  if (!f.blobs.empty())
    throw malformed_input("a control frame with tensor payloads");
  return byte_reader{f.meta};
}

std::vector<std::string> get_strings(byte_reader& r) {
  std::vector<std::string> v(r.get_count(sizeof(std::uint32_t)));
  for (auto& s : v)
    s = r.get_string();
  return v;
}

bool get_flag(byte_reader& r) {
  auto v = r.get<std::uint8_t>();
  if (v > 1)
    throw malformed_input(fmt::format("a flag of {} (expected 0 or 1)", v));
  return v == 1;
}

/// Wire sizes of the smallest actor, span and counter in a spans frame.
constexpr std::size_t actor_bytes = 2 + 4 + 4 + 4;
constexpr std::size_t span_bytes = 8 * 4 + 4 * 2 + 2 + 1 + 1 + 4;
constexpr std::size_t counter_bytes = 8 + 4 + 8 + 4;

} // namespace

net::frame encode(const hello_msg& m) {
  return make(control_kind::hello, m.node, m.host, m.pid, m.data_host, m.data_port, m.clock_domain);
}

net::frame encode(const plan_msg& m) {
  auto f = make(control_kind::plan, m.graph_file, m.graph_hash, m.overrides, m.resume, m.transport, m.trace_file,
                m.trace_buffer, static_cast<std::uint8_t>(m.stream_trace));
  byte_writer w{f.meta};
  w.put(static_cast<std::uint32_t>(m.nodes.size()));
  for (const auto& n : m.nodes)
    w.put(n.host), w.put(n.port);
  return f;
}

net::frame encode(const run_summary& m) {
  return make(control_kind::done, m.actor, m.steps, m.tokens, m.train_loss, m.val_loss, m.losses, m.params_bytes,
              m.grads_bytes, m.optimizer_bytes, m.bytes_sent);
}

net::frame encode(const failure_msg& m) {
  return make(control_kind::failed, m.actor, m.what);
}

net::frame encode(const checkpoint_msg& m) {
  return make(control_kind::checkpoint, m.actor, m.step, m.file);
}

net::frame encode(const spans_msg& m) {
  const auto& b = m.batch;
  auto f = make(control_kind::spans, m.seq, b.dropped);
  byte_writer w{f.meta};
  w.put(static_cast<std::uint32_t>(b.actors.size()));
  for (const auto& a : b.actors)
    w.put(a.id), w.put(a.name), w.put(a.type), w.put(a.role);
  w.put(static_cast<std::uint32_t>(b.spans.size()));
  for (const auto& s : b.spans)
    w.put(s.begin_ns), w.put(s.end_ns), w.put(s.bytes), w.put(s.flow), w.put(s.step), w.put(s.microbatch),
      w.put(s.actor), w.put(s.kind), w.put(s.flow_end), w.put(s.mailbox);
  w.put(static_cast<std::uint32_t>(b.counters.size()));
  for (const auto& c : b.counters)
    w.put(c.t_ns), w.put(c.name), w.put(c.value), w.put(c.step);
  return f;
}

net::frame encode(const clock_msg& m) {
  return make(control_kind::clock, m.coordinator_ns, m.node_ns);
}

net::frame encode_spans_ack(std::uint64_t seq) {
  return make(control_kind::spans_ack, seq);
}

net::frame encode(control_kind k) {
  return make(k);
}

net::frame encode_replica_lost(std::int32_t replica) {
  return make(control_kind::replica_lost, replica);
}

hello_msg decode_hello(const net::frame& f) {
  auto r = reader_for(f, control_kind::hello);
  hello_msg m;
  m.node = r.get<std::int32_t>();
  m.host = r.get_string();
  m.pid = r.get<std::int64_t>();
  m.data_host = r.get_string();
  m.data_port = r.get<std::uint16_t>();
  m.clock_domain = r.get_string();
  r.expect_end();
  return m;
}

plan_msg decode_plan(const net::frame& f) {
  auto r = reader_for(f, control_kind::plan);
  plan_msg m;
  m.graph_file = r.get_string();
  m.graph_hash = r.get<std::uint64_t>();
  m.overrides = get_strings(r);
  m.resume = r.get_string();
  m.transport = r.get_string();
  m.trace_file = r.get_string();
  m.trace_buffer = r.get<std::uint64_t>();
  m.stream_trace = get_flag(r);
  m.nodes.resize(r.get_count(sizeof(std::uint32_t) + sizeof(std::uint16_t)));
  for (auto& n : m.nodes) {
    n.host = r.get_string();
    n.port = r.get<std::uint16_t>();
  }
  r.expect_end();
  return m;
}

run_summary decode_summary(const net::frame& f) {
  auto r = reader_for(f, control_kind::done);
  run_summary m;
  m.actor = r.get_string();
  m.steps = r.get<step_t>();
  m.tokens = r.get<std::int64_t>();
  m.train_loss = r.get<double>();
  m.val_loss = r.get<double>();
  m.losses.resize(r.get_count(sizeof(double)));
  for (auto& l : m.losses)
    l = r.get<double>();
  m.params_bytes = r.get<std::int64_t>();
  m.grads_bytes = r.get<std::int64_t>();
  m.optimizer_bytes = r.get<std::int64_t>();
  m.bytes_sent = r.get<std::int64_t>();
  r.expect_end();
  return m;
}

failure_msg decode_failure(const net::frame& f) {
  auto r = reader_for(f, control_kind::failed);
  failure_msg m;
  m.actor = r.get_string();
  m.what = r.get_string();
  r.expect_end();
  return m;
}

checkpoint_msg decode_checkpoint(const net::frame& f) {
  auto r = reader_for(f, control_kind::checkpoint);
  checkpoint_msg m;
  m.actor = r.get_string();
  m.step = r.get<step_t>();
  m.file = r.get_string();
  r.expect_end();
  return m;
}

spans_msg decode_spans(const net::frame& f) {
  auto r = reader_for(f, control_kind::spans);
  spans_msg m;
  auto& b = m.batch;
  m.seq = r.get<std::uint64_t>();
  b.dropped = r.get<std::uint64_t>();
  b.actors.resize(r.get_count(actor_bytes));
  for (auto& a : b.actors) {
    a.id = r.get<std::uint16_t>();
    a.name = r.get_string();
    a.type = r.get_string();
    a.role = r.get_string();
    a.node = 0;
  }
  b.spans.resize(r.get_count(span_bytes));
  for (auto& s : b.spans) {
    s.begin_ns = r.get<std::int64_t>();
    s.end_ns = r.get<std::int64_t>();
    s.bytes = r.get<std::uint64_t>();
    s.flow = r.get<std::uint64_t>();
    s.step = r.get<std::int32_t>();
    s.microbatch = r.get<std::int32_t>();
    s.actor = r.get<std::uint16_t>();
    auto kind = r.get<std::uint8_t>();
    if (kind > static_cast<std::uint8_t>(span_kind::other))
      throw malformed_input(fmt::format("span kind {} (known: 0 to {})", kind, static_cast<int>(span_kind::other)));
    s.kind = static_cast<span_kind>(kind);
    s.flow_end = get_flag(r) ? 1 : 0;
    s.mailbox = r.get<std::uint32_t>();
    if (s.end_ns < s.begin_ns)
      throw malformed_input(fmt::format("a span that ends ({} ns) before it begins ({} ns)", s.end_ns, s.begin_ns));
  }
  b.counters.resize(r.get_count(counter_bytes));
  for (auto& c : b.counters) {
    c.t_ns = r.get<std::int64_t>();
    c.name = r.get_string();
    c.value = r.get<double>();
    c.step = r.get<std::int32_t>();
  }
  r.expect_end();
  return m;
}

clock_msg decode_clock(const net::frame& f) {
  auto r = reader_for(f, control_kind::clock);
  clock_msg m;
  m.coordinator_ns = r.get<std::int64_t>();
  m.node_ns = r.get<std::int64_t>();
  r.expect_end();
  return m;
}

std::int32_t decode_replica_lost(const net::frame& f) {
  auto r = reader_for(f, control_kind::replica_lost);
  auto replica = r.get<std::int32_t>();
  r.expect_end();
  if (replica < 0)
    throw malformed_input(fmt::format("replica_lost names replica {}", replica));
  return replica;
}

std::uint64_t decode_spans_ack(const net::frame& f) {
  auto r = reader_for(f, control_kind::spans_ack);
  auto seq = r.get<std::uint64_t>();
  r.expect_end();
  return seq;
}

void clock_estimate::add(const clock_msg& answer, std::int64_t received_ns) {
  // Steady clocks count from boot: a negative reading is forged, and refusing
  // one keeps the arithmetic below from overflowing.
  if (answer.coordinator_ns < 0 || answer.node_ns < 0 || answer.coordinator_ns > received_ns)
    throw malformed_input(fmt::format("a clock answer (probe at {} ns, node at {} ns) that no probe sent at or "
                                      "before {} ns can have",
                                      answer.coordinator_ns, answer.node_ns, received_ns));
  auto rtt = received_ns - answer.coordinator_ns;
  if (samples_.size() == window)
    samples_.erase(samples_.begin());
  samples_.push_back({rtt, answer.node_ns - (answer.coordinator_ns + rtt / 2)});
}

const clock_estimate::sample* clock_estimate::best() const noexcept {
  auto b = std::min_element(samples_.begin(), samples_.end(),
                            [](const sample& x, const sample& y) { return x.rtt < y.rtt; });
  return b == samples_.end() ? nullptr : &*b;
}

std::int64_t clock_estimate::offset_ns() const noexcept {
  auto b = best();
  return b ? b->offset : 0;
}

std::int64_t clock_estimate::error_ns() const noexcept {
  auto b = best();
  return b ? (b->rtt + 1) / 2 : 0;
}

std::int64_t steady_now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

std::string clock_domain() {
  if (const char* forced = std::getenv("TROUPE_CLOCK_DOMAIN"))
    return forced;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::string id;
  std::getline(in, id);
  return id;
}

std::uint64_t file_hash(const std::string& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    return 0;
  std::uint64_t h = 14695981039346656037ull;
  for (std::istreambuf_iterator<char> it{in}, end; it != end; ++it)
    h = (h ^ static_cast<unsigned char>(*it)) * 1099511628211ull;
  return h;
}

} // namespace troupe::cluster
