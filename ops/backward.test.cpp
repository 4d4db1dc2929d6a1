// Every op's backward against central finite differences of a double-precision
// reference forward, on random inputs of several shapes (some not multiples of 16).
#include <doctest/doctest.h>

#include "ops/core_attention.hpp"
#include "ops/dispatch.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/dropout.hpp"
#include "ops/embedding.hpp"
#include "ops/gelu.hpp"
#include "ops/layer_norm.hpp"
#include "ops/linear.hpp"
#include "ops/output_projection.hpp"
#include "ops/qkv_projection.hpp"
#include "ops/residual.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;
namespace ref = troupe::ops::reference;

TEST_CASE("layer norm backward matches finite differences and its halves sum to the whole") {
  std::mt19937 rng(1);
  for (auto [rows, cols] : {std::pair{3L, 7L}, {5L, 33L}, {4L, 64L}}) {
    CAPTURE(cols);
    auto x = randn({rows, cols}, rng, 2.0f), g = randn({cols}, rng), b = randn({cols}, rng);
    auto r = randn({rows, cols}, rng);
    layer_norm_saved s;
    auto y = layer_norm_forward(x, g, b, s);
    vec xd = to_vec(x), gd = to_vec(g), bd = to_vec(b), rd = to_vec(r);
    auto e = compare(to_vec(y), ref::layer_norm(xd, gd, bd, rows, cols));
    CHECK(e.max_rel < 1e-5);
    auto dx = layer_norm_backward_input(r, x, s, g);
    auto dg = tensor_handle::zeros({cols}), db = tensor_handle::zeros({cols});
    layer_norm_backward_weight(r, x, s, dg, db);
    auto f = [&] { return dot(rd, ref::layer_norm(xd, gd, bd, rows, cols)); };
    check_grad("dx", to_vec(dx), xd, f);
    check_grad("dgamma", to_vec(dg), gd, f);
    check_grad("dbeta", to_vec(db), bd, f);
    auto dg2 = tensor_handle::zeros({cols}), db2 = tensor_handle::zeros({cols});
    auto dx2 = layer_norm_backward(r, x, s, g, dg2, db2);
    CHECK(to_vec(dx2) == to_vec(dx));
    CHECK(to_vec(dg2) == to_vec(dg));
    CHECK(to_vec(db2) == to_vec(db));
  }
}

TEST_CASE("linear backward matches finite differences and its halves sum to the whole") {
  std::mt19937 rng(2);
  for (auto [rows, in, out] : {std::tuple{3L, 5L, 7L}, {6L, 17L, 33L}, {4L, 64L, 48L}}) {
    CAPTURE(in);
    auto x = randn({rows, in}, rng), w = randn({out, in}, rng, 0.3f), b = randn({out}, rng);
    auto r = randn({rows, out}, rng);
    auto y = linear_forward(x, w, b);
    vec xd = to_vec(x), wd = to_vec(w), bd = to_vec(b), rd = to_vec(r);
    CHECK(compare(to_vec(y), ref::linear(xd, wd, bd, rows, in, out)).max_rel < 1e-5);
    auto dx = linear_backward_input(r, w);
    auto dw = tensor_handle::zeros({out, in}), db = tensor_handle::zeros({out});
    linear_backward_weight(r, x, dw, db);
    auto f = [&] { return dot(rd, ref::linear(xd, wd, bd, rows, in, out)); };
    check_grad("dx", to_vec(dx), xd, f);
    check_grad("dw", to_vec(dw), wd, f);
    check_grad("db", to_vec(db), bd, f);
    auto dw2 = tensor_handle::zeros({out, in}), db2 = tensor_handle::zeros({out});
    auto dx2 = linear_backward(r, x, w, dw2, db2);
    CHECK(to_vec(dx2) == to_vec(dx));
    CHECK(to_vec(dw2) == to_vec(dw));
    CHECK(to_vec(db2) == to_vec(db));
  }
}

TEST_CASE("qkv and output projections check their weight shapes and differentiate like linear") {
  std::mt19937 rng(3);
  const long rows = 5, c = 12;
  auto x = randn({rows, c}, rng), wq = randn({3 * c, c}, rng, 0.3f), bq = randn({3 * c}, rng);
  auto r = randn({rows, 3 * c}, rng);
  vec xd = to_vec(x), wd = to_vec(wq), bd = to_vec(bq), rd = to_vec(r);
  auto dx = qkv_projection_backward_input(r, wq);
  auto dw = tensor_handle::zeros({3 * c, c}), db = tensor_handle::zeros({3 * c});
  qkv_projection_backward_weight(r, x, dw, db);
  auto f = [&] { return dot(rd, ref::linear(xd, wd, bd, rows, c, 3 * c)); };
  CHECK(compare(to_vec(qkv_projection_forward(x, wq, bq)), ref::linear(xd, wd, bd, rows, c, 3 * c)).max_rel < 1e-5);
  check_grad("qkv dx", to_vec(dx), xd, f);
  check_grad("qkv dw", to_vec(dw), wd, f);
  auto wo = randn({c, c}, rng);
  CHECK_THROWS_AS(qkv_projection_forward(x, wo, {}), std::invalid_argument);
  CHECK_THROWS_AS(output_projection_forward(x, wq, {}), std::invalid_argument);
  auto ro = randn({rows, c}, rng), bo = randn({c}, rng);
  vec wod = to_vec(wo), bod = to_vec(bo), rod = to_vec(ro);
  auto dwo = tensor_handle::zeros({c, c}), dbo = tensor_handle::zeros({c});
  output_projection_backward_weight(ro, x, dwo, dbo);
  auto fo = [&] { return dot(rod, ref::linear(xd, wod, bod, rows, c, c)); };
  check_grad("out dx", to_vec(output_projection_backward_input(ro, wo)), xd, fo);
  check_grad("out dw", to_vec(dwo), wod, fo);
  check_grad("out db", to_vec(dbo), bod, fo);
}

TEST_CASE("gelu backward matches finite differences") {
  std::mt19937 rng(4);
  for (long n : {7L, 33L, 100L}) {
    auto x = randn({n}, rng, 2.0f), r = randn({n}, rng);
    vec xd = to_vec(x), rd = to_vec(r);
    CHECK(compare(to_vec(gelu_forward(x)), ref::gelu(xd)).max_rel < 1e-5);
    auto f = [&] { return dot(rd, ref::gelu(xd)); };
    check_grad("dx", to_vec(gelu_backward(r, x)), xd, f);
  }
}

TEST_CASE("residual add passes the gradient to both branches") {
  std::mt19937 rng(5);
  auto a = randn({3, 19}, rng), b = randn({3, 19}, rng), r = randn({3, 19}, rng);
  vec ad = to_vec(a), bd = to_vec(b), rd = to_vec(r);
  auto y = residual_forward(a, b);
  auto f = [&] {
    vec s(ad.size());
    for (std::size_t i = 0; i < s.size(); ++i)
      s[i] = ad[i] + bd[i];
    return dot(rd, s);
  };
  CHECK(compare(to_vec(y),
                [&] {
                  vec s(ad.size());
                  for (std::size_t i = 0; i < s.size(); ++i)
                    s[i] = ad[i] + bd[i];
                  return s;
                }())
          .max_rel < 1e-6);
  // Backward: both branches receive dy; accumulation adds a second branch's gradient.
  check_grad("da", rd, ad, f);
  check_grad("db", rd, bd, f);
  auto acc = from_vec(rd, {3, 19});
  residual_add_inplace(acc, r);
  CHECK(compare(to_vec(acc),
                [&] {
                  vec s = rd;
                  for (auto& v : s)
                    v *= 2;
                  return s;
                }())
          .max_rel < 1e-7);
}

TEST_CASE("core attention backward matches finite differences across row blocks") {
  std::mt19937 rng(6);
  for (auto [b, t, h, hd] : {std::tuple{1L, 5L, 1L, 3L}, {2L, 7L, 2L, 5L}, {2L, 37L, 2L, 8L}}) {
    CAPTURE(t);
    const long c = h * hd;
    auto qkv = randn({b, t, 3 * c}, rng), r = randn({b, t, c}, rng);
    vec qd = to_vec(qkv), rd = to_vec(r);
    core_attention_saved s;
    auto out = core_attention_forward(qkv, int(h), s);
    CHECK(compare(to_vec(out), ref::attention(qd, b, t, h, hd)).max_rel < 1e-5);
    auto dqkv = core_attention_backward(r, qkv, s, int(h));
    auto f = [&] { return dot(rd, ref::attention(qd, b, t, h, hd)); };
    check_grad("dqkv", to_vec(dqkv), qd, f, 96);
  }
}

TEST_CASE("cross entropy backward matches finite differences and skips ignored targets") {
  std::mt19937 rng(7);
  for (auto [rows, vocab] : {std::pair{5L, 7L}, {17L, 33L}, {6L, 256L}}) {
    CAPTURE(vocab);
    auto logits = randn({rows, vocab}, rng, 3.0f);
    auto targets = tensor_handle::empty({rows}, dtype::i32);
    std::vector<std::int32_t> td(static_cast<std::size_t>(rows));
    for (long i = 0; i < rows; ++i)
      td[std::size_t(i)] = targets.data<std::int32_t>()[i] = i == 1 ? -1 : std::int32_t(rng() % std::uint32_t(vocab));
    vec ld = to_vec(logits);
    float loss = cross_entropy_forward(logits, targets);
    CHECK(std::abs(loss - ref::cross_entropy(ld, td, vocab, -1)) < 1e-5 * std::abs(loss));
    float loss2 = 0;
    auto d = cross_entropy_backward(logits, targets, 0.7f, -1, &loss2);
    CHECK(std::abs(loss2 - loss) < 1e-5 * std::abs(loss));
    auto f = [&] { return 0.7 * ref::cross_entropy(ld, td, vocab, -1); };
    check_grad("dlogits", to_vec(d), ld, f, 128);
    for (long j = 0; j < vocab; ++j)
      CHECK(d.data<float>()[vocab + j] == 0.0f);
  }
  auto logits = tensor_handle::zeros({2, 4});
  auto targets = tensor_handle::empty({2}, dtype::i32);
  targets.data<std::int32_t>()[0] = targets.data<std::int32_t>()[1] = -1;
  CHECK(cross_entropy_forward(logits, targets) == 0.0f);
  targets.data<std::int32_t>()[0] = 4;
  CHECK_THROWS_AS(cross_entropy_forward(logits, targets), std::invalid_argument);
}

TEST_CASE("embedding backward scatters the gradient into both tables") {
  std::mt19937 rng(8);
  for (auto [b, t, c, vocab, ctx] : {std::tuple{2L, 5L, 7L, 11L, 6L}, {3L, 17L, 20L, 40L, 17L}}) {
    CAPTURE(c);
    auto wte = randn({vocab, c}, rng), wpe = randn({ctx, c}, rng);
    auto tokens = tensor_handle::empty({b, t}, dtype::i32);
    std::vector<std::int32_t> td(static_cast<std::size_t>(b * t));
    for (long i = 0; i < b * t; ++i)
      td[std::size_t(i)] = tokens.data<std::int32_t>()[i] = std::int32_t(rng() % 4); // repeats
    auto r = randn({b, t, c}, rng);
    vec ted = to_vec(wte), ped = to_vec(wpe), rd = to_vec(r);
    CHECK(compare(to_vec(embedding_forward(tokens, wte, wpe)), ref::embedding(td, ted, ped, b, t, c)).max_rel < 1e-6);
    auto dte = tensor_handle::zeros({vocab, c}), dpe = tensor_handle::zeros({ctx, c});
    embedding_backward_weight(r, tokens, dte, dpe);
    auto f = [&] { return dot(rd, ref::embedding(td, ted, ped, b, t, c)); };
    check_grad("dwte", to_vec(dte), ted, f, 200);
    check_grad("dwpe", to_vec(dpe), ped, f, 200);
    tokens.data<std::int32_t>()[3] = std::int32_t(vocab);
    CHECK_THROWS_AS(embedding_forward(tokens, wte, wpe), std::invalid_argument);
  }
}

TEST_CASE("ops name the op and device when no kernel exists") {
  // A CUDA tensor cannot be made without the CUDA allocator; the error path is the
  // shared helper every op calls, so check its message.
  try {
    unsupported_device("gelu_forward", device::cuda(1));
    FAIL("no throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()) == "gelu_forward: no kernel for device cuda:1");
  }
}

TEST_CASE("the fused residual paths equal the separate add") {
  std::mt19937 rng(9);
  const long rows = 6, in = 19, out = 21;
  auto x = randn({rows, in}, rng), w = randn({out, in}, rng), b = randn({out}, rng), res = randn({rows, out}, rng);
  auto fused = to_vec(linear_forward(x, w, b, res)), plain = to_vec(linear_forward(x, w, b));
  auto no_bias = to_vec(linear_forward(x, w, {}, res)), plain_nb = to_vec(linear_forward(x, w, {}));
  auto r = to_vec(res);
  for (std::size_t i = 0; i < r.size(); ++i) {
    plain[i] += r[i];
    plain_nb[i] += r[i];
  }
  CHECK(compare(fused, plain).max_rel < 1e-6);
  CHECK(compare(no_bias, plain_nb).max_rel < 1e-6);
  auto g = randn({out}, rng), dy = randn({rows, out}, rng), add = randn({rows, out}, rng);
  layer_norm_saved s;
  layer_norm_forward(res, g, b, s);
  auto with_add = to_vec(layer_norm_backward_input(dy, res, s, g, add));
  auto sep = to_vec(layer_norm_backward_input(dy, res, s, g));
  auto a = to_vec(add);
  for (std::size_t i = 0; i < a.size(); ++i)
    sep[i] += a[i];
  CHECK(compare(with_add, sep).max_rel < 1e-6);
}

TEST_CASE("dropout is the identity at p = 0 and masks and rescales reproducibly otherwise") {
  std::mt19937 rng(10);
  auto x = randn({40, 50}, rng), dy = randn({40, 50}, rng);
  dropout_saved s0;
  CHECK(dropout_forward(x, 0.0f, 1, s0).same_bytes(x));
  CHECK(dropout_backward(dy, s0).same_bytes(dy));
  dropout_saved s, again;
  auto y = dropout_forward(x, 0.25f, 42, s);
  auto y2 = dropout_forward(x, 0.25f, 42, again);
  CHECK(to_vec(y) == to_vec(y2));
  auto dx = dropout_backward(dy, s);
  long kept = 0, wrong = 0;
  for (long i = 0; i < x.numel(); ++i) {
    bool k = s.mask.data<std::uint8_t>()[i] != 0;
    kept += k;
    wrong += y.data<float>()[i] != (k ? x.data<float>()[i] * (1.0f / 0.75f) : 0.0f);
    wrong += dx.data<float>()[i] != (k ? dy.data<float>()[i] * (1.0f / 0.75f) : 0.0f);
  }
  CHECK(wrong == 0);
  CHECK(double(kept) / double(x.numel()) == doctest::Approx(0.75).epsilon(0.05));
  CHECK_THROWS_AS(dropout_forward(x, 1.0f, 1, s), std::invalid_argument);
}
