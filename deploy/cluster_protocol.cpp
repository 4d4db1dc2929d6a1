// Encoding of the control frames declared in cluster_protocol.hpp.
#include "deploy/cluster_protocol.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "runtime/bytes.hpp"

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

} // namespace

net::frame encode(const hello_msg& m) {
  return make(control_kind::hello, m.node, m.host, m.pid, m.data_host, m.data_port);
}

net::frame encode(const plan_msg& m) {
  auto f = make(control_kind::plan, m.graph_file, m.graph_hash, m.overrides, m.resume, m.transport, m.trace_file,
                m.trace_buffer);
  byte_writer w{f.meta};
  w.put(static_cast<std::uint32_t>(m.nodes.size()));
  for (const auto& n : m.nodes)
    w.put(n.host), w.put(n.port);
  return f;
}

net::frame encode(const run_summary& m) {
  return make(control_kind::done, m.actor, m.steps, m.tokens, m.train_loss, m.val_loss, m.losses);
}

net::frame encode(const failure_msg& m) {
  return make(control_kind::failed, m.actor, m.what);
}

net::frame encode(const checkpoint_msg& m) {
  return make(control_kind::checkpoint, m.actor, m.step, m.file);
}

net::frame encode(control_kind k) {
  return make(k);
}

hello_msg decode_hello(const net::frame& f) {
  auto r = reader_for(f, control_kind::hello);
  hello_msg m;
  m.node = r.get<std::int32_t>();
  m.host = r.get_string();
  m.pid = r.get<std::int64_t>();
  m.data_host = r.get_string();
  m.data_port = r.get<std::uint16_t>();
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
