// A live replica's state as one message (#26): its tensors in one blob.
#include "runtime/actor/outer_messages.hpp"

#include <cstring>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

state_msg to_state_msg(step_t steps, int replica, const safetensors_file& f) {
  state_msg m;
  m.steps = steps, m.replica = replica;
  std::size_t total = 0;
  for (const auto& t : f.tensors)
    total += t.value.nbytes();
  m.bytes = tensor_handle::empty({static_cast<std::int64_t>(total)}, dtype::u8);
  auto* out = m.bytes.data<std::uint8_t>();
  for (const auto& t : f.tensors) {
    auto host = copy_to_host(t.value);
    m.names.push_back(t.name);
    m.types.push_back(static_cast<std::int32_t>(host.type()));
    m.dims.push_back(host.rank());
    for (int d = 0; d < host.rank(); ++d)
      m.dims.push_back(host.dim(d));
    std::memcpy(out, host.raw(), host.nbytes());
    out += host.nbytes();
  }
  for (const auto& [k, v] : f.metadata)
    m.keys.push_back(k), m.values.push_back(v);
  return m;
}

safetensors_file state_file(const state_msg& m) {
  safetensors_file f;
  std::size_t at = 0, dim = 0;
  const std::size_t total = m.bytes.defined() ? m.bytes.nbytes() : 0;
  for (std::size_t i = 0; i < m.names.size(); ++i) {
    auto type = m.types.at(i);
    if (type < 0 || type > static_cast<std::int32_t>(dtype::u8))
      throw std::invalid_argument(fmt::format("tensor '{}' has dtype code {}", m.names[i], type));
    if (dim >= m.dims.size() || m.dims[dim] < 0 || m.dims[dim] > shape_t::max_rank ||
        dim + 1 + static_cast<std::size_t>(m.dims[dim]) > m.dims.size())
      throw std::invalid_argument(fmt::format("tensor '{}' has no shape", m.names[i]));
    std::vector<std::int64_t> shape(m.dims.begin() + static_cast<std::ptrdiff_t>(dim + 1),
                                    m.dims.begin() + static_cast<std::ptrdiff_t>(dim + 1 + m.dims[dim]));
    dim += 1 + static_cast<std::size_t>(m.dims[dim]);
    std::int64_t n = 1;
    for (auto d : shape) {
      if (d < 0 || (d > 0 && n > (std::int64_t{1} << 40) / d))
        throw std::invalid_argument(fmt::format("tensor '{}' has a bad shape", m.names[i]));
      n *= d;
    }
    auto t = tensor_handle::empty(shape_t(std::span<const std::int64_t>(shape)), static_cast<dtype>(type));
    if (at + t.nbytes() > total)
      throw std::invalid_argument(
        fmt::format("tensor '{}' runs past the {} bytes the state carries", m.names[i], total));
    std::memcpy(t.raw(), m.bytes.data<std::uint8_t>() + at, t.nbytes());
    at += t.nbytes();
    f.tensors.push_back({m.names[i], std::move(t)});
  }
  if (at != total || dim != m.dims.size())
    throw std::invalid_argument(fmt::format("the state carries {} bytes, its tensors hold {}", total, at));
  for (std::size_t i = 0; i < m.keys.size(); ++i)
    f.metadata[m.keys[i]] = m.values.at(i);
  return f;
}

} // namespace troupe
