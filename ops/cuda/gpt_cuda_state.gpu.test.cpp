// Checks what the pipeline stage needs from gpt_cuda beyond a training step:
// evaluation without a slot, the gradient norm and scaling against host sums,
// the parameters and gradients an optimizer works on, and the state a checkpoint
// moves (master weights here, moments and step count in the optimizer).
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/test_support.hpp"
#include "ops/adamw.hpp"
#include "ops/cuda/gpt_cuda.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using testing::random_tokens;

namespace {

gpt_config tiny() {
  gpt_config c;
  c.layers = 2, c.heads = 4, c.d_model = 128, c.context = 32, c.vocab = 256;
  return c;
}

std::vector<float> get(gpt_cuda& m, gpt_cuda::buffer which, const std::string& name, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  TROUPE_REQUIRE_OK(m.download(which, name, v.data()));
  return v;
}

/// One training step: forward, backward scaled by 1/2, AdamW on the masters and
/// the bf16 copy refreshed.
void train_step(gpt_cuda& m, optimizer& opt, const tensor_handle& tokens, const tensor_handle& targets) {
  tensor_handle out, dx;
  TROUPE_REQUIRE_OK(m.zero_grads());
  TROUPE_REQUIRE_OK(m.forward(0, tokens, targets, out));
  TROUPE_REQUIRE_OK(m.backward(0, {}, 0.5f, dx));
  opt.step(m.params(), m.grads(), 1e-3f);
  TROUPE_REQUIRE_OK(m.params_updated());
}

float read_scalar(const tensor_handle& t) {
  float v = NAN;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(&v, t.raw(), sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

} // namespace

TEST_CASE("evaluate computes the forward's loss and activations without taking a microbatch slot") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  const auto cfg = tiny();
  const int B = 3, T = 24;
  auto tokens = random_tokens(B, T, cfg.vocab, 1), targets = random_tokens(B, T, cfg.vocab, 2);
  gpt_cuda whole(cfg, 0, cfg.layers, B), front(cfg, 0, 1, B);
  TROUPE_REQUIRE_OK(whole.init());
  TROUPE_REQUIRE_OK(front.init());

  tensor_handle train_loss, eval_loss, act, eval_act, dx;
  TROUPE_REQUIRE_OK(whole.forward(5, tokens, targets, train_loss));
  CHECK(whole.in_flight() == 1);
  TROUPE_REQUIRE_OK(whole.evaluate(tokens, targets, eval_loss));
  CHECK(whole.in_flight() == 1);
  CHECK(!eval_loss.same_bytes(train_loss)); // its own buffer
  float lt = read_scalar(train_loss), le = read_scalar(eval_loss);
  REQUIRE(std::isfinite(lt));
  CHECK(le == lt);
  CHECK(!whole.evaluate(tokens, {}, eval_loss).ok()); // the last range needs targets

  TROUPE_REQUIRE_OK(front.forward(0, tokens, {}, act));
  TROUPE_REQUIRE_OK(front.evaluate(tokens, {}, eval_act));
  REQUIRE(eval_act.shape() == act.shape());
  REQUIRE(eval_act.type() == dtype::bf16);
  std::vector<std::uint16_t> a(std::size_t(act.numel())), e(a.size());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(a.data(), act.raw(), act.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(e.data(), eval_act.raw(), eval_act.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(a == e); // the same kernels on the same input: the same bits

  // The microbatch in flight is untouched: its backward gives the gradients of a
  // model that never evaluated.
  gpt_cuda fresh(cfg, 0, cfg.layers, B);
  TROUPE_REQUIRE_OK(fresh.init());
  tensor_handle out;
  TROUPE_REQUIRE_OK(fresh.forward(5, tokens, targets, out));
  TROUPE_REQUIRE_OK(fresh.backward(5, {}, 1.0f, dx));
  TROUPE_REQUIRE_OK(whole.backward(5, {}, 1.0f, dx));
  CHECK(whole.in_flight() == 0);
  auto names = whole.param_names();
  auto shapes = whole.param_shapes();
  REQUIRE(shapes.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    troupe::gpu::testing::check_same_run("grad " + names[i],
                                         get(whole, gpt_cuda::buffer::grad, names[i], shapes[i].numel()),
                                         get(fresh, gpt_cuda::buffer::grad, names[i], shapes[i].numel()));
  }
}

TEST_CASE("grad_sq_norm and scale_grads match host sums over the downloaded gradients") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  auto cfg = tiny();
  cfg.vocab = 9000; // padded to 9024 columns: the padding must not count
  const int B = 2, T = 16;
  auto tokens = random_tokens(B, T, cfg.vocab, 3), targets = random_tokens(B, T, cfg.vocab, 4);
  gpt_cuda m(cfg, 0, cfg.layers, B);
  TROUPE_REQUIRE_OK(m.init());
  tensor_handle out, dx;
  TROUPE_REQUIRE_OK(m.forward(0, tokens, targets, out));
  TROUPE_REQUIRE_OK(m.backward(0, {}, 1.0f, dx));
  auto names = m.param_names();
  auto shapes = m.param_shapes();
  double ref = 0;
  std::vector<std::vector<float>> before;
  for (std::size_t i = 0; i < names.size(); ++i) {
    before.push_back(get(m, gpt_cuda::buffer::grad, names[i], shapes[i].numel()));
    for (float g : before.back())
      ref += double(g) * g;
  }
  REQUIRE(ref > 0);
  double got = -1;
  TROUPE_REQUIRE_OK(m.grad_sq_norm(got));
  MESSAGE("grad_sq_norm " << got << ", host " << ref);
  CHECK(std::abs(got - ref) <= 1e-12 * ref);

  TROUPE_REQUIRE_OK(m.scale_grads(0.25f));
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto after = get(m, gpt_cuda::buffer::grad, names[i], shapes[i].numel());
    for (auto& g : before[i])
      g *= 0.25f;
    CAPTURE(names[i]);
    CHECK(after == before[i]);
  }
  TROUPE_REQUIRE_OK(m.grad_sq_norm(got));
  CHECK(std::abs(got - ref / 16) <= 1e-12 * ref);
  TROUPE_REQUIRE_OK(m.zero_grads());
  TROUPE_REQUIRE_OK(m.grad_sq_norm(got));
  CHECK(got == 0.0);
}

TEST_CASE("params and grads are device views of the masters and gradients, in gpt_range's order") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  const auto cfg = tiny();
  gpt_cuda m(cfg, 0, cfg.layers, 2);
  TROUPE_REQUIRE_OK(m.init());
  auto names = m.param_names();
  auto shapes = m.param_shapes();
  REQUIRE(m.params().size() == names.size());
  REQUIRE(m.grads().size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    const auto& p = m.params()[i];
    CHECK(p.name == names[i]);
    CHECK(m.grads()[i].name == names[i]);
    CHECK(p.value.shape() == shapes[i]);
    CHECK(p.value.device() == device::cuda(0));
    CHECK(p.value.type() == dtype::f32);
    std::vector<float> host(std::size_t(p.value.numel()));
    REQUIRE(cudaMemcpy(host.data(), p.value.raw(), p.value.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host == get(m, gpt_cuda::buffer::master, names[i], shapes[i].numel()));
  }
}

TEST_CASE("uploading master weights and loading the optimizer's state continues training exactly where it was") {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  const auto cfg = tiny();
  const int B = 2, T = 32;
  auto tokens = random_tokens(B, T, cfg.vocab, 5), targets = random_tokens(B, T, cfg.vocab, 6);
  gpt_cuda a(cfg, 0, cfg.layers, B), b(cfg, 0, cfg.layers, B);
  TROUPE_REQUIRE_OK(a.init());
  TROUPE_REQUIRE_OK(b.init());
  adamw oa(a.params(), {.weight_decay = 0.3f}, a.stream()), ob(b.params(), {.weight_decay = 0.3f}, b.stream());
  train_step(a, oa, tokens, targets);
  train_step(a, oa, targets, tokens);
  CHECK(oa.steps() == 2);
  CHECK(ob.steps() == 0);

  // a's state, through the host, into b (as a checkpoint written and restored).
  auto names = a.param_names();
  auto shapes = a.param_shapes();
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto v = get(a, gpt_cuda::buffer::master, names[i], shapes[i].numel());
    TROUPE_REQUIRE_OK(b.upload(gpt_cuda::buffer::master, names[i], v.data()));
    CHECK(get(b, gpt_cuda::buffer::master, names[i], shapes[i].numel()) == v);
  }
  auto st = oa.state();
  REQUIRE(st.tensors.size() == 2 * names.size());
  CHECK(st.tensors[0].value.device() == device::cpu());
  ob.load_state(st);
  CHECK(ob.steps() == 2);

  // The next step is the same: the same loss (so the bf16 compute copy was
  // refreshed from the uploaded master weights) and the same weights after.
  train_step(a, oa, tokens, targets);
  train_step(b, ob, tokens, targets);
  float va = NAN, vb = NAN;
  TROUPE_REQUIRE_OK(a.loss(va));
  TROUPE_REQUIRE_OK(b.loss(vb));
  REQUIRE(std::isfinite(va));
  CHECK(va == vb);
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    troupe::gpu::testing::check_same_run("master " + names[i],
                                         get(a, gpt_cuda::buffer::master, names[i], shapes[i].numel()),
                                         get(b, gpt_cuda::buffer::master, names[i], shapes[i].numel()));
  }
  std::vector<float> dummy(1);
  CHECK(!a.upload(gpt_cuda::buffer::master, "no.such.weight", dummy.data()).ok());
  CHECK(!a.download(gpt_cuda::buffer::grad, "no.such.weight", dummy.data()).ok());
}
