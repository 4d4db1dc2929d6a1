// The tensor handle: shape, dtype, device and a view into pooled storage.
// Messages inside one process carry handles, never copies of the bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include "runtime/tensor/device.hpp"
#include "runtime/tensor/device_fence.hpp"
#include "runtime/tensor/dtype.hpp"
#include "runtime/tensor/storage_pool.hpp"

namespace troupe {

/// A tensor's dimensions: up to `max_rank` sizes, stored inline (no allocation).
class shape_t {
public:
  static constexpr int max_rank = 6;
  shape_t() = default;
  shape_t(std::initializer_list<std::int64_t> dims);
  /// Throws std::invalid_argument past `max_rank` dimensions.
  explicit shape_t(std::span<const std::int64_t> dims);
  int rank() const noexcept { return rank_; }
  std::int64_t operator[](int i) const noexcept { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t& operator[](int i) noexcept { return dims_[static_cast<std::size_t>(i)]; }
  std::int64_t numel() const noexcept;
  const std::int64_t* begin() const noexcept { return dims_.data(); }
  const std::int64_t* end() const noexcept { return dims_.data() + rank_; }
  friend bool operator==(const shape_t& a, const shape_t& b) noexcept;

private:
  std::array<std::int64_t, max_rank> dims_{};
  int rank_ = 0;
};

/// `[2, 64, 128]`.
std::string to_string(const shape_t& s);

/// A dense, row-major tensor: a typed view into a shared storage block.
/// Copying a handle shares the bytes; `empty()` handles own nothing.
class tensor_handle {
public:
  tensor_handle() = default;

  /// Allocates from the pool of `dev`. Contents are uninitialised.
  /// Throws std::bad_alloc when the device is out of memory.
  static tensor_handle empty(shape_t shape, dtype t = dtype::f32, device dev = device::cpu());
  /// Allocates and fills with zeros.
  static tensor_handle zeros(shape_t shape, dtype t = dtype::f32, device dev = device::cpu());

  const shape_t& shape() const noexcept { return shape_; }
  std::int64_t dim(int i) const noexcept { return shape_[i]; }
  int rank() const noexcept { return shape_.rank(); }
  dtype type() const noexcept { return dtype_; }
  troupe::device device() const noexcept { return storage_ ? storage_->device() : troupe::device::cpu(); }
  std::size_t offset() const noexcept { return offset_; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  std::size_t nbytes() const noexcept { return static_cast<std::size_t>(numel()) * size_of(dtype_); }
  bool defined() const noexcept { return static_cast<bool>(storage_); }
  const storage_ref& storage() const noexcept { return storage_; }

  /// Raw pointer to the first element (device memory for CUDA tensors).
  void* raw() const noexcept { return static_cast<std::byte*>(storage_->data()) + offset_; }
  template <class T>
  T* data() const noexcept {
    return static_cast<T*>(raw());
  }

  /// The same bytes with another shape of equal element count.
  tensor_handle reshape(shape_t s) const;
  /// The same bytes read as `t` with shape `s` (same byte count), e.g. a
  /// received byte buffer seen as the f32 activation it carries.
  tensor_handle view(shape_t s, dtype t) const;
  /// Rows [begin, end) along the first dimension, sharing the storage.
  tensor_handle slice(std::int64_t begin, std::int64_t end) const;

  /// True when both handles view the same bytes.
  bool same_bytes(const tensor_handle& o) const noexcept { return storage_ == o.storage_ && offset_ == o.offset_; }

private:
  storage_ref storage_;
  shape_t shape_;
  std::size_t offset_ = 0;
  dtype dtype_ = dtype::f32;
};

/// A CPU tensor with the contents of `t`: `t` itself when it is on the CPU (or
/// undefined), else a fresh host copy made once `ready` (when given) is passed.
/// Throws std::runtime_error when the device reports an error.
tensor_handle copy_to_host(const tensor_handle& t, const device_fence* ready = nullptr);

} // namespace troupe
