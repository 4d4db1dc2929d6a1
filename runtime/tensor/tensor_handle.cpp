// Tensor handles: allocation from pools, reshaping and slicing views.
#include "runtime/tensor/tensor_handle.hpp"

#include <cstring>
#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

shape_t::shape_t(std::initializer_list<std::int64_t> dims)
    : shape_t(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

shape_t::shape_t(std::span<const std::int64_t> dims) {
  if (dims.size() > max_rank)
    throw std::invalid_argument(fmt::format("shape of rank {} exceeds the maximum {}", dims.size(), max_rank));
  for (auto d : dims)
    dims_[static_cast<std::size_t>(rank_++)] = d;
}

std::int64_t shape_t::numel() const noexcept {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i)
    n *= dims_[static_cast<std::size_t>(i)];
  return n;
}

bool operator==(const shape_t& a, const shape_t& b) noexcept {
  if (a.rank_ != b.rank_)
    return false;
  for (int i = 0; i < a.rank_; ++i)
    if (a[i] != b[i])
      return false;
  return true;
}

std::string to_string(const shape_t& s) {
  return fmt::format("[{}]", fmt::join(s.begin(), s.end(), ", "));
}

tensor_handle tensor_handle::empty(shape_t shape, dtype t, troupe::device dev) {
  for (auto d : shape)
    if (d < 0)
      throw std::invalid_argument("negative dimension in shape " + to_string(shape));
  tensor_handle h;
  h.shape_ = shape;
  h.dtype_ = t;
  h.storage_ = storage_pool::for_device(dev).acquire(h.nbytes());
  if (!h.storage_)
    throw std::bad_alloc();
  return h;
}

tensor_handle tensor_handle::zeros(shape_t shape, dtype t, troupe::device dev) {
  auto h = empty(shape, t, dev);
  if (!dev.is_cpu())
    throw std::invalid_argument("tensor_handle::zeros: only CPU tensors are filled on the host");
  std::memset(h.raw(), 0, h.nbytes());
  return h;
}

tensor_handle tensor_handle::reshape(shape_t s) const {
  if (s.numel() != numel())
    throw std::invalid_argument(fmt::format("cannot reshape {} to {}", to_string(shape_), to_string(s)));
  auto h = *this;
  h.shape_ = s;
  return h;
}

tensor_handle tensor_handle::view(shape_t s, dtype t) const {
  if (static_cast<std::size_t>(s.numel()) * size_of(t) != nbytes())
    throw std::invalid_argument(fmt::format("cannot view {} bytes as {} {}", nbytes(), to_string(t), to_string(s)));
  auto h = *this;
  h.shape_ = s;
  h.dtype_ = t;
  return h;
}

tensor_handle tensor_handle::slice(std::int64_t begin, std::int64_t end) const {
  if (rank() == 0 || begin < 0 || end < begin || end > shape_[0])
    throw std::out_of_range(fmt::format("slice [{}, {}) of {}", begin, end, to_string(shape_)));
  auto h = *this;
  auto row = static_cast<std::size_t>(numel() / (shape_[0] == 0 ? 1 : shape_[0])) * size_of(dtype_);
  h.offset_ = offset_ + static_cast<std::size_t>(begin) * row;
  h.shape_[0] = end - begin;
  return h;
}

tensor_handle copy_to_host(const tensor_handle& t, const device_fence* ready) {
  if (!t.defined() || t.device().is_cpu())
    return t;
  if (ready)
    ready->wait();
  auto h = tensor_handle::empty(t.shape(), t.type());
  storage_pool::for_device(t.device()).copy_to_host(h.raw(), t.raw(), t.nbytes());
  return h;
}

} // namespace troupe
