// Tensor handles share pooled bytes and the pool reuses blocks.
#include "runtime/tensor/tensor_handle.hpp"

#include <doctest/doctest.h>

#include "runtime/tensor/testing_fake_device.hpp"

using namespace troupe;

TEST_CASE("copying a handle shares its bytes instead of copying them") {
  auto a = tensor_handle::zeros({4, 8});
  auto b = a;
  CHECK(b.same_bytes(a));
  b.data<float>()[3] = 2.5f;
  CHECK(a.data<float>()[3] == 2.5f);
  CHECK(a.storage()->use_count() == 2);
}

TEST_CASE("a steady state of allocate and release asks the device for nothing new") {
  auto& pool = storage_pool::for_device(device::cpu());
  for (int i = 0; i < 3; ++i)
    auto warm = tensor_handle::empty({64, 130}); // warm up the size class
  auto before = pool.stats();
  for (int step = 0; step < 100; ++step) {
    auto x = tensor_handle::empty({64, 130});
    auto y = tensor_handle::empty({64, 130});
  }
  auto after = pool.stats();
  CHECK(after.fresh_allocations - before.fresh_allocations <= 1);
  CHECK(after.reuses - before.reuses >= 199);
}

TEST_CASE("size classes waste at most a quarter of a block") {
  for (std::size_t b : {1ul, 255ul, 257ul, 1000ul, 4097ul, 65537ul, 123456789ul}) {
    auto c = storage_pool::size_class(b);
    CHECK(c >= b);
    if (b > 256)
      CHECK(static_cast<double>(c) <= 1.25 * static_cast<double>(b) + 1);
  }
}

TEST_CASE("slices and reshapes are views with the right offset and shape") {
  auto a = tensor_handle::zeros({6, 4});
  for (int i = 0; i < 24; ++i)
    a.data<float>()[i] = static_cast<float>(i);
  auto s = a.slice(2, 5);
  CHECK(s.shape() == shape_t{3, 4});
  CHECK(s.data<float>()[0] == 8.0f);
  auto r = s.reshape({12});
  CHECK(r.numel() == 12);
  CHECK_THROWS_AS(a.reshape({5, 5}), std::invalid_argument);
  CHECK_THROWS_AS(a.slice(4, 7), std::out_of_range);
}

TEST_CASE("devices and dtypes round-trip through their names") {
  CHECK(parse_device("cuda:3") == device::cuda(3));
  CHECK(to_string(device::cuda(1)) == "cuda:1");
  CHECK_FALSE(parse_device("cuda:x"));
  CHECK_FALSE(parse_device("tpu"));
  CHECK(parse_dtype("bf16") == dtype::bf16);
  CHECK_FALSE(parse_dtype("f64"));
}

TEST_CASE("copy_to_host waits for the fence and copies a device tensor through its device's allocator") {
  auto& fake = testing::fake_cuda_device();
  int copies = fake.copies;
  auto dev = tensor_handle::empty({3, 5}, dtype::bf16, device::cuda(7));
  for (int i = 0; i < 15; ++i)
    dev.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(100 + i);
  testing::counting_fence fence;
  auto host = copy_to_host(dev, &fence);
  CHECK(fence.waits == 1);
  CHECK(fake.copies == copies + 1);
  CHECK(host.device() == device::cpu());
  CHECK(host.shape() == dev.shape());
  CHECK(host.type() == dtype::bf16);
  CHECK(!host.same_bytes(dev));
  for (int i = 0; i < 15; ++i)
    CHECK(host.data<std::uint16_t>()[i] == 100 + i);

  // A CPU tensor is already there: the same handle, nothing copied or awaited.
  auto cpu = tensor_handle::zeros({4});
  CHECK(copy_to_host(cpu).same_bytes(cpu));
  CHECK(copy_to_host(cpu, &fence).same_bytes(cpu));
  CHECK(fence.waits == 1);
  CHECK(fake.copies == copies + 1);
  CHECK(!copy_to_host(tensor_handle{}).defined());
}
