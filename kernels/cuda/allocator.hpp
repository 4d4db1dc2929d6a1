// Device memory for tensor handles on `cuda:N`: plain cudaMalloc/cudaFree under
// the runtime's storage pools (never managed memory).
#pragma once

#include <cstddef>

#include "kernels/cuda/check.hpp"
#include "runtime/tensor/storage_pool.hpp"

namespace troupe::gpu {

/// Raw device memory on one CUDA device; the storage pool calls it only on a miss.
class cuda_allocator final : public device_allocator {
public:
  /// Allocates on the calling thread's current device (cudaSetDevice).
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p, std::size_t bytes) noexcept override;
  /// cudaMemcpy to the host (it does not wait for non-blocking streams: wait
  /// for the writer's fence first); throws std::runtime_error on an error.
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
};

/// Registers the CUDA allocator with the storage pools so that
/// `tensor_handle::empty(shape, dtype, device::cuda(i))` gives device memory.
/// Fails (and registers nothing) when no GPU is present. Safe to call twice.
status register_cuda_allocator();

} // namespace troupe::gpu
