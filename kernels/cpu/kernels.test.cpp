// Every CPU kernel against its plain reference on random inputs: relative error,
// with NaN never passing, on every SIMD target this processor supports. Shapes
// include sizes that are not multiples of 16.
#include <array>
#include <cmath>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/rms_norm.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/small_gemm.hpp"
#include "kernels/cpu/swiglu.hpp"
#include "kernels/cpu/testing_targets.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe::kernels::cpu;

namespace {

std::vector<float> randv(std::size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

/// max |a - b| / max |b|; infinite when anything is NaN.
double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double md = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double d = std::abs(double(a[i]) - b[i]);
    if (!(d == d))
      return INFINITY;
    md = std::max(md, d);
    mb = std::max(mb, std::abs(b[i]));
  }
  return md / std::max(mb, 1e-30);
}

std::vector<double> widen(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

} // namespace

TEST_CASE("the relative-error check never passes NaN") {
  CHECK(!(rel_err({NAN}, {1.0}) <= 1.0));
}

TEST_CASE("sgemm and small_gemm match the reference for every transpose and odd shapes") {
  for_each_target([&] {
    std::mt19937 rng(1);
    for (auto [m, n, k] : std::vector<std::array<int, 3>>{{7, 33, 17}, {16, 64, 32}, {5, 70, 9}, {13, 1, 40}}) {
      for (int t = 0; t < 4; ++t) {
        bool ta = t & 1, tb = t & 2;
        CAPTURE(m);
        CAPTURE(t);
        auto a = randv(std::size_t(m * k), rng), b = randv(std::size_t(k * n), rng),
             c0 = randv(std::size_t(m * n), rng);
        int lda = ta ? m : k, ldb = tb ? k : n;
        auto c = c0, r = c0;
        sgemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), n);
        sgemm_reference(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 1.0f, r.data(), n);
        CHECK(rel_err(c, widen(r)) < 1e-5);
        if (!tb) { // small_gemm needs row-major B; A is transposed through its strides
          auto s = c0;
          small_gemm(m, n, k, 0.5f, a.data(), ta ? 1 : k, ta ? m : 1, b.data(), n, s.data(), n, true);
          CHECK(rel_err(s, widen(r)) < 1e-5);
        }
      }
    }
    std::vector<float> src{1, 2, 3, 4, 5, 6}, dst(6);
    transpose(src.data(), 2, 3, 3, dst.data(), 2);
    CHECK(dst == std::vector<float>{1, 4, 2, 5, 3, 6});
    for (auto [rows, cols] : {std::pair{64L, 32L}, {48L, 16L}, {20L, 7L}}) { // 16×16 blocks and the general path
      auto big = randv(std::size_t(rows * 40), rng), out = std::vector<float>(std::size_t(cols * (rows + 3)));
      transpose(big.data(), rows, cols, 40, out.data(), rows + 3);
      bool same = true;
      for (long r = 0; r < rows; ++r)
        for (long c = 0; c < cols; ++c)
          same = same && out[std::size_t(c * (rows + 3) + r)] == big[std::size_t(r * 40 + c)];
      CHECK(same);
    }
  });
}

TEST_CASE("small_gemm's causal triangles compute the wanted entries as the full product does") {
  for_each_target([&] {
    std::mt19937 rng(14);
    for (long t : {5L, 37L, 64L}) {
      for (long w : {3L, 32L, 64L}) {
        CAPTURE(t);
        CAPTURE(w);
        // Lower-triangular A (zero above the diagonal) for the k modes.
        auto a = randv(std::size_t(t * t), rng), b = randv(std::size_t(t * w), rng),
             bt = randv(std::size_t(w * t), rng), q = randv(std::size_t(t * w), rng);
        for (long i = 0; i < t; ++i)
          for (long j = i + 1; j < t; ++j)
            a[std::size_t(i * t + j)] = 0.0f;
        std::vector<float> full(std::size_t(t * t)), tri(std::size_t(t * t), NAN);
        small_gemm(t, t, w, 0.5f, q.data(), w, 1, bt.data(), t, full.data(), t, false);
        small_gemm(t, t, w, 0.5f, q.data(), w, 1, bt.data(), t, tri.data(), t, false, triangle::columns_to_row);
        double worst = 0;
        for (long i = 0; i < t; ++i)
          for (long j = 0; j <= i; ++j)
            worst = std::max(worst, double(std::abs(full[std::size_t(i * t + j)] - tri[std::size_t(i * t + j)])));
        CHECK(worst < 1e-5);
        std::vector<float> f2(std::size_t(t * w)), t2(std::size_t(t * w));
        small_gemm(t, w, t, 1.0f, a.data(), t, 1, b.data(), w, f2.data(), w, false);
        small_gemm(t, w, t, 1.0f, a.data(), t, 1, b.data(), w, t2.data(), w, false, triangle::k_to_row);
        CHECK(rel_err(t2, widen(f2)) < 1e-5);
        small_gemm(t, w, t, 1.0f, a.data(), 1, t, b.data(), w, f2.data(), w, false); // Aᵀ: zero below the diagonal
        small_gemm(t, w, t, 1.0f, a.data(), 1, t, b.data(), w, t2.data(), w, false, triangle::k_from_row);
        CHECK(rel_err(t2, widen(f2)) < 1e-5);
      }
    }
  });
}

TEST_CASE("gelu matches its std::tanh reference over a wide range") {
  for_each_target([&] {
    std::mt19937 rng(2);
    for (long n : {37L, 1000L}) {
      auto x = randv(std::size_t(n), rng, 4.0f), dy = randv(std::size_t(n), rng);
      x[0] = 30.0f;
      x[1] = -30.0f;
      std::vector<float> y(x.size()), r(x.size()), dx(x.size()), dr(x.size());
      gelu_forward(x.data(), y.data(), n);
      gelu_forward_reference(x.data(), r.data(), n);
      CHECK(rel_err(y, widen(r)) < 1e-6);
      gelu_backward(dy.data(), x.data(), dx.data(), n);
      gelu_backward_reference(dy.data(), x.data(), dr.data(), n);
      CHECK(rel_err(dx, widen(dr)) < 3e-6);
    }
  });
}

TEST_CASE("attention forward matches the double-precision reference") {
  for_each_target([&] {
    std::mt19937 rng(3);
    for (auto s : {attention_shape{1, 5, 1, 3}, {2, 37, 3, 16}, {1, 64, 2, 32}}) {
      CAPTURE(s.seq);
      auto qkv = randv(std::size_t(s.batch * s.seq * 3 * s.heads * s.head_dim), rng);
      std::vector<float> out(std::size_t(s.batch * s.seq * s.heads * s.head_dim)), ro(out.size());
      std::vector<float> lse(std::size_t(s.batch * s.heads * s.seq)), rl(lse.size());
      // Scratch as a pool hands it out: whatever was there (NaN here), never zeros.
      std::vector<float> scratch(std::size_t(attention_forward_scratch(s)), NAN);
      attention_forward(qkv.data(), out.data(), lse.data(), scratch.data(), s);
      attention_forward_reference(qkv.data(), ro.data(), rl.data(), s);
      CHECK(rel_err(out, widen(ro)) < 1e-5);
      CHECK(rel_err(lse, widen(rl)) < 1e-5);
    }
  });
}

TEST_CASE("attention backward rebuilt from the forward's lse matches the double-precision reference") {
  for_each_target([&] {
    std::mt19937 rng(13);
    for (auto s : {attention_shape{1, 5, 1, 3}, {2, 37, 3, 16}, {1, 64, 2, 32}, {1, 128, 1, 64}}) {
      CAPTURE(s.seq);
      const long c = s.heads * s.head_dim;
      auto qkv = randv(std::size_t(s.batch * s.seq * 3 * c), rng), dout = randv(std::size_t(s.batch * s.seq * c), rng);
      std::vector<float> out(dout.size()), lse(std::size_t(s.batch * s.heads * s.seq)), dqkv(qkv.size()),
        rd(qkv.size());
      std::vector<float> fs(std::size_t(attention_forward_scratch(s)), NAN),
        bs(std::size_t(attention_backward_scratch(s)), NAN); // as a pool hands it out
      attention_forward(qkv.data(), out.data(), lse.data(), fs.data(), s);
      attention_backward(dout.data(), qkv.data(), lse.data(), dqkv.data(), bs.data(), s);
      attention_backward_reference(dout.data(), qkv.data(), rd.data(), s);
      CHECK(rel_err(dqkv, widen(rd)) < 1e-5);
    }
  });
}

TEST_CASE("layer norm forward matches a double-precision reference") {
  for_each_target([&] {
    std::mt19937 rng(4);
    const long rows = 5, cols = 45;
    auto x = randv(std::size_t(rows * cols), rng, 3.0f), g = randv(std::size_t(cols), rng),
         b = randv(std::size_t(cols), rng);
    std::vector<float> y(x.size()), mean(rows), rstd(rows);
    layer_norm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
    std::vector<double> r(x.size());
    for (long i = 0; i < rows; ++i) {
      double mu = 0, var = 0;
      for (long j = 0; j < cols; ++j)
        mu += x[std::size_t(i * cols + j)];
      mu /= cols;
      for (long j = 0; j < cols; ++j)
        var += std::pow(x[std::size_t(i * cols + j)] - mu, 2);
      double rs = 1 / std::sqrt(var / cols + 1e-5);
      for (long j = 0; j < cols; ++j)
        r[std::size_t(i * cols + j)] = (x[std::size_t(i * cols + j)] - mu) * rs * g[std::size_t(j)] + b[std::size_t(j)];
    }
    CHECK(rel_err(y, r) < 1e-5);
  });
}

TEST_CASE("cross entropy matches the reference loss and softmax-minus-onehot gradient") {
  for_each_target([&] {
    std::mt19937 rng(5);
    const long rows = 9, vocab = 37;
    auto logits = randv(std::size_t(rows * vocab), rng, 4.0f);
    std::vector<std::int32_t> t(rows);
    for (long i = 0; i < rows; ++i)
      t[std::size_t(i)] = i == 3 ? -1 : std::int32_t(rng() % vocab);
    long counted = 0;
    float loss = cross_entropy_forward(logits.data(), t.data(), rows, vocab, -1, &counted);
    double ref = cross_entropy_forward_reference(logits.data(), t.data(), rows, vocab, -1);
    CHECK(counted == rows - 1);
    CHECK(std::abs(loss - ref) < 1e-5 * ref);
    std::vector<float> d(logits.size());
    CHECK(std::abs(cross_entropy_backward(logits.data(), t.data(), d.data(), rows, vocab, -1, 2.0f) - ref) <
          1e-5 * ref);
    std::vector<double> rd(d.size(), 0.0);
    for (long i = 0; i < rows; ++i) {
      if (t[std::size_t(i)] < 0)
        continue;
      double mx = -1e30, sum = 0;
      for (long j = 0; j < vocab; ++j)
        mx = std::max(mx, double(logits[std::size_t(i * vocab + j)]));
      for (long j = 0; j < vocab; ++j)
        sum += std::exp(logits[std::size_t(i * vocab + j)] - mx);
      for (long j = 0; j < vocab; ++j)
        rd[std::size_t(i * vocab + j)] =
          2.0 / double(counted) * (std::exp(logits[std::size_t(i * vocab + j)] - mx) / sum - (j == t[std::size_t(i)]));
    }
    CHECK(rel_err(d, rd) < 1e-5);
  });
}

TEST_CASE("elementwise kernels and the optimizer updates match scalar references") {
  for_each_target([&] {
    std::mt19937 rng(6);
    const long n = 53;
    auto a = randv(n, rng), b = randv(n, rng);
    std::vector<float> out(n);
    add(a.data(), b.data(), out.data(), n);
    std::vector<double> r(n);
    for (long i = 0; i < n; ++i)
      r[std::size_t(i)] = double(a[std::size_t(i)]) + b[std::size_t(i)];
    CHECK(rel_err(out, r) < 1e-7);
    double ss = 0;
    for (float x : a)
      ss += double(x) * x;
    CHECK(std::abs(sum_squares(a.data(), n) - ss) < 1e-6 * ss);
    std::vector<float> cols(3, 0.0f);
    column_sum_add(a.data(), cols.data(), 17, 3);
    double c0 = 0;
    for (long i = 0; i < 17; ++i)
      c0 += a[std::size_t(i * 3)];
    CHECK(std::abs(cols[0] - c0) < 1e-5);
    auto p = randv(n, rng), g = randv(n, rng);
    std::vector<float> m(n, 0.1f), v(n, 0.2f);
    auto p2 = p;
    adamw_update(p2.data(), g.data(), m.data(), v.data(), n, {0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.19f, 0.0975f});
    for (long i = 0; i < n; ++i) {
      double gi = g[std::size_t(i)], mi = 0.9 * 0.1 + 0.1 * gi, vi = 0.95 * 0.2 + 0.05 * gi * gi;
      r[std::size_t(i)] =
        p[std::size_t(i)] * (1 - 0.001) - 0.01 / 0.19 * mi / (std::sqrt(vi) / std::sqrt(0.0975) + 1e-8);
    }
    CHECK(rel_err(p2, r) < 1e-6);
  });
}

TEST_CASE("bf16 products equal f32 products of bf16-rounded inputs") {
  for_each_target([&] {
    std::mt19937 rng(7);
    for (auto [m, n, k] : std::vector<std::array<int, 3>>{{7, 33, 17}, {13, 70, 301}, {6, 64, 2}, {20, 5, 513}}) {
      for (int t = 0; t < 4; ++t) {
        bool ta = t & 1, tb = t & 2;
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(t);
        auto a = randv(std::size_t(m * k), rng), b = randv(std::size_t(k * n), rng),
             c0 = randv(std::size_t(m * n), rng);
        auto ar = a, br = b;
        for (auto& x : ar)
          x = round_bf16(x);
        for (auto& x : br)
          x = round_bf16(x);
        int lda = ta ? m : k, ldb = tb ? k : n;
        for (float beta : {0.0f, 1.0f}) {
          auto c = c0, r = c0;
          sgemm_bf16(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), n);
          sgemm_reference(ta, tb, m, n, k, 0.5f, ar.data(), lda, br.data(), ldb, beta, r.data(), n);
          CHECK(rel_err(c, widen(r)) < 2e-6);
        }
      }
    }
    CHECK(round_bf16(1.0f + 1.0f / 256) == 1.0f);              // tie goes to even
    CHECK(round_bf16(1.0f + 3.0f / 256) == 1.0f + 4.0f / 256); // tie goes to even, upwards
    CHECK(round_bf16(1.0f + 1.0f / 256 + 1e-6f) == 1.0f + 2.0f / 256);
  });
}

TEST_CASE("sgemm_fused matches the reference with its bias, residual and row-sum epilogues") {
  for_each_target([&] {
    std::mt19937 rng(3);
    // Odd sizes, tails of every register tile (m mod 6, n mod 64), k over one 256 block,
    // and a transposed A of over 512 rows (copied transposed first; 608 × 32 takes the
    // register-block transpose, 600 × 30 the other).
    for (auto [m, n, k] : std::vector<std::array<int, 3>>{
           {7, 33, 17}, {13, 70, 300}, {64, 128, 512}, {5, 1, 9}, {600, 20, 30}, {608, 24, 32}}) {
      for (int t = 0; t < 4; ++t) {
        bool ta = t & 1, tb = t & 2;
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(t);
        auto a = randv(std::size_t(m * k), rng), b = randv(std::size_t(k * n), rng),
             c0 = randv(std::size_t(m * n), rng);
        auto bias = randv(std::size_t(n), rng), resid = randv(std::size_t(m * (n + 3)), rng);
        int lda = ta ? m : k, ldb = tb ? k : n;
        for (float beta : {0.0f, 1.0f}) {
          // C = 0.5·AB + beta·residual + bias into a fresh C; row sums of op(A) accumulate.
          std::vector<float> c(std::size_t(m * n), NAN), sums(std::size_t(m), 1.0f);
          gemm_epilogue e{bias.data(), resid.data(), n + 3, sums.data()};
          sgemm_fused(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, c.data(), n, e);
          std::vector<float> r(std::size_t(m * n));
          for (long i = 0; i < m; ++i)
            for (long j = 0; j < n; ++j)
              r[std::size_t(i * n + j)] = resid[std::size_t(i * (n + 3) + j)];
          sgemm_reference(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta, r.data(), n);
          std::vector<double> want(r.begin(), r.end());
          std::vector<double> want_sums(std::size_t(m), 0.0);
          for (long i = 0; i < m; ++i) {
            for (long j = 0; j < n; ++j)
              want[std::size_t(i * n + j)] += bias[std::size_t(j)];
            double s = 0;
            for (long p = 0; p < k; ++p)
              s += ta ? a[std::size_t(p * lda + i)] : a[std::size_t(i * lda + p)];
            want_sums[std::size_t(i)] = 1.0 + 0.5 * s;
          }
          CHECK(rel_err(c, want) < 1e-5);
          CHECK(rel_err(sums, want_sums) < 1e-5);
        }
        auto c = c0, r = c0; // plain accumulation onto C, no epilogue
        sgemm_fused(ta, tb, m, n, k, -1.5f, a.data(), lda, b.data(), ldb, 1.0f, c.data(), n, {});
        sgemm_reference(ta, tb, m, n, k, -1.5f, a.data(), lda, b.data(), ldb, 1.0f, r.data(), n);
        CHECK(rel_err(c, widen(r)) < 1e-5);
      }
    }
  });
}

TEST_CASE("rms norm forward and both backward halves match their double-precision references") {
  for_each_target([&] {
    std::mt19937 rng(15);
    for (long cols : {45L, 64L, 7L}) {
      CAPTURE(cols);
      const long rows = 5, n = rows * cols;
      auto x = randv(std::size_t(n), rng, 3.0f), w = randv(std::size_t(cols), rng), dy = randv(std::size_t(n), rng),
           add = randv(std::size_t(n), rng), dw0 = randv(std::size_t(cols), rng);
      std::vector<float> y(x.size()), r(x.size()), rs(rows), rr(rows), dx(x.size()), dr(x.size());
      rms_norm_forward(x.data(), w.data(), y.data(), rs.data(), rows, cols, 1e-5f);
      rms_norm_forward_reference(x.data(), w.data(), r.data(), rr.data(), rows, cols, 1e-5f);
      CHECK(rel_err(y, widen(r)) < 1e-5);
      CHECK(rel_err(rs, widen(rr)) < 1e-5);
      for (const float* a : std::array<const float*, 2>{nullptr, add.data()}) {
        rms_norm_backward_input(dy.data(), x.data(), rr.data(), w.data(), dx.data(), rows, cols, a);
        rms_norm_backward_input_reference(dy.data(), x.data(), rr.data(), w.data(), dr.data(), rows, cols, a);
        CHECK(rel_err(dx, widen(dr)) < 1e-5);
      }
      auto dw = dw0, dwr = dw0;
      rms_norm_backward_weight(dy.data(), x.data(), rr.data(), dw.data(), rows, cols);
      rms_norm_backward_weight_reference(dy.data(), x.data(), rr.data(), dwr.data(), rows, cols);
      CHECK(rel_err(dw, widen(dwr)) < 1e-5);
    }
  });
}

TEST_CASE("swiglu forward and backward match their std::exp references, far into both tails") {
  for_each_target([&] {
    std::mt19937 rng(16);
    for (long hidden : {37L, 64L}) {
      CAPTURE(hidden);
      const long rows = 3;
      auto gu = randv(std::size_t(rows * 2 * hidden), rng, 4.0f), dy = randv(std::size_t(rows * hidden), rng);
      gu[0] = 100.0f, gu[1] = -100.0f, gu[2] = NAN;
      std::vector<float> y(dy.size()), r(dy.size()), dg(gu.size()), dgr(gu.size());
      swiglu_forward(gu.data(), y.data(), rows, hidden);
      swiglu_forward_reference(gu.data(), r.data(), rows, hidden);
      CHECK(std::isnan(y[2]));
      swiglu_backward(dy.data(), gu.data(), dg.data(), rows, hidden);
      swiglu_backward_reference(dy.data(), gu.data(), dgr.data(), rows, hidden);
      CHECK(std::isnan(dg[2]));
      CHECK(std::isnan(dg[std::size_t(2 + hidden)]));
      y[2] = r[2] = dg[2] = dgr[2] = dg[std::size_t(2 + hidden)] = dgr[std::size_t(2 + hidden)] =
        0; // the rest must match
      CHECK(rel_err(y, widen(r)) < 1e-5);
      CHECK(rel_err(dg, widen(dgr)) < 1e-5);
    }
  });
}

TEST_CASE("rope turns each head's halves as its reference does, and the inverse turns them back") {
  for_each_target([&] {
    std::mt19937 rng(17);
    for (long hd : {8L, 34L, 64L}) {
      CAPTURE(hd);
      const long rows = 6, heads = 3, ld = heads * hd + 5, positions = 40;
      std::vector<std::int32_t> pos{0, 1, 7, 39, 2, 0};
      std::vector<float> cos(std::size_t(positions * hd / 2)), sin(cos.size());
      rope_table(10000.0, hd, positions, cos.data(), sin.data());
      auto x = randv(std::size_t(rows * ld), rng), r = x;
      auto y = x;
      rope_rotate(y.data(), rows, ld, heads, hd, pos.data(), cos.data(), sin.data(), false);
      rope_rotate_reference(r.data(), rows, ld, heads, hd, pos.data(), 10000.0, false);
      CHECK(rel_err(y, widen(r)) < 1e-5);
      CHECK(y[std::size_t(ld - 1)] == x[std::size_t(ld - 1)]); // past the heads: untouched
      CHECK(y[1] == x[1]);                                     // position 0: no turn
      CHECK(y[std::size_t(ld + 1)] != x[std::size_t(ld + 1)]);
      rope_rotate(y.data(), rows, ld, heads, hd, pos.data(), cos.data(), sin.data(), true);
      CHECK(rel_err(y, widen(x)) < 1e-5);
    }
  });
}

TEST_CASE("a NaN input gives NaN out of gelu, softmax and cross entropy on every target") {
  for_each_target([&] {
    std::vector<float> x(37, 0.5f), y(37), dx(37);
    x[20] = NAN;
    gelu_forward(x.data(), y.data(), 37);
    CHECK(std::isnan(y[20]));
    CHECK(!std::isnan(y[19]));
    gelu_backward(x.data(), x.data(), dx.data(), 37);
    CHECK(std::isnan(dx[20]));
    std::vector<std::int32_t> t{3};
    std::vector<float> d(37);
    CHECK(std::isnan(cross_entropy_backward(x.data(), t.data(), d.data(), 1, 37, -1, 1.0f)));
    CHECK(std::isnan(d[0]));
    attention_shape s{1, 20, 1, 4};
    auto qkv = std::vector<float>(std::size_t(s.seq * 3 * s.head_dim), 0.1f);
    qkv[std::size_t(5 * 3 * s.head_dim + 4)] = NAN; // a key of token 5: every later query sees it
    std::vector<float> out(std::size_t(s.seq * s.head_dim)), lse(std::size_t(s.seq)),
      scratch(std::size_t(attention_forward_scratch(s)));
    attention_forward(qkv.data(), out.data(), lse.data(), scratch.data(), s);
    CHECK(std::isnan(out[std::size_t(19 * s.head_dim)]));
    CHECK(!std::isnan(out[0]));
  });
}

TEST_CASE("a kernel target is chosen at run time and can be capped by name") {
  const auto all = supported_kernel_targets();
  REQUIRE(!all.empty());
  CHECK(all.back() == "baseline"); // the portable code is always there, last
  CHECK(kernel_target() == all.front());
  auto err = set_kernel_target("avx1024");
  REQUIRE(err);
  CHECK(troupe::error_message(err).find("valid: " + all.front()) != std::string::npos);
  CHECK(kernel_target() == all.front()); // a bad name changes nothing
  REQUIRE(!set_kernel_target(all.back()));
  CHECK(kernel_target() == "baseline");
  REQUIRE(!set_kernel_target("best"));
  CHECK(kernel_target() == all.front());
}
