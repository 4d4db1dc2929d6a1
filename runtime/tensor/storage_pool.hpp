// Pooled, reference-counted storage blocks: tensors share them and the pool
// reuses them, because fresh memory here is slow (0.4 GB/s first touch).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/tensor/device.hpp"

namespace troupe {

class storage_pool;

/// One block of device memory owned by a pool and shared by tensor handles.
class storage {
public:
  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }
  troupe::device device() const noexcept;
  long use_count() const noexcept { return refs_.load(std::memory_order_relaxed); }

private:
  friend class storage_pool;
  friend class storage_ref;
  storage(storage_pool* pool, void* data, std::size_t bytes) noexcept : pool_(pool), data_(data), bytes_(bytes) {}
  storage_pool* pool_;
  void* data_;
  std::size_t bytes_;
  std::atomic<long> refs_{0};
};

/// Intrusive shared pointer to a storage block; the last one returns it to its pool.
class storage_ref {
public:
  storage_ref() noexcept = default;
  explicit storage_ref(storage* s) noexcept : s_(s) { retain(); }
  storage_ref(const storage_ref& o) noexcept : s_(o.s_) { retain(); }
  storage_ref(storage_ref&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  storage_ref& operator=(storage_ref o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~storage_ref() { release(); }

  storage* get() const noexcept { return s_; }
  storage* operator->() const noexcept { return s_; }
  explicit operator bool() const noexcept { return s_ != nullptr; }
  friend bool operator==(const storage_ref& a, const storage_ref& b) noexcept { return a.s_ == b.s_; }

private:
  void retain() noexcept {
    if (s_)
      s_->refs_.fetch_add(1, std::memory_order_relaxed);
  }
  void release() noexcept;
  storage* s_ = nullptr;
};

/// Raw memory for one device kind; the pool calls it only on a miss.
class device_allocator {
public:
  virtual ~device_allocator() = default;
  /// Returns `bytes` of device memory, or nullptr when the device is out of memory.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p, std::size_t bytes) noexcept = 0;
  /// Copies `bytes` of this device's memory at `src` to host memory at `dst` and
  /// returns when they are there. Work that writes `src` must be finished first
  /// (wait for its device_fence). Throws std::runtime_error on a device error.
  /// The default is a plain memcpy, for memory the host can read.
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes);
};

/// Counters that show whether a steady state reuses memory.
struct pool_stats {
  std::uint64_t fresh_allocations = 0; ///< misses that asked the device for memory
  std::uint64_t reuses = 0;            ///< requests served from a free list
  std::size_t bytes_reserved = 0;      ///< bytes held from the device, live or free
  std::size_t bytes_live = 0;          ///< bytes currently handed out
};

/// A per-device pool of storage blocks rounded to size classes (at most 25% waste).
class storage_pool {
public:
  storage_pool(troupe::device dev, device_allocator& alloc) : device_(dev), alloc_(alloc) {}
  storage_pool(const storage_pool&) = delete;
  storage_pool& operator=(const storage_pool&) = delete;
  ~storage_pool();

  /// A block of at least `bytes`; an empty ref when the device is out of memory.
  storage_ref acquire(std::size_t bytes);

  /// Returns every free block to the device.
  void trim();

  pool_stats stats() const;
  troupe::device device() const noexcept { return device_; }
  /// Copies `bytes` of this pool's device memory to the host (device_allocator::copy_to_host).
  void copy_to_host(void* dst, const void* src, std::size_t bytes) { alloc_.copy_to_host(dst, src, bytes); }

  /// The pool for `dev`, created on first use; the CPU pool always exists.
  /// Throws std::invalid_argument for a device with no registered allocator.
  static storage_pool& for_device(troupe::device dev);

  /// Registers the allocator for a device kind (the CUDA kernels do this for `cuda`).
  static void register_allocator(device::kind_t kind, device_allocator& alloc);

  /// The size class `bytes` rounds up to.
  static std::size_t size_class(std::size_t bytes) noexcept;

private:
  friend class storage_ref;
  void give_back(storage* s) noexcept;

  troupe::device device_;
  device_allocator& alloc_;
  mutable std::mutex mtx_;
  std::unordered_map<std::size_t, std::vector<storage*>> free_;
  std::vector<storage*> all_;
  pool_stats stats_;
};

inline void storage_ref::release() noexcept {
  if (s_ && s_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1)
    s_->pool_->give_back(s_);
  s_ = nullptr;
}

} // namespace troupe
