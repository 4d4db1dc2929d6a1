// Tensor handles share pooled bytes and the pool reuses blocks.
#include "runtime/tensor_handle.hpp"

#include <doctest/doctest.h>

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
