// Gradient buckets of a data-parallel stage: they go to the peer during the
// step's last backward pass as the model writes them (not before, not all at
// the end), in backward's order, and the step waits only for those still out.
#include "actors/boundary/grad_buckets.hpp"

#include <algorithm>

#include <doctest/doctest.h>

using namespace troupe;

namespace {

/// Tokens [1, 8] and their next-token targets.
std::pair<tensor_handle, tensor_handle> tokens() {
  auto x = tensor_handle::empty({1, 8}, dtype::i32), y = tensor_handle::empty({1, 8}, dtype::i32);
  for (int i = 0; i < 8; ++i)
    x.data<std::int32_t>()[i] = 3 * i + 1, y.data<std::int32_t>()[i] = 3 * i + 4;
  return {x, y};
}

/// A stage of one CPU chunk: a 2-layer GPT-2 range.
struct one_chunk {
  ops::gpt_range range{ops::gpt_config{2, 32, 2, 8, 64}, 0, 2};
  std::vector<std::unique_ptr<stage_model>> models;
  one_chunk() { models.push_back(make_cpu_stage_model(range)); }
};

/// Microbatch `mb` forward and backward through the chunk, its backward a pass of `b` (`last`: the step's last).
void backward_pass(one_chunk& stage, grad_buckets& b, int mb, bool last) {
  auto [x, y] = tokens();
  stage.models[0]->forward(mb, {x, nullptr}, y);
  b.begin_pass(0, 0, last);
  stage.models[0]->backward(mb, {});
  b.end_pass();
}

} // namespace

TEST_CASE("buckets go to the peer while the last backward pass writes them, in backward's order") {
  one_chunk stage;
  auto& range = stage.range;
  auto& models = stage.models;
  std::vector<bucket_msg> sent;
  int params_with_grad_at_send = -1; // how many gradients were nonzero when the first bucket left
  double loss = 0;
  grad_buckets b(
    models, 16 << 10, [&] { return loss; },
    [&](bucket_msg m) {
      if (sent.empty()) {
        params_with_grad_at_send = 0;
        for (const auto& g : range.grads())
          params_with_grad_at_send += g.value.data<float>()[0] != 0.0f;
      }
      sent.push_back(std::move(m));
    });
  REQUIRE(b.size() > 2);
  CHECK(b.layout().front().front().index == static_cast<int>(range.params().size()) - 1); // the head first
  CHECK(b.layout().back().back().index == 0);                                             // the embeddings last
  backward_pass(stage, b, 0, false);
  CHECK(sent.empty()); // another pass over these layers follows: nothing is final yet
  range.zero_grads();
  loss = 42.0;
  backward_pass(stage, b, 1, true);
  REQUIRE(sent.size() == b.size());
  CHECK(params_with_grad_at_send < static_cast<int>(range.params().size())); // sent before backward wrote them all
  for (std::size_t i = 0; i < sent.size(); ++i)
    CHECK(sent[i].bucket == static_cast<int>(i));
  CHECK(sent.back().tensors.back().data<float>()[0] == 42.0f); // the loss rides in the last bucket
  CHECK_FALSE(b.flush(0));                                     // all out, none back
  for (std::size_t i = 0; i + 1 < sent.size(); ++i)
    CHECK_FALSE(b.on_reduced(0, static_cast<int>(i)));
  sent.back().tensors.back().data<float>()[0] = 84.0f; // what the peer wrote: the sum over replicas
  CHECK(b.on_reduced(0, static_cast<int>(sent.size()) - 1));
  CHECK(b.loss_sum() == 84.0);
  CHECK_THROWS(b.on_reduced(0, 0)); // already back
}

TEST_CASE("buckets no pass sent (a device model, a late plan) go when the step's work is done") {
  one_chunk stage;
  auto& models = stage.models;
  int sent = 0;
  grad_buckets b(models, 1 << 30, {}, [&](bucket_msg) { ++sent; });
  REQUIRE(b.size() == 1);
  CHECK_FALSE(b.flush(3)); // step 3's work is done here: the one bucket goes now
  CHECK(sent == 1);
  CHECK(b.on_reduced(3, 0));
}

TEST_CASE("a ZeRO-2 stage that ran no backward in a step sends zero gradients, not the buffers it gave back") {
  // least_loaded may send a replica's stage no microbatch of a step; after
  // ZeRO-2 released its gradients it has none, and an empty handle in a bucket
  // crashed the optimizer shard's copy (SIGSEGV in ring_flight::take).
  one_chunk stage;
  auto& models = stage.models;
  std::vector<bucket_msg> sent;
  grad_buckets b(
    models, 16 << 10, {}, [&](bucket_msg m) { sent.push_back(std::move(m)); }, true);
  CHECK_FALSE(b.flush(0));
  REQUIRE(sent.size() == b.size());
  std::vector<std::vector<shape_t>> shapes;
  for (const auto& m : sent) {
    auto& s = shapes.emplace_back();
    for (const auto& t : m.tensors)
      s.push_back(t.shape());
  }
  for (std::size_t i = 0; i < sent.size(); ++i)
    b.on_reduced(0, static_cast<int>(i));
  models[0]->release_grads(); // what the stage does once the shards updated step 0
  b.drop_grads();
  sent.clear();
  CHECK_FALSE(b.flush(1)); // step 1 brought this stage no microbatch
  REQUIRE(sent.size() == shapes.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    REQUIRE(sent[i].tensors.size() == shapes[i].size());
    for (std::size_t k = 0; k < shapes[i].size(); ++k) {
      const auto& t = sent[i].tensors[k];
      REQUIRE(t.defined());
      CHECK(t.shape() == shapes[i][k]);
      CHECK(std::all_of(t.data<float>(), t.data<float>() + t.numel(), [](float v) { return v == 0.0f; }));
    }
  }
}

TEST_CASE("a parameter cut alone waits in a bucket of its own until the flush, while the others go during the pass") {
  one_chunk stage;
  auto& models = stage.models;
  std::vector<bucket_msg> sent;
  grad_buckets b(models, 16 << 10, {}, [&](bucket_msg m) { sent.push_back(std::move(m)); }, true, {"lm_head.weight"});
  const int alone = b.bucket_holding("lm_head.weight");
  REQUIRE(alone == static_cast<int>(b.size()) - 1); // after the others
  REQUIRE(b.layout().back().size() == 1);
  backward_pass(stage, b, 0, true);
  CHECK(sent.size() == b.size() - 1);
  CHECK(std::none_of(sent.begin(), sent.end(), [&](const bucket_msg& m) { return m.bucket == alone; }));
  CHECK_FALSE(b.flush(0));
  REQUIRE(sent.size() == b.size());
  CHECK(sent.back().bucket == alone);
}
