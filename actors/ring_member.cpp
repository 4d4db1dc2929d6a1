// The ring members' shared bucket handling (actors/ring_member.hpp).
#include "actors/ring_member.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/trace/trace.hpp"

namespace troupe {

void ring_flight::take(bucket_msg m, int members, int rank) {
  started_ns = trace_now();
  std::int64_t n = 0;
  for (const auto& t : m.tensors)
    n += t.numel();
  plan = {members, rank, n};
  flat = tensor_handle::empty({plan.padded()});
  float* dst = flat.data<float>();
  for (const auto& t : m.tensors) {
    std::memcpy(dst, t.raw(), t.nbytes());
    dst += t.numel();
  }
  std::fill(dst, flat.data<float>() + plan.padded(), 0.0f);
  bucket = std::move(m);
}

void ring_flight::write_back(const std::vector<tensor_handle>& into) const {
  const float* src = flat.data<float>();
  for (const auto& t : into) {
    std::memcpy(t.raw(), src, t.nbytes());
    src += t.numel();
  }
}

namespace {

/// The top 16 bits of `v` rounded to bf16, nearest even; a NaN stays a NaN.
std::uint16_t bf16_bits(float v) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu))
    bits |= 0x10000u;
  else
    bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_value(std::uint16_t b) {
  std::uint32_t bits = std::uint32_t{b} << 16;
  float v = 0;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

} // namespace

tensor_handle ring_flight::chunk(int phase, bool bf16) {
  auto n = plan.chunk_elements();
  float* src = flat.data<float>() + plan.send_chunk(phase) * n;
  if (!bf16) {
    auto copy = tensor_handle::empty({n});
    std::memcpy(copy.raw(), src, static_cast<std::size_t>(n) * sizeof(float));
    return copy;
  }
  auto copy = tensor_handle::empty({n}, dtype::bf16);
  auto* dst = copy.data<std::uint16_t>();
  const bool gather = !plan.adds(phase); // the receiver keeps these values: so does this member
  for (std::int64_t i = 0; i < n; ++i) {
    dst[i] = bf16_bits(src[i]);
    if (gather)
      src[i] = bf16_value(dst[i]);
  }
  return copy;
}

void ring_flight::apply(int phase, const tensor_handle& in, const std::string& who, step_t step, int b) {
  auto n = plan.chunk_elements();
  if (in.numel() != n)
    throw std::runtime_error(
      fmt::format("{}: ring chunk of {} values for bucket {} of step {}, expected {}", who, in.numel(), b, step, n));
  float* dst = flat.data<float>() + plan.recv_chunk(phase) * n;
  if (in.type() == dtype::bf16) {
    const auto* v = in.data<std::uint16_t>();
    if (plan.adds(phase))
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] += bf16_value(v[i]);
    else
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] = bf16_value(v[i]);
  } else {
    const float* v = in.data<float>();
    if (plan.adds(phase))
      for (std::int64_t i = 0; i < n; ++i)
        dst[i] += v[i];
    else
      std::memcpy(dst, v, static_cast<std::size_t>(n) * sizeof(float));
  }
}

void store_directory(const connect_msg& m, std::vector<caf::actor>& actors, std::vector<std::uint16_t>& ids) {
  for (const auto& p : m.directory) {
    actors.push_back(p.handle);
    ids.push_back(trace_recorder::global().actor_id(p.name).value_or(0xffff));
  }
}

void record_ring_send(std::uint16_t actor, step_t step, int bucket, std::uint64_t bytes) {
  span s;
  s.actor = actor, s.kind = span_kind::send, s.step = static_cast<std::int32_t>(step), s.microbatch = bucket;
  s.bytes = bytes;
  s.begin_ns = s.end_ns = trace_now();
  trace_recorder::global().record(s);
}

} // namespace troupe
