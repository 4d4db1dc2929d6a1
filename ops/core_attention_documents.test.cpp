// Document-causal core attention: the packed kernel against the masked double
// reference (forward, backward and central differences), and against each
// document run on its own, so a mask that leaks across a boundary cannot pass.
#include <doctest/doctest.h>

#include <stdexcept>

#include "kernels/cpu/attention.hpp"
#include "ops/core_attention.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;
namespace ref = troupe::ops::reference;

namespace {

/// Random document lengths (1 to `longest` tokens) packed into each of `batch` rows of `seq`.
tensor_handle random_documents(long batch, long seq, long longest, std::mt19937& rng) {
  auto d = tensor_handle::empty({batch, seq}, dtype::i32);
  for (long b = 0; b < batch; ++b)
    for (long i = 0; i < seq;) {
      long n = std::min<long>(seq - i, 1 + long(rng() % std::uint32_t(longest)));
      for (long j = i; j < i + n; ++j)
        d.data<std::int32_t>()[b * seq + j] = std::int32_t(i);
      i += n;
    }
  return d;
}

/// Rows [i0, i1) of row b of a [B, T, width] tensor as a [1, i1 - i0, width] tensor.
tensor_handle rows(const tensor_handle& t, long b, long i0, long i1) {
  const long w = t.dim(2);
  auto out = tensor_handle::empty({1, i1 - i0, w});
  for (long i = i0; i < i1; ++i)
    for (long k = 0; k < w; ++k)
      out.data<float>()[(i - i0) * w + k] = t.data<float>()[(b * t.dim(1) + i) * w + k];
  return out;
}

} // namespace

TEST_CASE("document-masked attention matches the masked reference and finite differences") {
  std::mt19937 rng(21);
  for (auto [b, t, h, hd, longest] : {std::tuple{1L, 9L, 1L, 3L, 4L}, {2L, 23L, 2L, 5L, 9L}, {2L, 40L, 2L, 8L, 30L}}) {
    CAPTURE(t);
    const long c = h * hd;
    auto qkv = randn({b, t, 3 * c}, rng), r = randn({b, t, c}, rng);
    auto docs = random_documents(b, t, longest, rng);
    const auto* ds = docs.data<std::int32_t>();
    vec qd = to_vec(qkv), rd = to_vec(r);
    core_attention_saved s;
    auto out = core_attention_forward(qkv, int(h), s, docs);
    CHECK(compare(to_vec(out), ref::attention(qd, b, t, h, hd, ds)).max_rel < 1e-5);
    // The mask changes the answer: plain causal attention differs on these inputs.
    CHECK(compare(to_vec(out), ref::attention(qd, b, t, h, hd)).max_rel > 1e-3);
    auto dqkv = core_attention_backward(r, qkv, s, int(h));
    // The kernel's own double reference of the backward, entry by entry.
    kernels::cpu::attention_shape shape{b, t, h, hd};
    std::vector<float> rdq(qd.size());
    kernels::cpu::attention_backward_reference(r.data<float>(), qkv.data<float>(), rdq.data(), shape, ds);
    CHECK(compare(to_vec(dqkv), vec(rdq.begin(), rdq.end())).max_rel < 1e-5);
    auto f = [&] { return dot(rd, ref::attention(qd, b, t, h, hd, ds)); };
    check_grad("dqkv", to_vec(dqkv), qd, f, 96);
  }
}

TEST_CASE("each packed document's output and gradients equal that document attended alone") {
  std::mt19937 rng(22);
  const long b = 2, t = 48, h = 2, hd = 16, c = h * hd;
  auto qkv = randn({b, t, 3 * c}, rng), dout = randn({b, t, c}, rng);
  auto docs = random_documents(b, t, 20, rng);
  core_attention_saved s;
  auto out = core_attention_forward(qkv, int(h), s, docs);
  auto dqkv = core_attention_backward(dout, qkv, s, int(h));
  int documents = 0;
  for (long bi = 0; bi < b; ++bi)
    for (long i0 = 0; i0 < t;) {
      long i1 = i0 + 1;
      while (i1 < t && docs.data<std::int32_t>()[bi * t + i1] != i1)
        ++i1;
      CAPTURE(i0);
      core_attention_saved alone;
      auto q1 = rows(qkv, bi, i0, i1);
      auto o1 = core_attention_forward(q1, int(h), alone);
      auto d1 = core_attention_backward(rows(dout, bi, i0, i1), q1, alone, int(h));
      CHECK(compare(to_vec(rows(out, bi, i0, i1)), to_vec(o1)).max_rel < 1e-6);
      CHECK(compare(to_vec(rows(dqkv, bi, i0, i1)), to_vec(d1)).max_rel < 1e-6);
      ++documents, i0 = i1;
    }
  CHECK(documents > 4);
}

TEST_CASE("documents that are not per-token document starts are rejected") {
  std::mt19937 rng(23);
  auto qkv = randn({1, 6, 6}, rng);
  core_attention_saved s;
  auto docs = tensor_handle::empty({1, 6}, dtype::i32);
  for (auto bad : {std::vector<std::int32_t>{1, 1, 1, 1, 1, 1}, {0, 0, 1, 3, 3, 3}, {0, 0, 0, 0, 0, 7}}) {
    std::copy(bad.begin(), bad.end(), docs.data<std::int32_t>());
    CHECK_THROWS_AS(core_attention_forward(qkv, 1, s, docs), std::invalid_argument);
  }
  CHECK_THROWS_AS(core_attention_forward(qkv, 1, s, tensor_handle::empty({1, 5}, dtype::i32)), std::invalid_argument);
}
