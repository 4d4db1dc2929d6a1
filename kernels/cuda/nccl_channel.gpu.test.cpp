// Checks the NCCL wrapper on one GPU: a single-rank communicator's all-reduce and
// a send/receive to itself move the bytes exactly; bad arguments come back as errors.
#include <cstring>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/allocator.hpp"
#include "kernels/cuda/nccl_channel.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe;
using namespace troupe::gpu;

namespace {
std::vector<float> download(const tensor_handle& t) {
  std::vector<float> v(std::size_t(t.numel()));
  REQUIRE(cudaMemcpy(v.data(), t.raw(), t.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}
tensor_handle upload(const std::vector<float>& v) {
  auto t = tensor_handle::empty({std::int64_t(v.size())}, dtype::f32, device::cuda(0));
  REQUIRE(cudaMemcpy(t.raw(), v.data(), t.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  return t;
}
} // namespace

TEST_CASE("a one-rank NCCL communicator all-reduces and sends to itself without changing a bit") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  if (!nccl_available()) {
    nccl_id id;
    auto st = nccl_make_id(id);
    CHECK(!st.ok());
    CHECK(st.message().find("NCCL is not available") != std::string::npos);
    MESSAGE("libnccl not found: NCCL check skipped (" << st.message() << ")");
    return;
  }
  int version = 0;
  TROUPE_REQUIRE_OK(nccl_version(version));
  MESSAGE("NCCL version " << version);
  TROUPE_REQUIRE_OK(register_cuda_allocator());
  nccl_id id;
  TROUPE_REQUIRE_OK(nccl_make_id(id));
  nccl_communicator comm;
  TROUPE_REQUIRE_OK(comm.init(id, 1, 0, 0));
  CHECK(comm.ready());
  CHECK(comm.size() == 1);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);

  auto values = testing::random_normal(100003, 7);
  auto t = upload(values);
  TROUPE_REQUIRE_OK(comm.all_reduce(t, nccl_reduce::sum, s));
  TROUPE_REQUIRE_OK(comm.all_reduce(t, nccl_reduce::avg, s));
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  auto back = download(t);
  CHECK(std::memcmp(back.data(), values.data(), values.size() * sizeof(float)) == 0);

  auto dst = tensor_handle::empty({std::int64_t(values.size())}, dtype::f32, device::cuda(0));
  REQUIRE(cudaMemset(dst.raw(), 0xff, dst.nbytes()) == cudaSuccess); // NaN poison
  TROUPE_REQUIRE_OK(comm.send_recv(t.raw(), values.size(), 0, dst.raw(), values.size(), 0, dtype::f32, s));
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  auto got = download(dst);
  CHECK(std::memcmp(got.data(), values.data(), values.size() * sizeof(float)) == 0);
  TROUPE_REQUIRE_OK(comm.check_async());

  // Errors are values that name the call.
  nccl_communicator bad;
  auto st = bad.init(id, 1, 3, 0);
  CHECK(!st.ok());
  CHECK(st.message().find("nccl_communicator::init") != std::string::npos);
  tensor_handle host = tensor_handle::empty({4});
  st = comm.send(host, 0, s);
  CHECK(!st.ok());
  CHECK(st.message().find("CUDA device") != std::string::npos);
  cudaStreamDestroy(s);
}
