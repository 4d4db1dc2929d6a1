// A document cut into head, middle and tail shards, each attended on its own as an
// attention server would, gives the whole document's outputs and query gradients,
// and its key and value gradients once the shards' parts are summed.
#include <doctest/doctest.h>

#include "ops/core_attention.hpp"
#include "ops/core_attention_shard.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;

namespace {

/// Rows [r0, r1) of columns [c0, c0 + w) of a [1, T, width] tensor, as [r1 − r0, w].
tensor_handle block(const tensor_handle& t, long r0, long r1, long c0, long w) {
  auto out = tensor_handle::empty({r1 - r0, w});
  const long width = t.dim(t.rank() - 1);
  for (long r = r0; r < r1; ++r)
    for (long c = 0; c < w; ++c)
      out.data<float>()[(r - r0) * w + c] = t.data<float>()[r * width + c0 + c];
  return out;
}

} // namespace

TEST_CASE("shards of a document attended apart equal the document attended whole") {
  std::mt19937 rng(31);
  for (auto [len, heads, hd] : {std::tuple{9L, 1L, 4L}, {40L, 2L, 8L}, {77L, 3L, 16L}}) {
    CAPTURE(len);
    const long c = heads * hd;
    auto qkv = randn({1, len, 3 * c}, rng), dout = randn({1, len, c}, rng);
    core_attention_saved whole_saved;
    auto whole = core_attention_forward(qkv, int(heads), whole_saved);
    auto whole_d = core_attention_backward(dout, qkv, whole_saved, int(heads));
    // Query ranges [0, a), [a, b), [b, len): a head, a middle and a tail shard.
    const long a = len / 3, b = 2 * len / 3 + 1;
    vec dk(std::size_t(len * c), 0.0), dv(dk.size(), 0.0);
    for (auto [q0, q1] : {std::pair{0L, a}, {a, b}, {b, len}}) {
      CAPTURE(q0);
      auto q = block(qkv, q0, q1, 0, c), k = block(qkv, 0, q1, c, c), v = block(qkv, 0, q1, 2 * c, c);
      shard_attention_saved saved;
      auto out = shard_attention_forward(q, k, v, int(heads), saved);
      CHECK(compare(to_vec(out), to_vec(block(whole, q0, q1, 0, c))).max_rel < 1e-5);
      auto g = shard_attention_backward(block(dout, q0, q1, 0, c), q, k, v, saved, int(heads));
      CHECK(compare(to_vec(g.dq), to_vec(block(whole_d, q0, q1, 0, c))).max_rel < 1e-4);
      auto gk = to_vec(g.dk), gv = to_vec(g.dv);
      for (std::size_t i = 0; i < gk.size(); ++i)
        dk[i] += gk[i], dv[i] += gv[i];
    }
    CHECK(compare(dk, to_vec(block(whole_d, 0, len, c, c))).max_rel < 1e-4);
    CHECK(compare(dv, to_vec(block(whole_d, 0, len, 2 * c, c))).max_rel < 1e-4);
  }
}

TEST_CASE("a shard's gradients match finite differences of its own forward") {
  std::mt19937 rng(32);
  const long nq = 5, nkv = 11, heads = 2, hd = 3, c = heads * hd;
  auto q = randn({nq, c}, rng), k = randn({nkv, c}, rng), v = randn({nkv, c}, rng), r = randn({nq, c}, rng);
  shard_attention_saved saved;
  shard_attention_forward(q, k, v, int(heads), saved);
  auto g = shard_attention_backward(r, q, k, v, saved, int(heads));
  vec qd = to_vec(q), kd = to_vec(k), vd = to_vec(v), rd = to_vec(r);
  auto objective = [&] {
    shard_attention_saved s2;
    auto out =
      shard_attention_forward(from_vec(qd, {nq, c}), from_vec(kd, {nkv, c}), from_vec(vd, {nkv, c}), int(heads), s2);
    return dot(rd, to_vec(out));
  };
  check_grad("dq", to_vec(g.dq), qd, objective, 64, 2e-2);
  check_grad("dk", to_vec(g.dk), kd, objective, 64, 2e-2);
  check_grad("dv", to_vec(g.dv), vd, objective, 64, 2e-2);
}
