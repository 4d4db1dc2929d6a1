// Checks token + position embedding forward and backward against host loops.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

TEST_CASE_TEMPLATE("embedding forward gathers token plus position rows and backward scatters them", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  int batch = 3, seq = 50, vocab = 300, dim = 96, rows = batch * seq;
  auto wte = rounded<T>(random_normal((std::size_t)vocab * dim, 1));
  auto wpe = rounded<T>(random_normal((std::size_t)seq * dim, 2));
  auto dout = rounded<T>(random_normal((std::size_t)rows * dim, 3));
  std::vector<std::int32_t> ids(rows);
  for (int i = 0; i < rows; ++i)
    ids[i] = (i * 37 + i / 7) % 41; // repeats, so the backward must add
  device_buffer<T> dwte_in(wte), dwpe_in(wpe), out((std::size_t)rows * dim), g(dout);
  auto gte0 = random_normal((std::size_t)vocab * dim, 4), gpe0 = random_normal((std::size_t)seq * dim, 5);
  device_buffer<float> gte(gte0), gpe(gpe0);
  std::int32_t* dids = nullptr;
  REQUIRE(cudaMalloc(&dids, rows * sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dids, ids.data(), rows * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
  TROUPE_REQUIRE_OK(embedding_forward(out.get(), dids, dwte_in.get(), dwpe_in.get(), rows, seq, vocab, dim, nullptr));
  TROUPE_REQUIRE_OK(embedding_backward(gte.get(), gpe.get(), g.get(), dids, rows, seq, vocab, dim, nullptr));
  std::vector<double> ro((std::size_t)rows * dim), rte(gte0.begin(), gte0.end()), rpe(gpe0.begin(), gpe0.end());
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < dim; ++c) {
      std::size_t t = (std::size_t)ids[i] * dim + c, p = (std::size_t)(i % seq) * dim + c;
      ro[(std::size_t)i * dim + c] = (double)wte[t] + wpe[p];
      rte[t] += dout[(std::size_t)i * dim + c];
      rpe[p] += dout[(std::size_t)i * dim + c];
    }
  check_close<T>("embedding_forward", out.download(), ro);
  check_close<float>("embedding_backward dwte", gte.download(), rte);
  check_close<float>("embedding_backward dwpe", gpe.download(), rpe);
  (void)cudaFree(dids);
}

TEST_CASE("an out-of-range token id gives a NaN row instead of reading past the table") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  int vocab = 4, dim = 8;
  device_buffer<float> wte(random_normal(32, 1)), out(16);
  std::vector<std::int32_t> ids{1, 9};
  std::int32_t* dids = nullptr;
  REQUIRE(cudaMalloc(&dids, 2 * sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dids, ids.data(), 2 * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
  TROUPE_REQUIRE_OK(embedding_forward(out.get(), dids, wte.get(), nullptr, 2, 2, vocab, dim, nullptr));
  auto got = out.download();
  CHECK(std::isfinite(got[0]));
  CHECK(std::isnan(got[8]));
  (void)cudaFree(dids);
}
