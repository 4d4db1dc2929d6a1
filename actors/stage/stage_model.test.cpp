// Where stages run (device: cpu, cuda, cuda:N against the devices there are),
// and the CPU stage model: inputs from a CUDA stage, and its parameters with an
// optimizer outside it, through a checkpoint.
#include "actors/stage/stage_model.hpp"

#include <cstring>
#include <random>

#include <doctest/doctest.h>

#include "ops/adamw.hpp"
#include "actors/builtin.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/graph_loader.hpp"
#include "runtime/tensor/testing_fake_device.hpp"

using namespace troupe;

namespace {

graph_spec load(const std::string& text) {
  register_builtin_actors();
  load_options o;
  o.check_corpus = false;
  auto r = load_graph_text(text, "g.yaml", o);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  return *r.graph;
}

/// Where each stage of `g` runs when the CUDA backend reports `devices`, as text.
std::string placement(const graph_spec& g, const caf::expected<int>& devices) {
  std::string out;
  for (const auto& a : g.actors)
    if (a.type == "pipeline_stage") {
      auto d = stage_device(a, g, devices);
      out += a.name + "=" + (d ? to_string(*d) : "error: " + error_message(d.error())) + "\n";
    }
  return out;
}

constexpr const char* four_stages = "model: {layers: 4, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\n"
                                    "train: {steps: 1}\n";

ops::gpt_config tiny_model() {
  ops::gpt_config c;
  c.layers = 2, c.d_model = 32, c.heads = 2, c.context = 8, c.vocab = 64, c.seed = 3;
  return c;
}

tensor_handle random_tokens(unsigned seed) {
  auto t = tensor_handle::empty({2, 8}, dtype::i32);
  std::mt19937 rng(seed);
  for (int i = 0; i < 16; ++i)
    t.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 64);
  return t;
}

/// f32 values that bf16 holds exactly, and the same values as a bf16 tensor.
std::pair<tensor_handle, tensor_handle> bf16_pair(shape_t shape, unsigned seed) {
  auto f = tensor_handle::empty(shape);
  auto b = tensor_handle::empty(shape, dtype::bf16);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  for (std::int64_t i = 0; i < f.numel(); ++i) {
    float v = dist(rng);
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof v);
    b.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(bits >> 16); // truncated: exact in both
    bits &= 0xffff0000u;
    std::memcpy(f.data<float>() + i, &bits, sizeof bits);
  }
  return {f, b};
}

std::vector<float> values(const tensor_handle& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

tensor_handle copy(const tensor_handle& t) {
  auto c = tensor_handle::empty(t.shape(), t.type());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

} // namespace

TEST_CASE("stages run on cpu, on the cuda:N they name, or on the next device of their node for plain cuda") {
  auto g = load(std::string{four_stages} + "pipeline: {stages: 4, device: cuda}\ncluster: {nodes: 2}\n"
                                           "actors:\n  - {name: s1, device: 'cuda:1'}\n  - {name: s2, device: cpu}\n");
  // Node 0 holds s0 and s1, node 1 holds s2 and s3: s3 is node 1's first CUDA stage.
  CHECK(placement(g, 2) == "s0=cuda:0\ns1=cuda:1\ns2=cpu\ns3=cuda:0\n");
  CHECK(placement(g, 1) == "s0=cuda:0\ns1=error: device cuda:1 requested but this machine has 1 CUDA device "
                           "(cuda:0 to cuda:0)\ns2=cpu\ns3=cuda:0\n");

  auto one_node = load(std::string{four_stages} + "pipeline: {stages: 4, device: cuda}\n");
  CHECK(placement(one_node, 4) == "s0=cuda:0\ns1=cuda:1\ns2=cuda:2\ns3=cuda:3\n");
  CHECK(placement(one_node, 3) == "s0=cuda:0\ns1=cuda:1\ns2=cuda:2\ns3=cuda:0\n"); // round robin
}

TEST_CASE("a CUDA stage without a usable GPU is refused with the reason the backend gave") {
  auto g = load(std::string{four_stages} + "pipeline: {stages: 2}\nactors:\n  - {name: s0, device: 'cuda:0'}\n");
  caf::expected<int> none = make_error(errc::spawn_failed, "no CUDA device is available (cudaGetDeviceCount: "
                                                           "cudaErrorNoDevice (no CUDA-capable device is detected))");
  CHECK(placement(g, none) == "s0=error: device cuda:0 requested but no CUDA device is available "
                              "(cudaGetDeviceCount: cudaErrorNoDevice (no CUDA-capable device is detected))\ns1=cpu\n");
  CHECK(placement(g, 0) == "s0=error: device cuda:0 requested but no CUDA device is available "
                           "(cudaGetDeviceCount: 0 devices)\ns1=cpu\n");
}

TEST_CASE("the CPU stage model takes bf16 activations and gradients, host or device, as the f32 they hold") {
  testing::fake_cuda_device();
  const auto cfg = tiny_model();
  stage_model_spec spec{cfg, 1, 2, device::cpu(), 2};
  auto a = make_stage_model(spec), b = make_stage_model(spec), c = make_stage_model(spec);
  CHECK(a->device() == device::cpu());
  CHECK(!a->is_first());
  CHECK(a->is_last());
  auto [x32, x16] = bf16_pair({2, 8, cfg.d_model}, 1);
  auto on_device = tensor_handle::empty(x16.shape(), dtype::bf16, device::cuda(0));
  std::memcpy(on_device.raw(), x16.raw(), x16.nbytes());
  auto fence = std::make_shared<testing::counting_fence>();
  auto targets = random_tokens(2);
  auto la = a->forward(0, {x32, nullptr}, targets);
  auto lb = b->forward(0, {x16, nullptr}, targets);
  auto lc = c->forward(0, {on_device, fence}, targets);
  CHECK(fence->waits == 1);
  REQUIRE(la.value.numel() == 1);
  CHECK(values(la.value) == values(lb.value));
  CHECK(values(la.value) == values(lc.value));
  CHECK(a->in_flight() == 1);
  auto one = tensor_handle::empty({1});
  one.data<float>()[0] = 0.5f;
  auto ga = a->backward(0, {one, nullptr}), gb = b->backward(0, {one, nullptr});
  CHECK(a->in_flight() == 0);
  CHECK(ga.value.type() == dtype::f32);
  CHECK(values(ga.value) == values(gb.value));
  CHECK(a->grad_sq_norm() == b->grad_sq_norm());
  CHECK(a->grad_sq_norm() > 0);

  // And a bf16 gradient into the first chunk.
  stage_model_spec first{cfg, 0, 1, device::cpu(), 2};
  auto f32_in = make_stage_model(first), bf16_in = make_stage_model(first);
  auto tokens = random_tokens(4);
  auto [g32, g16] = bf16_pair({2, 8, cfg.d_model}, 5);
  for (auto* m : {f32_in.get(), bf16_in.get()})
    m->forward(3, {tokens, nullptr}, {});
  CHECK(!f32_in->backward(3, {g32, nullptr}).value.defined()); // nothing before the first chunk
  bf16_in->backward(3, {g16, nullptr});
  CHECK(f32_in->grad_sq_norm() == bf16_in->grad_sq_norm());
}

TEST_CASE("a CPU stage model's parameters and its optimizer's state load into fresh ones, which then train exactly "
          "as the originals") {
  const auto cfg = tiny_model();
  stage_model_spec spec{cfg, 0, 2, device::cpu(), 2};
  auto a = make_stage_model(spec), b = make_stage_model(spec);
  ops::adamw oa(a->params(), {.weight_decay = 0.2f}), ob(b->params(), {.weight_decay = 0.2f});
  auto tokens = random_tokens(7), targets = random_tokens(8);
  auto train = [&](stage_model& m, ops::optimizer& opt) {
    m.zero_grads();
    auto loss = m.forward(0, {tokens, nullptr}, targets);
    m.backward(0, {});
    opt.step(m.params(), m.grads(), 1e-2f);
    m.params_updated();
    return loss.value.data<float>()[0];
  };
  train(*a, oa);
  train(*a, oa);
  auto layout = a->param_layout();
  auto host = a->host_params();
  REQUIRE(host.size() == layout.size());
  REQUIRE(a->params().size() == layout.size());
  REQUIRE(a->grads().size() == layout.size());
  std::vector<tensor_handle> ps;
  for (std::size_t i = 0; i < layout.size(); ++i) {
    CHECK(host[i].name == layout[i].name);
    CHECK(a->grads()[i].name == layout[i].name);
    CHECK(host[i].value.shape() == layout[i].shape);
    ps.push_back(copy(host[i].value));
  }
  auto st = oa.state();
  CHECK(st.steps == 2);
  REQUIRE(st.tensors.size() == 2 * layout.size());
  for (auto& t : st.tensors)
    t.value = copy(t.value);
  b->load_params(ps);
  ob.load_state(st);
  CHECK(ob.steps() == 2);
  CHECK(train(*a, oa) == train(*b, ob));
  auto ha = a->host_params(), hb = b->host_params();
  for (std::size_t i = 0; i < layout.size(); ++i) {
    CAPTURE(layout[i].name);
    CHECK(values(ha[i].value) == values(hb[i].value));
  }
  ps.pop_back();
  CHECK_THROWS_AS(b->load_params(ps), std::invalid_argument);
}
