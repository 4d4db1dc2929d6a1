// Checks the fused causal attention forward and backward against a
// double-precision host implementation that materialises the full score matrix.
#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/test_support.hpp"

namespace {

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

struct attention_ref {
  std::vector<double> o, lse, dq, dk, dv;
};

/// Plain causal attention per (batch, head) with its textbook backward; with
/// `docs` ([batch, seq_len] document starts) query i sees keys docs[i] <= j <= i.
attention_ref reference(const attention_shape& s, const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, const std::vector<float>& dout,
                        const std::vector<int>* docs = nullptr) {
  int n = s.seq_len, d = s.head_dim;
  double scale = 1.0 / std::sqrt((double)d);
  std::size_t total = (std::size_t)s.batch * s.heads * n * d;
  attention_ref r{std::vector<double>(total), std::vector<double>((std::size_t)s.batch * s.heads * n),
                  std::vector<double>(total), std::vector<double>(total), std::vector<double>(total)};
  std::vector<double> p((std::size_t)n * n), dp((std::size_t)n * n);
  for (int bh = 0; bh < s.batch * s.heads; ++bh) {
    std::size_t base = (std::size_t)bh * n * d;
    auto at = [&](const std::vector<float>& t, int row, int c) { return (double)t[base + (std::size_t)row * d + c]; };
    auto lo = [&](int i) { return docs ? (*docs)[(std::size_t)(bh / s.heads) * n + i] : 0; };
    for (int i = 0; i < n; ++i) {
      double mx = -INFINITY;
      for (int j = lo(i); j <= i; ++j) {
        double sij = 0.0;
        for (int c = 0; c < d; ++c)
          sij += at(q, i, c) * at(k, j, c);
        p[(std::size_t)i * n + j] = sij * scale;
        mx = std::max(mx, sij * scale);
      }
      double sum = 0.0;
      for (int j = lo(i); j <= i; ++j)
        sum += std::exp(p[(std::size_t)i * n + j] - mx);
      r.lse[(std::size_t)bh * n + i] = mx + std::log(sum);
      for (int j = lo(i); j <= i; ++j)
        p[(std::size_t)i * n + j] = std::exp(p[(std::size_t)i * n + j] - mx) / sum;
      for (int c = 0; c < d; ++c) {
        double acc = 0.0;
        for (int j = lo(i); j <= i; ++j)
          acc += p[(std::size_t)i * n + j] * at(v, j, c);
        r.o[base + (std::size_t)i * d + c] = acc;
      }
    }
    for (int i = 0; i < n; ++i) {
      double delta = 0.0;
      for (int j = lo(i); j <= i; ++j) {
        double g = 0.0;
        for (int c = 0; c < d; ++c)
          g += at(dout, i, c) * at(v, j, c);
        dp[(std::size_t)i * n + j] = g;
        delta += p[(std::size_t)i * n + j] * g;
      }
      for (int j = lo(i); j <= i; ++j) {
        double pij = p[(std::size_t)i * n + j];
        double ds = pij * (dp[(std::size_t)i * n + j] - delta) * scale;
        for (int c = 0; c < d; ++c) {
          r.dq[base + (std::size_t)i * d + c] += ds * at(k, j, c);
          r.dk[base + (std::size_t)j * d + c] += ds * at(q, i, c);
          r.dv[base + (std::size_t)j * d + c] += pij * at(dout, i, c);
        }
      }
    }
  }
  return r;
}

template <typename T>
void check_shape(attention_shape s, const std::vector<int>* docs = nullptr) {
  std::size_t total = (std::size_t)s.batch * s.heads * s.seq_len * s.head_dim;
  std::size_t rows = (std::size_t)s.batch * s.heads * s.seq_len;
  auto q = rounded<T>(random_normal(total, 1));
  auto k = rounded<T>(random_normal(total, 2));
  auto v = rounded<T>(random_normal(total, 3));
  auto dout = rounded<T>(random_normal(total, 4));
  device_buffer<T> dq_in(q), dk_in(k), dv_in(v), ddout(dout), o(total), dq(total), dk(total), dv(total);
  device_buffer<float> lse(rows), workspace(attention_backward_workspace(s));
  int* ddocs = nullptr;
  if (docs) {
    REQUIRE(cudaMalloc(&ddocs, docs->size() * sizeof(int)) == cudaSuccess);
    REQUIRE(cudaMemcpy(ddocs, docs->data(), docs->size() * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
    s.doc_start = ddocs;
  }
  TROUPE_REQUIRE_OK(attention_forward(o.get(), lse.get(), dq_in.get(), dk_in.get(), dv_in.get(), s, nullptr));
  TROUPE_REQUIRE_OK(attention_backward(dq.get(), dk.get(), dv.get(), workspace.get(), ddout.get(), dq_in.get(),
                                       dk_in.get(), dv_in.get(), o.get(), lse.get(), s, nullptr));
  auto ref = reference(s, q, k, v, dout, docs);
  INFO("batch=" << s.batch << " heads=" << s.heads << " seq_len=" << s.seq_len << " head_dim=" << s.head_dim);
  check_close<T>("attention_forward o", o.download(), ref.o);
  check_close<float>("attention_forward lse", lse.download(), ref.lse, std::is_same_v<T, float> ? 1e-5 : 1e-2);
  // dq and dk are measured on dv's scale: with one token their exact value is zero.
  double grad_scale = 0.0;
  for (double x : ref.dv)
    grad_scale = std::max(grad_scale, std::abs(x));
  check_close<T>("attention_backward dq", dq.download(), ref.dq, tolerance<T>(), grad_scale);
  check_close<T>("attention_backward dk", dk.download(), ref.dk, tolerance<T>(), grad_scale);
  check_close<T>("attention_backward dv", dv.download(), ref.dv);
  if (ddocs)
    (void)cudaFree(ddocs);
}

} // namespace

TEST_CASE_TEMPLATE("causal attention forward and backward match a double reference", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  check_shape<T>({.batch = 2, .heads = 3, .seq_len = 77, .head_dim = 64}); // ragged tiles
  check_shape<T>({.batch = 1, .heads = 2, .seq_len = 128, .head_dim = 32});
  check_shape<T>({.batch = 1, .heads = 1, .seq_len = 100, .head_dim = 128});
  check_shape<T>({.batch = 1, .heads = 2, .seq_len = 200, .head_dim = 64}); // several 64-row tiles
  check_shape<T>({.batch = 1, .heads = 1, .seq_len = 1, .head_dim = 64});   // one token sees only itself
}

TEST_CASE_TEMPLATE("document-masked attention matches the masked double reference", T, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  for (auto [batch, heads, n, d] : {std::tuple{2, 2, 77, 64}, {1, 1, 130, 128}, {1, 2, 64, 32}}) {
    std::vector<int> docs((std::size_t)batch * n);
    unsigned x = 12345;
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < n;) { // documents of 1 to 40 tokens, some across tile edges
        x = x * 1103515245u + 12345u;
        int len = std::min(n - i, 1 + int(x >> 16) % 40);
        for (int j = i; j < i + len; ++j)
          docs[(std::size_t)b * n + j] = i;
        i += len;
      }
    check_shape<T>({.batch = batch, .heads = heads, .seq_len = n, .head_dim = d}, &docs);
  }
}

TEST_CASE("attention rejects a head size it has no kernel for") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  attention_shape s{.batch = 1, .heads = 1, .seq_len = 8, .head_dim = 48};
  auto st = attention_forward(static_cast<float*>(nullptr), nullptr, nullptr, nullptr, nullptr, s, nullptr);
  CHECK_FALSE(st.ok());
  CHECK(st.message().find("head_dim must be 32, 64 or 128") != std::string::npos);
}
