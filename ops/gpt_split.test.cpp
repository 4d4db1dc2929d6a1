// The forward and backward in pieces that stop at core attention, with core
// attention run between the pieces as an attention server would, compute exactly
// what the whole forward and backward compute.
#include <random>

#include <doctest/doctest.h>

#include "ops/core_attention.hpp"
#include "ops/gpt.hpp"

using namespace troupe;
using namespace troupe::ops;

namespace {

tensor_handle random_i32(long b, long t, int vocab, std::mt19937& rng) {
  auto x = tensor_handle::empty({b, t}, dtype::i32);
  for (long i = 0; i < b * t; ++i)
    x.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(vocab));
  return x;
}

/// Two documents per row: [0, 5) and [5, T).
tensor_handle two_documents(long b, long t) {
  auto d = tensor_handle::empty({b, t}, dtype::i32);
  for (long r = 0; r < b; ++r)
    for (long i = 0; i < t; ++i)
      d.data<std::int32_t>()[r * t + i] = i < 5 ? 0 : 5;
  return d;
}

std::vector<float> flat(const tensor_handle& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

} // namespace

namespace {

// fused: weight gradients in the backward's pieces; else the input-gradient half
// in pieces (zero-bubble "I", as zb_h1 runs it with attention servers), then backward_weight.
void check_pieces(const gpt_config& cfg) {
  CAPTURE(to_string(cfg.family));
  std::mt19937 rng(7);
  const long B = 2, T = 12;
  auto tokens = random_i32(B, T, cfg.vocab, rng), targets = random_i32(B, T, cfg.vocab, rng);
  auto docs = two_documents(B, T);
  for (auto [begin, end, fused] : {std::tuple{0, 3, true},
                                   {0, 2, true},
                                   {1, 3, true},
                                   {1, 2, true},
                                   {0, 3, false},
                                   {0, 2, false},
                                   {1, 3, false},
                                   {1, 2, false}}) {
    CAPTURE(begin);
    CAPTURE(end);
    CAPTURE(fused);
    gpt_range whole(cfg, begin, end), split(cfg, begin, end);
    const bool first = begin == 0, last = end == cfg.layers;
    std::normal_distribution<float> n(0.0f, 1.0f);
    tensor_handle input = tokens;
    if (!first) {
      input = tensor_handle::empty({B, T, cfg.d_model});
      for (long i = 0; i < input.numel(); ++i)
        input.data<float>()[i] = n(rng);
    }
    tensor_handle tg = last ? targets : tensor_handle{};
    auto out_whole = whole.forward(3, input, tg, docs);

    // The pieces, with core attention between them as a server runs it.
    std::vector<core_attention_saved> saved(std::size_t(end - begin));
    std::vector<tensor_handle> qkvs(saved.size());
    auto qkv = split.forward_begin(3, input, tg, docs);
    bool done = false;
    tensor_handle out_split;
    for (std::size_t li = 0; !done; ++li) {
      REQUIRE(li < saved.size());
      qkvs[li] = qkv;
      auto att = core_attention_forward(qkv, cfg.heads, saved[li], docs);
      out_split = qkv = split.forward_resume(3, att, done);
    }
    CHECK(flat(out_split) == flat(out_whole));
    CHECK(split.in_flight() == 1);

    tensor_handle grad;
    if (!last) {
      grad = tensor_handle::empty({B, T, cfg.d_model});
      for (long i = 0; i < grad.numel(); ++i)
        grad.data<float>()[i] = n(rng);
    }
    auto dx_whole = whole.backward(3, grad);
    auto d_att = split.backward_begin(3, grad, fused);
    tensor_handle dx_split;
    done = false;
    for (std::size_t li = saved.size(); !done;) {
      REQUIRE(li > 0);
      --li;
      auto d_qkv = core_attention_backward(d_att, qkvs[li], saved[li], cfg.heads);
      dx_split = d_att = split.backward_resume(3, d_qkv, done);
    }
    if (!fused) { // no weight gradient yet: the microbatch waits for its W
      CHECK(split.in_flight() == 1);
      for (const auto& g : split.grads())
        for (float v : flat(g.value))
          REQUIRE(v == 0.0f);
      split.backward_weight(3);
    }
    CHECK(split.in_flight() == 0);
    CHECK(dx_split.defined() == !first);
    if (!first)
      CHECK(flat(dx_split) == flat(dx_whole));
    for (std::size_t i = 0; i < whole.grads().size(); ++i) {
      CAPTURE(whole.grads()[i].name);
      CHECK(flat(split.grads()[i].value) == flat(whole.grads()[i].value));
    }
  }
}

} // namespace

// Both families: Llama's pieces carry the documents for its rotary positions.
TEST_CASE("a forward and backward in pieces around core attention equal the whole ones, bit for bit") {
  gpt_config gpt2;
  gpt2.layers = 3, gpt2.d_model = 32, gpt2.heads = 4, gpt2.context = 16, gpt2.vocab = 40;
  gpt_config llama = gpt2;
  llama.family = model_family::llama, llama.kv_heads = 2;
  for (const auto& cfg : {gpt2, llama})
    check_pieces(cfg);
}

TEST_CASE("pieces out of order are refused with what is wrong") {
  gpt_config cfg;
  cfg.layers = 2, cfg.d_model = 16, cfg.heads = 2, cfg.context = 8, cfg.vocab = 20;
  gpt_range r(cfg, 0, 1);
  std::mt19937 rng(3);
  auto tokens = random_i32(1, 8, cfg.vocab, rng);
  bool done = false;
  CHECK_THROWS_WITH_AS(r.forward_resume(0, tensor_handle::zeros({1, 8, 16}), done),
                       doctest::Contains("microbatch 0 has no forward in flight"), std::invalid_argument);
  auto qkv = r.forward_begin(0, tokens);
  CHECK(qkv.dim(2) == 48);
  CHECK_THROWS_WITH_AS(r.backward_begin(0), doctest::Contains("no finished forward"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(r.forward_resume(0, tensor_handle::zeros({1, 8, 48}), done),
                       doctest::Contains("att must have last dimension 16"), std::invalid_argument);
  cfg.head_apart = true;
  gpt_range head(cfg, 2, 2);
  CHECK_THROWS_WITH_AS(head.forward_begin(0, tensor_handle::zeros({1, 8, 16}), tokens),
                       doctest::Contains("no core attention"), std::invalid_argument);
}
