// Checks the fused softmax + cross-entropy loss and gradient against a double reference.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

TEST_CASE_TEMPLATE("cross-entropy loss is the mean over counted tokens and its gradient matches", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  for (int vocab : {50257, 50304, 256}) { // odd rows take the scalar path, the others 16-byte accesses
    int rows = 37, ignore = -100;
    float scale = 0.5f;
    auto logits = rounded<T>(random_normal((std::size_t)rows * vocab, 1, 3.0f));
    std::vector<std::int32_t> targets(rows);
    for (int i = 0; i < rows; ++i)
      targets[i] = i % 5 == 3 ? ignore : (i * 7919) % vocab;
    device_buffer<T> dl(logits), grad(logits.size());
    device_buffer<float> loss(1), row_loss(rows);
    std::int32_t* count = nullptr;
    std::int32_t* dt = nullptr;
    REQUIRE(cudaMalloc(&count, sizeof(std::int32_t)) == cudaSuccess);
    REQUIRE(cudaMalloc(&dt, rows * sizeof(std::int32_t)) == cudaSuccess);
    REQUIRE(cudaMemcpy(dt, targets.data(), rows * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
    cross_entropy_out out{loss.get(), row_loss.get(), count};
    TROUPE_REQUIRE_OK(
      cross_entropy_forward_backward(out, grad.get(), dl.get(), dt, rows, vocab, ignore, scale, nullptr));
    std::vector<double> rrow(rows), rgrad(logits.size());
    int counted = 0;
    for (int t : targets)
      counted += t != ignore;
    double total = 0.0;
    for (int i = 0; i < rows; ++i) {
      const float* x = &logits[(std::size_t)i * vocab];
      double mx = -INFINITY, sum = 0.0;
      for (int j = 0; j < vocab; ++j)
        mx = std::max(mx, (double)x[j]);
      for (int j = 0; j < vocab; ++j)
        sum += std::exp(x[j] - mx);
      double lse = mx + std::log(sum);
      if (targets[i] == ignore)
        continue;
      rrow[i] = lse - x[targets[i]];
      total += rrow[i];
      for (int j = 0; j < vocab; ++j)
        rgrad[(std::size_t)i * vocab + j] = scale / counted * (std::exp(x[j] - lse) - (j == targets[i] ? 1.0 : 0.0));
    }
    std::int32_t got_count = -1;
    auto got_loss = loss.download();
    REQUIRE(cudaMemcpy(&got_count, count, sizeof got_count, cudaMemcpyDeviceToHost) == cudaSuccess);
    INFO("vocab=" << vocab);
    CHECK(got_count == counted);
    check_close<float>("cross_entropy loss", got_loss, {total / counted}, std::is_same_v<T, float> ? 1e-5 : 1e-2);
    check_close<float>("cross_entropy row_loss", row_loss.download(), rrow, std::is_same_v<T, float> ? 1e-5 : 1e-2);
    check_close<T>("cross_entropy dlogits", grad.download(), rgrad);

    // In place: the gradient overwrites the logits and the loss is unchanged.
    TROUPE_REQUIRE_OK(cross_entropy_forward_backward(out, dl.get(), dl.get(), dt, rows, vocab, ignore, scale, nullptr));
    check_close<T>("cross_entropy dlogits in place", dl.download(), rgrad);
    check_close<float>("cross_entropy loss in place", loss.download(), {total / counted},
                       std::is_same_v<T, float> ? 1e-5 : 1e-2);
    (void)cudaFree(count);
    (void)cudaFree(dt);
  }
}

TEST_CASE("cross-entropy over only ignored tokens gives zero loss and zero gradient, not NaN") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  int rows = 4, vocab = 10;
  device_buffer<float> logits(random_normal(40, 9)), grad(40), loss(1), row_loss(rows);
  std::vector<std::int32_t> targets(rows, -1);
  std::int32_t *count = nullptr, *dt = nullptr;
  REQUIRE(cudaMalloc(&count, sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dt, rows * sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dt, targets.data(), rows * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
  TROUPE_REQUIRE_OK(cross_entropy_forward_backward({loss.get(), row_loss.get(), count}, grad.get(), logits.get(), dt,
                                                   rows, vocab, -1, 1.0f, nullptr));
  CHECK(loss.download() == std::vector<float>{0.0f});
  CHECK(grad.download() == std::vector<float>(40, 0.0f));
  (void)cudaFree(count);
  (void)cudaFree(dt);
}

TEST_CASE("rows whose first chunks are all -inf (a padded or masked vocabulary) give the finite loss") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  int rows = 3, vocab = 8192; // every thread's first chunk lies inside the -inf prefix
  auto logits = random_normal((std::size_t)rows * vocab, 21, 2.0f);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < vocab - 64; ++j)
      logits[(std::size_t)i * vocab + j] = -INFINITY;
  std::vector<std::int32_t> targets{vocab - 1, vocab - 10, vocab - 64};
  device_buffer<float> dl(logits), grad(logits.size()), loss(1), row_loss(rows);
  std::int32_t *count = nullptr, *dt = nullptr;
  REQUIRE(cudaMalloc(&count, sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMalloc(&dt, rows * sizeof(std::int32_t)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dt, targets.data(), rows * sizeof(std::int32_t), cudaMemcpyHostToDevice) == cudaSuccess);
  TROUPE_REQUIRE_OK(cross_entropy_forward_backward({loss.get(), row_loss.get(), count}, grad.get(), dl.get(), dt, rows,
                                                   vocab, -100, 1.0f, nullptr));
  double total = 0;
  for (int i = 0; i < rows; ++i) {
    const float* x = &logits[(std::size_t)i * vocab];
    double mx = -INFINITY, sum = 0;
    for (int j = vocab - 64; j < vocab; ++j)
      mx = std::max(mx, (double)x[j]);
    for (int j = vocab - 64; j < vocab; ++j)
      sum += std::exp(x[j] - mx);
    total += mx + std::log(sum) - x[targets[i]];
  }
  check_close<float>("cross_entropy loss with -inf prefix", loss.download(), {total / rows}, 1e-5);
  for (float g : grad.download())
    REQUIRE(std::isfinite(g));
  (void)cudaFree(count);
  (void)cudaFree(dt);
}
