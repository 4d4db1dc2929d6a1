// The CUDA stage model against the CPU one: chains of chunks on the GPU, on the
// CPU and mixed give the same loss and gradient norm to bf16 tolerance, outputs
// handed on with fences stay intact while the producer goes on, and parameters
// with their optimizer's state move between devices.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "actors/stage/stage_model.hpp"
#include "ops/adamw.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe;

namespace {

#define REQUIRE_GPU_OR_SKIP()                                                                                          \
  do {                                                                                                                 \
    if (!gpu::cuda_available()) {                                                                                      \
      MESSAGE("no CUDA device: GPU check skipped");                                                                    \
      return;                                                                                                          \
    }                                                                                                                  \
  } while (0)

constexpr int batch = 4, microbatches = 3;

ops::gpt_config tiny() {
  ops::gpt_config c;
  c.layers = 4, c.d_model = 64, c.heads = 2, c.context = 32, c.vocab = 256, c.seed = 9;
  return c;
}

tensor_handle random_tokens(unsigned seed) {
  auto t = tensor_handle::empty({batch, tiny().context}, dtype::i32);
  std::mt19937 rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 256);
  return t;
}

std::unique_ptr<stage_model> make(int begin, int end, troupe::device d) {
  return make_stage_model({tiny(), begin, end, d, batch});
}

struct chain_result {
  std::vector<float> losses;
  float eval_loss = 0;
  double grad_sq = 0;
};

/// One training step of `microbatches` through front then back, GPipe order, every
/// tensor handed on at once (no host wait between the chunks), then an evaluation.
chain_result run_chain(stage_model& front, stage_model& back) {
  chain_result r;
  std::vector<stage_tensor> acts;
  for (int mb = 0; mb < microbatches; ++mb)
    acts.push_back(front.forward(mb, {random_tokens(10 + mb), nullptr}, {}));
  CHECK(front.in_flight() == microbatches);
  for (int mb = 0; mb < microbatches; ++mb)
    r.losses.push_back(
      back.forward(mb, acts[static_cast<std::size_t>(mb)], random_tokens(20 + mb)).value.data<float>()[0]);
  auto scale = tensor_handle::empty({1});
  scale.data<float>()[0] = 1.0f / microbatches;
  for (int mb = microbatches - 1; mb >= 0; --mb) {
    auto g = back.backward(mb, {scale, nullptr});
    CHECK(!front.backward(mb, g).value.defined());
  }
  CHECK(front.in_flight() == 0);
  CHECK(back.in_flight() == 0);
  r.grad_sq = front.grad_sq_norm() + back.grad_sq_norm();
  auto a = front.evaluate({random_tokens(30), nullptr}, {});
  r.eval_loss = back.evaluate(a, random_tokens(31)).value.data<float>()[0];
  return r;
}

void check_close(const chain_result& got, const chain_result& ref, const char* what) {
  CAPTURE(what);
  REQUIRE(got.losses.size() == ref.losses.size());
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    CAPTURE(i);
    REQUIRE(std::isfinite(got.losses[i]));
    CHECK(std::abs(got.losses[i] - ref.losses[i]) <= 2e-2 * std::abs(ref.losses[i]));
  }
  CHECK(std::abs(got.eval_loss - ref.eval_loss) <= 2e-2 * std::abs(ref.eval_loss));
  CHECK(std::abs(got.grad_sq - ref.grad_sq) <= 1e-1 * ref.grad_sq); // a sum of squares: twice the norm's error
  MESSAGE(what << ": loss " << got.losses[0] << " (cpu " << ref.losses[0] << "), eval " << got.eval_loss << " (cpu "
               << ref.eval_loss << "), grad_sq " << got.grad_sq << " (cpu " << ref.grad_sq << ")");
}

/// A host f32 tensor's values (the masters and AdamW moments a model hands out).
std::vector<float> floats_of(const tensor_handle& t) {
  REQUIRE(t.type() == dtype::f32);
  REQUIRE(t.device() == device::cpu());
  const float* p = t.data<float>();
  return {p, p + t.numel()};
}

std::vector<std::uint16_t> download_bf16(const tensor_handle& t) {
  auto h = copy_to_host(t);
  std::vector<std::uint16_t> v(static_cast<std::size_t>(t.numel()));
  std::memcpy(v.data(), h.raw(), h.nbytes());
  return v;
}

} // namespace

TEST_CASE("GPU, CPU and mixed chains of stage models agree to bf16 tolerance") {
  REQUIRE_GPU_OR_SKIP();
  const auto gpu0 = device::cuda(0);
  auto cpu_front = make(0, 2, device::cpu()), cpu_back = make(2, 4, device::cpu());
  auto ref = run_chain(*cpu_front, *cpu_back);

  auto gpu_front = make(0, 2, gpu0), gpu_back = make(2, 4, gpu0);
  CHECK(gpu_front->device() == gpu0);
  CHECK(gpu_front->is_first());
  CHECK(gpu_back->is_last());
  check_close(run_chain(*gpu_front, *gpu_back), ref, "cuda -> cuda");

  auto cpu_to_gpu_front = make(0, 2, device::cpu()), cpu_to_gpu_back = make(2, 4, gpu0);
  check_close(run_chain(*cpu_to_gpu_front, *cpu_to_gpu_back), ref, "cpu -> cuda (f32 activations)");

  auto gpu_to_cpu_front = make(0, 2, gpu0), gpu_to_cpu_back = make(2, 4, device::cpu());
  check_close(run_chain(*gpu_to_cpu_front, *gpu_to_cpu_back), ref, "cuda -> cpu (bf16 device activations)");
}

TEST_CASE("an output handed on stays intact while its producer runs more microbatches") {
  REQUIRE_GPU_OR_SKIP();
  auto front = make(0, 2, device::cuda(0));
  auto first = front->forward(0, {random_tokens(1), nullptr}, {});
  REQUIRE(first.ready);
  REQUIRE(first.value.device().is_cuda());
  first.ready->wait();
  auto expected = download_bf16(first.value);
  // The model's own buffers are reused by these; the handed-on copy is not.
  for (int mb = 1; mb < 6; ++mb) {
    auto out = front->forward(mb, {random_tokens(1 + unsigned(mb)), nullptr}, {});
    front->backward(mb, {tensor_handle::zeros(out.value.shape()), nullptr}); // host f32 zeros: converted
    auto e = front->evaluate({random_tokens(50 + unsigned(mb)), nullptr}, {});
    CHECK(!e.value.same_bytes(first.value));
  }
  CHECK(download_bf16(first.value) == expected);
}

TEST_CASE("a GPU stage model's parameters and its AdamW state move through host tensors to another GPU or a CPU "
          "model") {
  REQUIRE_GPU_OR_SKIP();
  auto a = make(2, 4, device::cuda(0)), b = make(2, 4, device::cuda(0)), c = make(2, 4, device::cpu());
  ops::adamw oa(a->params(), {}, a->stream()), ob(b->params(), {}, b->stream()), oc(c->params());
  for (const auto& p : a->params())
    CHECK(p.value.device() == device::cuda(0));
  auto act = make(0, 2, device::cpu())->evaluate({random_tokens(3), nullptr}, {});
  auto train = [&](stage_model& m, ops::optimizer& opt) {
    m.zero_grads();
    auto loss = m.forward(0, act, random_tokens(4)).value.data<float>()[0];
    m.backward(0, {});
    opt.step(m.params(), m.grads(), 1e-3f);
    m.params_updated();
    return loss;
  };
  auto l0 = train(*a, oa);
  auto l1 = train(*a, oa);
  CHECK(l1 < l0 + 0.1f); // the device optimizer moved the weights the bf16 products read
  auto host = a->host_params();
  REQUIRE(host.size() == a->param_layout().size());
  std::vector<tensor_handle> ps;
  for (const auto& p : host) {
    CHECK(p.value.device() == device::cpu());
    ps.push_back(p.value);
  }
  auto st = oa.state();
  CHECK(st.steps == 2);
  REQUIRE(st.tensors.size() == 2 * host.size());
  for (const auto& t : st.tensors)
    CHECK(t.value.device() == device::cpu());
  b->load_params(ps);
  ob.load_state(st);
  c->load_params(ps); // a GPU checkpoint resumes on the CPU
  oc.load_state(st);
  CHECK(train(*a, oa) == train(*b, ob));
  auto ha = a->host_params(), hb = b->host_params(), hc = c->host_params();
  for (std::size_t i = 0; i < ha.size(); ++i) {
    CAPTURE(ha[i].name);
    troupe::gpu::testing::check_same_run(ha[i].name, floats_of(ha[i].value), floats_of(hb[i].value));
    CHECK(hc[i].name == ha[i].name);
  }
  auto sa = oa.state(), sb = ob.state();
  for (std::size_t i = 0; i < sa.tensors.size(); ++i)
    troupe::gpu::testing::check_same_run(sa.tensors[i].name, floats_of(sa.tensors[i].value),
                                         floats_of(sb.tensors[i].value));
  CHECK(oc.steps() == 2);
}
