// The CUDA device allocator behind the storage pools.
#include "kernels/cuda/allocator.hpp"

#include <stdexcept>

namespace troupe::gpu {

void* cuda_allocator::allocate(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError(); // out of memory is reported as nullptr, as the pool expects
    return nullptr;
  }
  return p;
}

void cuda_allocator::deallocate(void* p, std::size_t) noexcept {
  (void)cudaFree(p);
}

void cuda_allocator::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (auto e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess)
    throw std::runtime_error(cuda_failure(e, "cudaMemcpy", __FILE__, __LINE__).message());
}

status register_cuda_allocator() {
  if (!cuda_available())
    return status::failure("register_cuda_allocator: no CUDA device is available");
  static cuda_allocator alloc; // lives as long as the process: pools keep a reference
  storage_pool::register_allocator(device::kind_t::cuda, alloc);
  return {};
}

} // namespace troupe::gpu
