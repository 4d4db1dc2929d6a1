// Encoding and decoding of the data-plane frames declared in remote_codec.hpp.
#include "actors/remote_codec.hpp"

#include <cstring>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/pipeline_messages.hpp"
#include "runtime/transport/bytes.hpp"

namespace troupe::remote {

namespace {

constexpr std::uint8_t max_rank = 6;

/// Appends `t`; a device tensor goes as a host copy made once `ready` is passed
/// (the sockets read host memory; the receiver uploads it where it needs it).
void put_tensor(net::frame& f, const tensor_handle& device_or_host, const device_fence* ready = nullptr) {
  byte_writer w{f.meta};
  w.put(static_cast<std::uint8_t>(device_or_host.defined()));
  if (!device_or_host.defined())
    return;
  auto t = copy_to_host(device_or_host, ready);
  w.put(static_cast<std::uint8_t>(t.type()));
  w.put(static_cast<std::uint8_t>(t.rank()));
  for (auto d : t.shape())
    w.put(d);
  f.blobs.push_back(t);
}

tensor_handle get_tensor(byte_reader& r, net::frame& f, std::size_t& blob) {
  if (r.get<std::uint8_t>() == 0)
    return {};
  auto type = r.get<std::uint8_t>();
  if (type > static_cast<std::uint8_t>(dtype::u8))
    throw malformed_input(fmt::format("unknown dtype {}", type));
  auto rank = r.get<std::uint8_t>();
  if (rank > max_rank)
    throw malformed_input(fmt::format("tensor rank {} (at most {})", rank, max_rank));
  std::int64_t dims[max_rank]{};
  for (std::uint8_t i = 0; i < rank; ++i) {
    dims[i] = r.get<std::int64_t>();
    if (dims[i] < 0 || dims[i] > (std::int64_t{1} << 40))
      throw malformed_input(fmt::format("tensor dimension {}", dims[i]));
  }
  if (blob >= f.blobs.size())
    throw malformed_input("fewer tensor payloads than tensors");
  shape_t shape{std::span<const std::int64_t>(dims, rank)};
  auto& b = f.blobs[blob++];
  auto need = static_cast<unsigned __int128>(static_cast<std::uint64_t>(shape.numel())) *
              size_of(static_cast<dtype>(type));
  if (need != b.nbytes())
    throw malformed_input(fmt::format("tensor of {} bytes in a payload of {}", static_cast<std::uint64_t>(need),
                                      b.nbytes()));
  return b.view(shape, static_cast<dtype>(type));
}

void put_route(net::frame& f, const route_t& route) {
  byte_writer w{f.meta};
  w.put(static_cast<std::uint32_t>(route.size()));
  for (const auto& h : route)
    w.put(h.actor), w.put(h.chunk);
}

route_t get_route(byte_reader& r) {
  route_t route(r.get_count(2 * sizeof(std::int32_t)));
  for (auto& h : route) {
    h.actor = r.get<std::int32_t>(), h.chunk = r.get<std::int32_t>();
    if (h.actor < 0 || h.chunk < 0)
      throw malformed_input(fmt::format("route hop {}.{}", h.actor, h.chunk));
  }
  return route;
}

template <class... Fields>
net::frame head(data_kind k, std::uint16_t dest, const Fields&... fields) {
  net::frame f;
  f.kind = static_cast<std::uint16_t>(k);
  byte_writer w{f.meta};
  w.put(dest);
  (w.put(fields), ...);
  return f;
}

} // namespace

net::frame encode(std::uint16_t dest, const batch_msg& m, bool eval) {
  auto f = head(eval ? data_kind::eval_batch : data_kind::batch, dest, m.step, m.microbatch);
  put_tensor(f, m.tokens);
  put_tensor(f, m.targets);
  put_route(f, m.route);
  put_tensor(f, m.documents);
  put_tensor(f, m.round_documents);
  return f;
}

net::frame encode(std::uint16_t dest, const activation_msg& m, bool eval) {
  auto f = head(eval ? data_kind::eval_activation : data_kind::activation, dest, m.step, m.microbatch, m.hop);
  put_tensor(f, m.activation, m.ready.get());
  put_route(f, m.route);
  put_tensor(f, m.documents);
  put_tensor(f, m.round_documents);
  put_tensor(f, m.targets);
  return f;
}

net::frame encode(std::uint16_t dest, const gradient_msg& m) {
  auto f = head(data_kind::gradient, dest, m.step, m.microbatch, m.hop);
  put_tensor(f, m.gradient, m.ready.get());
  put_route(f, m.route);
  return f;
}

net::frame encode_norm(std::uint16_t dest, step_t step, double sq_norm, std::int32_t from) {
  return head(data_kind::norm, dest, step, sq_norm, from);
}

net::frame encode_clip(std::uint16_t dest, step_t step, double total_sq) {
  return head(data_kind::clip, dest, step, total_sq);
}

net::frame encode(std::uint16_t dest, const credit_msg& m) {
  return head(data_kind::credit, dest, m.count, m.from, m.backlog_s, m.cost_s);
}

net::frame encode_hops(std::uint16_t dest, step_t step, std::int32_t from, std::int32_t count) {
  return head(data_kind::hops, dest, step, from, count);
}

net::frame encode(std::uint16_t dest, const step_plan_msg& m) {
  return head(data_kind::plan, dest, m.step, m.hops, m.tokens, m.participants, m.reducer);
}

net::frame encode(std::uint16_t dest, const ring_msg& m) {
  auto f = head(data_kind::ring, dest, m.step, m.bucket, m.phase);
  put_tensor(f, m.chunk);
  return f;
}

net::frame encode(std::uint16_t dest, const outer_part_msg& m) {
  auto f = head(data_kind::outer_part, dest, m.step, m.fragment, m.replica, m.round, m.piece, m.format, m.values,
                m.cols);
  auto data = tensor_handle::empty({static_cast<std::int64_t>(m.data.size())}, dtype::u8);
  if (!m.data.empty())  // an empty chunk, or an f32 part's scales: nothing to copy (and no pointer to copy from)
    std::memcpy(data.raw(), m.data.data(), m.data.size());
  auto scales = tensor_handle::empty({static_cast<std::int64_t>(m.scales.size())});
  if (!m.scales.empty())
    std::memcpy(scales.raw(), m.scales.data(), m.scales.size() * sizeof(float));
  put_tensor(f, data);
  put_tensor(f, scales);
  return f;
}

namespace {
net::frame head(data_kind k, std::uint16_t dest, const attention_key& key) {
  return head(k, dest, key.step, key.from, key.microbatch, key.nano, key.chunk, key.layer, key.shard,
              static_cast<std::uint8_t>(key.backward));
}

attention_key get_key(byte_reader& r) {
  attention_key k;
  k.step = r.get<step_t>(), k.from = r.get<std::int32_t>(), k.microbatch = r.get<std::int32_t>();
  k.nano = r.get<std::int32_t>(), k.chunk = r.get<std::int32_t>(), k.layer = r.get<std::int32_t>();
  k.shard = r.get<std::int32_t>(), k.backward = r.get<std::uint8_t>() != 0;
  return k;
}
} // namespace

net::frame encode(std::uint16_t dest, const attention_task_msg& m) {
  auto f = head(data_kind::attention_task, dest, m.key);
  byte_writer{f.meta}.put(m.heads);
  for (const auto* t : {&m.q, &m.k, &m.v, &m.dout})
    put_tensor(f, *t);
  return f;
}

net::frame encode(std::uint16_t dest, const attention_result_msg& m) {
  auto f = head(data_kind::attention_result, dest, m.key);
  for (const auto* t : {&m.out, &m.dq, &m.dk, &m.dv})
    put_tensor(f, *t);
  return f;
}

void deliver(net::frame&& f, const std::function<caf::actor(std::uint16_t)>& local) {
  byte_reader r{f.meta};
  auto dest_index = r.get<std::uint16_t>();
  auto dest = local(dest_index);
  if (!dest)
    throw malformed_input(fmt::format("no actor {} on this node", dest_index));
  std::size_t blob = 0;
  auto finish = [&] {
    r.expect_end();
    if (blob != f.blobs.size())
      throw malformed_input(fmt::format("{} tensor payloads for {} tensors", f.blobs.size(), blob));
  };
  switch (static_cast<data_kind>(f.kind)) {
    case data_kind::batch:
    case data_kind::eval_batch: {
      batch_msg m;
      m.step = r.get<step_t>(), m.microbatch = r.get<std::int32_t>();
      m.tokens = get_tensor(r, f, blob), m.targets = get_tensor(r, f, blob), m.route = get_route(r);
      m.documents = get_tensor(r, f, blob);
      m.round_documents = get_tensor(r, f, blob);
      finish();
      if (f.kind == static_cast<std::uint16_t>(data_kind::batch))
        caf::anon_send(dest, forward_atom::value, std::move(m));
      else
        caf::anon_send(dest, eval_atom::value, std::move(m));
      return;
    }
    case data_kind::activation:
    case data_kind::eval_activation: {
      activation_msg m;
      m.step = r.get<step_t>(), m.microbatch = r.get<std::int32_t>(), m.hop = r.get<std::int32_t>();
      m.activation = get_tensor(r, f, blob), m.route = get_route(r);
      m.documents = get_tensor(r, f, blob);
      m.round_documents = get_tensor(r, f, blob);
      m.targets = get_tensor(r, f, blob);
      finish();
      if (f.kind == static_cast<std::uint16_t>(data_kind::activation))
        caf::anon_send(dest, forward_atom::value, std::move(m));
      else
        caf::anon_send(dest, eval_atom::value, std::move(m));
      return;
    }
    case data_kind::gradient: {
      gradient_msg m;
      m.step = r.get<step_t>(), m.microbatch = r.get<std::int32_t>(), m.hop = r.get<std::int32_t>();
      m.gradient = get_tensor(r, f, blob), m.route = get_route(r);
      finish();
      caf::anon_send(dest, backward_atom::value, std::move(m));
      return;
    }
    case data_kind::norm: {
      auto step = r.get<step_t>();
      auto sq = r.get<double>();
      auto from = r.get<std::int32_t>();
      finish();
      caf::anon_send(dest, norm_atom::value, step, sq, from);
      return;
    }
    case data_kind::clip: {
      auto step = r.get<step_t>();
      auto total = r.get<double>();
      finish();
      caf::anon_send(dest, clip_atom::value, step, total);
      return;
    }
    case data_kind::credit: {
      credit_msg m;
      m.count = r.get<std::int32_t>(), m.from = r.get<std::int32_t>();
      m.backlog_s = r.get<double>(), m.cost_s = r.get<double>();
      finish();
      caf::anon_send(dest, credit_atom::value, m);
      return;
    }
    case data_kind::ring: {
      ring_msg m;
      m.step = r.get<step_t>(), m.bucket = r.get<std::int32_t>(), m.phase = r.get<std::int32_t>();
      m.chunk = get_tensor(r, f, blob);
      finish();
      if (!m.chunk.defined() || (m.chunk.type() != dtype::f32 && m.chunk.type() != dtype::bf16) || m.phase < 0)
        throw malformed_input(fmt::format("ring chunk of phase {} without f32 or bf16 values", m.phase));
      caf::anon_send(dest, ring_atom::value, std::move(m));
      return;
    }
    case data_kind::hops: {
      auto step = r.get<step_t>();
      auto from = r.get<std::int32_t>();
      auto count = r.get<std::int32_t>();
      finish();
      if (count < 0)
        throw malformed_input(fmt::format("hops count {}", count));
      caf::anon_send(dest, hops_atom::value, step, from, count);
      return;
    }
    case data_kind::plan: {
      step_plan_msg m;
      m.step = r.get<step_t>(), m.hops = r.get<std::int32_t>(), m.tokens = r.get<std::int64_t>();
      m.participants = r.get<std::int32_t>(), m.reducer = r.get<std::int32_t>();
      finish();
      caf::anon_send(dest, plan_atom::value, m);
      return;
    }
    case data_kind::attention_task: {
      attention_task_msg m;
      m.key = get_key(r);
      m.heads = r.get<std::int32_t>();
      m.q = get_tensor(r, f, blob), m.k = get_tensor(r, f, blob), m.v = get_tensor(r, f, blob);
      m.dout = get_tensor(r, f, blob);
      finish();
      caf::anon_send(dest, attention_atom::value, std::move(m));
      return;
    }
    case data_kind::attention_result: {
      attention_result_msg m;
      m.key = get_key(r);
      m.out = get_tensor(r, f, blob), m.dq = get_tensor(r, f, blob), m.dk = get_tensor(r, f, blob);
      m.dv = get_tensor(r, f, blob);
      finish();
      caf::anon_send(dest, attention_atom::value, std::move(m));
      return;
    }
    case data_kind::outer_part: {
      outer_part_msg m;
      m.step = r.get<step_t>(), m.fragment = r.get<std::int32_t>(), m.replica = r.get<std::int32_t>();
      m.round = r.get<std::int32_t>(), m.piece = r.get<std::int32_t>(), m.format = r.get<std::int32_t>();
      m.values = r.get<std::int64_t>(), m.cols = r.get<std::int64_t>();
      auto data = get_tensor(r, f, blob);
      auto scales = get_tensor(r, f, blob);
      finish();
      if (!data.defined() || data.type() != dtype::u8 || data.rank() != 1 || !scales.defined() ||
          scales.type() != dtype::f32 || scales.rank() != 1 || m.fragment < 0 || m.replica < 0 || m.round < 0 ||
          m.piece < 0 || m.values < 0 || m.cols < 0)
        throw malformed_input(fmt::format("outer part of fragment {} from replica {} malformed", m.fragment, m.replica));
      m.data.assign(data.data<std::uint8_t>(), data.data<std::uint8_t>() + data.numel());
      m.scales.assign(scales.data<float>(), scales.data<float>() + scales.numel());
      caf::anon_send(dest, outer_part_atom::value, std::move(m));
      return;
    }
  }
  throw malformed_input(fmt::format("unknown data frame kind {}", f.kind));
}

} // namespace troupe::remote
