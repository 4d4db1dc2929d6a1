#include "actors/bucket_direct.hpp"

#include <cstring>

#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

std::vector<float> flat_values(const std::vector<tensor_handle>& tensors) {
  std::int64_t n = 0;
  for (const auto& t : tensors)
    n += t.numel();
  std::vector<float> flat(static_cast<std::size_t>(n));
  float* dst = flat.data();
  for (const auto& t : tensors) {
    std::memcpy(dst, t.raw(), t.nbytes());
    dst += t.numel();
  }
  return flat;
}

void write_values(const std::vector<tensor_handle>& tensors, const float* values) {
  for (const auto& t : tensors) {
    std::memcpy(t.raw(), values, t.nbytes());
    values += t.numel();
  }
}

outer_part_msg part_message(sched::bucket_send& b, int replica) {
  auto& q = b.send.payload;
  return {b.step,   b.bucket, replica,           b.send.round,       b.send.piece, static_cast<std::int32_t>(q.format),
          q.values, q.cols,   std::move(q.data), std::move(q.scales)};
}

sched::quantized_rows part_rows(outer_part_msg& m) {
  sched::quantized_rows q;
  q.format = static_cast<sched::wire_format>(m.format);
  q.values = m.values, q.cols = m.cols;
  q.data = std::move(m.data), q.scales = std::move(m.scales);
  return q;
}

caf::expected<std::vector<int>> position_peers(const graph_spec& g, const actor_spec& stage, const std::string& type,
                                               const std::string& who) {
  std::vector<int> peers;
  for (int r = 0; r < g.sync_group_size(); ++r) {
    int peer = -1;
    for (const auto& a : g.actors)
      if (a.role.holds_layers && a.replica == r && a.layers == stage.layers)
        peer = helper_of(g, type, a.name);
    if (peer < 0)
      return make_error(errc::invalid_argument,
                        fmt::format("{}: replica {} has no {} for the layers of {}", who, r, type, stage.name));
    peers.push_back(peer);
  }
  return peers;
}

} // namespace troupe
