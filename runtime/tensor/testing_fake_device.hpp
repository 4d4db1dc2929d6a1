// Test helpers: host memory posing as a CUDA device, and a fence that counts
// its waits, so the paths that move device tensors run without a GPU.
#pragma once

#include <cstdlib>
#include <cstring>

#include "runtime/tensor/device_fence.hpp"
#include "runtime/tensor/storage_pool.hpp"

namespace troupe::testing {

/// Host memory behind `cuda:N` tensors, counting the copies to the host.
struct fake_device_allocator final : device_allocator {
  int copies = 0;
  void* allocate(std::size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    ++copies;
    std::memcpy(dst, src, bytes);
  }
};

/// Registers a fake_device_allocator for `cuda` in this process (pools keep it
/// for the life of the process) and returns it.
inline fake_device_allocator& fake_cuda_device() {
  static fake_device_allocator fake;
  storage_pool::register_allocator(device::kind_t::cuda, fake);
  return fake;
}

/// A fence whose work is always done; counts how often it was waited for.
struct counting_fence final : device_fence {
  mutable int waits = 0;
  void wait() const override { ++waits; }
};

} // namespace troupe::testing
