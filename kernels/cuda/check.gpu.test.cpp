// Tests for the GPU error values, the device probe and the pooled CUDA allocator.
#include <algorithm>
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/test_support.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace {

using namespace troupe;

gpu::status copy_to_nowhere() {
  int x = 0;
  // A host-to-device copy into a null pointer fails with or without a GPU.
  TROUPE_CUDA_CHECK(cudaMemcpy(nullptr, &x, sizeof x, cudaMemcpyHostToDevice));
  return {};
}

gpu::status propagate() {
  TROUPE_GPU_TRY(copy_to_nowhere());
  return gpu::status::failure("not reached");
}

} // namespace

TEST_CASE("a failing CUDA call returns an error naming its file, line and call") {
  auto st = propagate();
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("check.gpu.test.cpp:") != std::string::npos);
  CHECK(st.message().find("cudaMemcpy") != std::string::npos);
  CHECK(st.message().find("not reached") == std::string::npos);
}

TEST_CASE("cuBLAS and NCCL errors are named in the message") {
  auto b = gpu::cublas_failure(CUBLAS_STATUS_INVALID_VALUE, "cublasGemmEx(...)", "x.cpp", 7);
  CHECK(b.message().find("x.cpp:7: cublasGemmEx(...): CUBLAS_STATUS_INVALID_VALUE") == 0);
#ifdef TROUPE_HAVE_NCCL_HEADER
  auto n = gpu::nccl_failure(ncclRemoteError, "ncclSend(...)", "y.cpp", 9);
  CHECK(n.message().find("y.cpp:9: ncclSend(...): ncclRemoteError") == 0);
#endif
  CHECK(gpu::status{}.ok());
  CHECK_FALSE(gpu::status::failure("").ok());
}

TEST_CASE("the device probe answers without crashing, with or without a GPU") {
  bool a = gpu::cuda_available();
  CHECK(a == gpu::cuda_available()); // stable, and no sticky error left behind
  MESSAGE("cuda_available() = " << a);
}

TEST_CASE("CUDA tensor handles come from the pooled cudaMalloc allocator and are reused") {
  if (!gpu::cuda_available()) {
    CHECK_FALSE(gpu::register_cuda_allocator().ok());
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  TROUPE_REQUIRE_OK(gpu::register_cuda_allocator());
  TROUPE_REQUIRE_OK(gpu::register_cuda_allocator()); // idempotent
  auto& pool = storage_pool::for_device(device::cuda(0));
  auto before = pool.stats();
  std::vector<float> host(1000);
  for (std::size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<float>(i) * 0.5f;
  {
    auto t = tensor_handle::empty({10, 100}, dtype::f32, device::cuda(0));
    CHECK(t.device() == device::cuda(0));
    cudaPointerAttributes attr{};
    REQUIRE(cudaPointerGetAttributes(&attr, t.raw()) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeDevice); // plain device memory, not managed
    REQUIRE(cudaMemcpy(t.raw(), host.data(), t.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
    std::vector<float> back(1000);
    REQUIRE(cudaMemcpy(back.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(back == host);
    auto h = copy_to_host(t.slice(2, 10)); // through the allocator's copy hook
    CHECK(h.device() == device::cpu());
    CHECK(h.shape() == shape_t{8, 100});
    CHECK(std::equal(h.data<float>(), h.data<float>() + 800, host.begin() + 200));
  }
  auto mid = pool.stats();
  CHECK(mid.fresh_allocations == before.fresh_allocations + 1);
  { auto again = tensor_handle::empty({1000}, dtype::f32, device::cuda(0)); }
  auto after = pool.stats();
  CHECK(after.fresh_allocations == mid.fresh_allocations);
  CHECK(after.reuses == mid.reuses + 1);
  CHECK(after.bytes_live == before.bytes_live);
  pool.trim();
  CHECK(pool.stats().bytes_reserved == 0);
}
