// Checks the fused layer norm forward and backward against double-precision host loops.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/layer_norm.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

TEST_CASE_TEMPLATE("layer norm forward and backward match a double reference", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  for (int cols : {768, 100, 1500}) { // register paths (<= 1024 columns) and the shared-memory path
    int rows = 515;
    float eps = 1e-5f;
    std::size_t n = (std::size_t)rows * cols;
    auto x = rounded<T>(random_normal(n, 1, 3.0f));
    for (std::size_t i = 0; i < n; ++i)
      x[i] = round_to<T>(x[i] + 1.5f); // a mean far from zero
    auto gamma = rounded<T>(random_normal(cols, 2));
    auto beta = rounded<T>(random_normal(cols, 3));
    auto dy = rounded<T>(random_normal(n, 4));
    auto dg0 = random_normal(cols, 5), db0 = random_normal(cols, 6);
    device_buffer<T> dx_in(x), dgam(gamma), dbet(beta), y(n), ddy(dy), dx(n);
    device_buffer<float> mean(rows), rstd(rows), dg(dg0), db(db0);
    TROUPE_REQUIRE_OK(layer_norm_forward(y.get(), mean.get(), rstd.get(), dx_in.get(), dgam.get(), dbet.get(), rows,
                                         cols, eps, nullptr));
    TROUPE_REQUIRE_OK(layer_norm_backward(dx.get(), dg.get(), db.get(), ddy.get(), dx_in.get(), dgam.get(), mean.get(),
                                          rstd.get(), rows, cols, nullptr));
    std::vector<double> ry(n), rdx(n), rmean(rows), rrstd(rows), rdg(dg0.begin(), dg0.end()),
      rdb(db0.begin(), db0.end());
    for (int i = 0; i < rows; ++i) {
      const float* xr = &x[(std::size_t)i * cols];
      double mu = 0.0, var = 0.0;
      for (int c = 0; c < cols; ++c)
        mu += xr[c];
      mu /= cols;
      for (int c = 0; c < cols; ++c)
        var += (xr[c] - mu) * (xr[c] - mu);
      double rs = 1.0 / std::sqrt(var / cols + eps);
      rmean[i] = mu;
      rrstd[i] = rs;
      double a = 0.0, b = 0.0;
      for (int c = 0; c < cols; ++c) {
        double xh = (xr[c] - mu) * rs, g = dy[(std::size_t)i * cols + c];
        ry[(std::size_t)i * cols + c] = xh * gamma[c] + beta[c];
        a += g * gamma[c];
        b += g * gamma[c] * xh;
        rdg[c] += g * xh;
        rdb[c] += g;
      }
      a /= cols;
      b /= cols;
      for (int c = 0; c < cols; ++c) {
        double xh = (xr[c] - mu) * rs;
        rdx[(std::size_t)i * cols + c] = rs * (dy[(std::size_t)i * cols + c] * gamma[c] - a - xh * b);
      }
    }
    INFO("cols=" << cols);
    check_close<T>("layer_norm_forward y", y.download(), ry);
    check_close<float>("layer_norm_forward mean", mean.download(), rmean);
    check_close<float>("layer_norm_forward rstd", rrstd.empty() ? std::vector<float>{} : rstd.download(), rrstd);
    check_close<T>("layer_norm_backward dx", dx.download(), rdx);
    check_close<float>("layer_norm_backward dgamma", dg.download(), rdg);
    check_close<float>("layer_norm_backward dbeta", db.download(), rdb);
  }
}
