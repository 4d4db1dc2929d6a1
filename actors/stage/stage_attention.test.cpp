// A microbatch in pieces around core attention: which piece runs next is a rule
// over ready work, so while one nano-batch's attention is away the other's linear
// work goes on (DistCA's ping-pong), nothing runs while everything is away, and
// the pieces compute what the whole forward computes.
#include "actors/stage/stage_attention.hpp"

#include <random>

#include <doctest/doctest.h>

using namespace troupe;

namespace {

struct harness {
  ops::gpt_config cfg;
  std::vector<std::pair<int, attention_task_msg>> sent; ///< (server, task), in order
  attention_server_state servers[2];
  std::unique_ptr<stage_attention> att;

  harness() {
    cfg.layers = 3, cfg.d_model = 16, cfg.heads = 2, cfg.context = 8, cfg.vocab = 32;
    stage_attention_config c;
    c.servers = {10, 11}; // two separate servers (actor indices)
    c.nano_batches = 2, c.heads = cfg.heads, c.actor = 3;
    stage_attention::hooks h;
    h.send = [this](int server, const attention_task_msg& m) { sent.emplace_back(server, m); };
    h.begin_backward_piece = [](bool) {};
    h.end_backward_piece = [] {};
    att = std::make_unique<stage_attention>(c, h);
  }
  /// Answers the sent tasks that `pick` selects (as the server they went to would), removing them.
  template <class Pick>
  int answer(Pick pick) {
    int n = 0;
    for (auto it = sent.begin(); it != sent.end();)
      if (pick(it->second.key)) {
        att->on_result(servers[it->first - 10].serve(it->second));
        it = sent.erase(it), ++n;
      } else {
        ++it;
      }
    return n;
  }
};

tensor_handle tokens(long b, long t, int vocab) {
  std::mt19937 rng(5);
  auto x = tensor_handle::empty({b, t}, dtype::i32);
  for (long i = 0; i < b * t; ++i)
    x.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(vocab));
  return x;
}

} // namespace

TEST_CASE(
  "a nano-batch whose attention came back runs on while the other's is away, and the output is the whole forward's") {
  harness h;
  ops::gpt_range range(h.cfg, 0, 2), whole(h.cfg, 0, 2);
  stage_tensor input;
  input.value = tokens(2, 8, h.cfg.vocab);
  input.round_documents = tensor_handle::zeros({1, 2, 8}, dtype::i32); // one replica, a document per row
  h.att->start_forward(0, 0, 4, range, input, {});
  // Both nano-batches ran their first layer's pre-attention and sent its shards.
  int n0 = 0, n1 = 0;
  for (const auto& [server, m] : h.sent)
    (m.key.nano == 0 ? n0 : n1) += m.key.layer == 0;
  CHECK(n0 > 0);
  CHECK(n1 > 0);
  CHECK(h.att->busy());
  CHECK_FALSE(h.att->run_ready()); // everything is away: nothing to run, no waiting loop
  // Nano-batch 1's attention comes back first: it runs on into layer 1 while nano-batch 0 waits.
  CHECK(h.answer([](const attention_key& k) { return k.nano == 1; }) == n1);
  CHECK(h.att->run_ready());
  bool layer1_of_nano1 = false;
  for (const auto& [server, m] : h.sent)
    layer1_of_nano1 |= m.key.nano == 1 && m.key.layer == 1;
  CHECK(layer1_of_nano1);
  CHECK_FALSE(h.att->run_ready());
  // The rest comes back in any order; the output is the whole forward's.
  while (h.att->busy()) {
    h.answer([](const attention_key&) { return true; });
    while (h.att->run_ready()) {
    }
  }
  auto out = h.att->take_output();
  auto ref = whole.forward(0, input.value);
  REQUIRE(out.value.numel() == ref.numel());
  for (long i = 0; i < ref.numel(); ++i)
    CHECK(out.value.data<float>()[i] == doctest::Approx(ref.data<float>()[i]).epsilon(1e-5));
  CHECK(out.round_documents.defined());                 // the round's masks go on with the activation
  CHECK(h.servers[0].held() + h.servers[1].held() > 0); // kept for the backward
}

// Llama's pieces (grouped-query k, v repeated into the packed qkv) through the
// servers. Its rotary positions restart per document, which changes only rounding
// here: RoPE scores depend on position differences, and the mask keeps documents
// apart. That the pieces carry the documents is checked bit for bit in
// ops/gpt_split.test.cpp.
TEST_CASE("a grouped-query llama microbatch with documents in pieces gives the whole forward's output") {
  harness h;
  h.cfg.family = ops::model_family::llama, h.cfg.kv_heads = 1;
  ops::gpt_range range(h.cfg, 0, 2), whole(h.cfg, 0, 2);
  std::mt19937 rng(9);
  std::normal_distribution<float> noise(0.0f, 0.3f); // weights large enough that positions matter
  for (std::size_t i = 0; i < range.params().size(); ++i)
    for (long j = 0; j < range.params()[i].value.numel(); ++j)
      whole.params()[i].value.data<float>()[j] = range.params()[i].value.data<float>()[j] += noise(rng);
  stage_tensor input;
  input.value = tokens(2, 8, h.cfg.vocab);
  input.documents = tensor_handle::empty({2, 8}, dtype::i32); // documents [0, 3) and [3, 8) in each row
  for (long i = 0; i < 16; ++i)
    input.documents.data<std::int32_t>()[i] = i % 8 < 3 ? 0 : 3;
  input.round_documents = input.documents.reshape({1, 2, 8});
  h.att->start_forward(0, 0, 4, range, input, {});
  while (h.att->busy()) {
    h.answer([](const attention_key&) { return true; });
    while (h.att->run_ready()) {
    }
  }
  auto out = h.att->take_output();
  auto ref = whole.forward(0, input.value, {}, input.documents);
  REQUIRE(out.value.numel() == ref.numel());
  for (long i = 0; i < ref.numel(); ++i)
    CHECK(out.value.data<float>()[i] == doctest::Approx(ref.data<float>()[i]).epsilon(1e-5));
}

TEST_CASE("an answer nothing waits for, and a backward the server never saw, are refused") {
  harness h;
  attention_result_msg stray{{0, 3, 9, 0, 0, 0, 0, false}};
  CHECK_THROWS_WITH_AS(h.att->on_result(stray), doctest::Contains("nothing waits for"), std::runtime_error);
  attention_task_msg back{{0, 3, 9, 0, 0, 0, 0, true}, 2, {}, {}, {}, tensor_handle::zeros({2, 16})};
  CHECK_THROWS_WITH_AS(h.servers[0].serve(back), doctest::Contains("without its forward here"), std::runtime_error);
}
