// Checks the cuBLAS products and the bias kernels against double-precision host loops.
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/bias.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/test_support.hpp"

namespace {

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

/// C = alpha op(A) op(B) + beta C0 in double, row-major as in gemm_shape.
std::vector<double> reference(const gemm_shape& s, const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<float>& c0) {
  std::vector<double> c(static_cast<std::size_t>(s.m) * s.n);
  for (int i = 0; i < s.m; ++i)
    for (int j = 0; j < s.n; ++j) {
      double acc = 0.0;
      for (int p = 0; p < s.k; ++p) {
        double av = s.trans_a ? a[(std::size_t)p * s.m + i] : a[(std::size_t)i * s.k + p];
        double bv = s.trans_b ? b[(std::size_t)j * s.k + p] : b[(std::size_t)p * s.n + j];
        acc += av * bv;
      }
      c[(std::size_t)i * s.n + j] = s.alpha * acc + s.beta * c0[(std::size_t)i * s.n + j];
    }
  return c;
}

/// Runs one product with inputs In and output Out for every transpose combination.
template <typename In, typename Out>
void check_all_transposes(const char* what) {
  blas_handle h;
  TROUPE_REQUIRE_OK(h.init());
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      gemm_shape s{.m = 67,
                   .n = 45,
                   .k = 130,
                   .trans_a = ta == 1,
                   .trans_b = tb == 1,
                   .alpha = 0.75f,
                   .beta = tb == 1 ? 0.5f : 0.0f};
      auto a = rounded<In>(random_normal((std::size_t)s.m * s.k, 1 + ta * 2 + tb));
      auto b = rounded<In>(random_normal((std::size_t)s.k * s.n, 11 + ta * 2 + tb));
      auto c0 = rounded<Out>(random_normal((std::size_t)s.m * s.n, 21));
      device_buffer<In> da(a), db(b);
      device_buffer<Out> dc(c0.size());
      if (s.beta != 0.0f)
        dc.upload(c0);
      TROUPE_REQUIRE_OK(gemm(h.get(), nullptr, s, da.get(), db.get(), dc.get()));
      INFO("trans_a=" << ta << " trans_b=" << tb);
      check_close<Out>(what, dc.download(), reference(s, a, b, c0));
    }
}

} // namespace

TEST_CASE("bf16 GEMM with f32 accumulation matches a double reference for every transpose") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  check_all_transposes<bf16, bf16>("gemm bf16->bf16");
  check_all_transposes<bf16, float>("gemm bf16->f32");
}

TEST_CASE("f32 GEMM matches a double reference to 1e-5 for every transpose") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  check_all_transposes<float, float>("gemm f32");
}

TEST_CASE("strided batched bf16 GEMM matches a double reference per batch") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  blas_handle h;
  TROUPE_REQUIRE_OK(h.init());
  gemm_shape s{.m = 33, .n = 40, .k = 64, .trans_a = false, .trans_b = true};
  int batch = 3;
  std::size_t sa = (std::size_t)s.m * s.k, sb = (std::size_t)s.n * s.k, sc = (std::size_t)s.m * s.n;
  auto a = rounded<bf16>(random_normal(sa * batch, 5));
  auto b = rounded<bf16>(random_normal(sb * batch, 6));
  device_buffer<bf16> da(a), db(b), dc(sc * batch);
  TROUPE_REQUIRE_OK(gemm_strided_batched(h.get(), nullptr, s, batch, da.get(), (long long)sa, db.get(), (long long)sb,
                                         dc.get(), (long long)sc));
  auto got = dc.download();
  for (int i = 0; i < batch; ++i) {
    std::vector<float> ai(a.begin() + i * sa, a.begin() + (i + 1) * sa),
      bi(b.begin() + i * sb, b.begin() + (i + 1) * sb);
    std::vector<float> gi(got.begin() + i * sc, got.begin() + (i + 1) * sc);
    check_close<bf16>("gemm strided batched", gi, reference(s, ai, bi, std::vector<float>(sc)));
  }
}

TEST_CASE("a GEMM with a negative size fails with a message instead of launching") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  blas_handle h;
  TROUPE_REQUIRE_OK(h.init());
  gemm_shape s{.m = -1, .n = 4, .k = 4};
  auto st = gemm(h.get(), nullptr, s, static_cast<const float*>(nullptr), nullptr, static_cast<float*>(nullptr));
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("negative size") != std::string::npos);
}

TEST_CASE_TEMPLATE("bias add and bias gradient match host sums", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  int m = 300, n = 70;
  auto y = rounded<T>(random_normal((std::size_t)m * n, 31));
  auto b = rounded<T>(random_normal(n, 32));
  auto db0 = random_normal(n, 33);
  device_buffer<T> dy(y), dbias(b);
  TROUPE_REQUIRE_OK(bias_add(dy.get(), dbias.get(), m, n, nullptr));
  std::vector<double> ref_y(y.size());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      ref_y[(std::size_t)i * n + j] = (double)y[(std::size_t)i * n + j] + b[j];
  check_close<T>("bias_add", dy.download(), ref_y);

  device_buffer<T> g(y);
  device_buffer<float> dbg(db0);
  TROUPE_REQUIRE_OK(bias_grad(dbg.get(), g.get(), m, n, nullptr));
  std::vector<double> ref_db(n);
  for (int j = 0; j < n; ++j) {
    ref_db[j] = db0[j];
    for (int i = 0; i < m; ++i)
      ref_db[j] += y[(std::size_t)i * n + j];
  }
  check_close<float>("bias_grad (accumulated)", dbg.download(), ref_db);
}
