// The cost model's formulas: a layer's FLOPs from its shape against Megatron's
// iteration count, parameters, ring all-reduces and tensor-parallel costs.
#include "schedulers/sim/cost_model.hpp"

#include <doctest/doctest.h>

using namespace troupe::sched;

namespace {

// GPT-3 175B as Narayanan et al. 2021 train it: l 96, h 12288, a 96, s 2048, V 51200.
transformer_shape gpt3(int b = 1) {
  return {96, 12288, 96, 2048, 51200, b};
}

} // namespace

TEST_CASE("A layer's forward FLOPs are 24bsh^2 + 4bs^2h, counted by hand") {
  transformer_shape m{2, 64, 4, 32, 256, 3};
  auto f = layer_forward_flops(m);
  // QKV 3·(2bsh²), projection 2bsh², MLP 2·(2bs·h·4h); QKᵀ and AV 2·(2bs²h).
  double b = 3, s = 32, h = 64;
  CHECK(f.matmul == doctest::Approx(2 * b * s * h * 3 * h + 2 * b * s * h * h + 2 * (2 * b * s * h * 4 * h)));
  CHECK(f.attention == doctest::Approx(2 * (2 * b * s * s * h)));
  CHECK(head_forward_flops(m) == doctest::Approx(2 * b * s * h * 256));
}

TEST_CASE("An iteration's layers and head add up to Megatron's 96 B s l h^2 (1 + s/6h + V/16lh)") {
  for (auto m :
       {gpt3(), transformer_shape{128, 25600, 160, 2048, 51200, 1}, transformer_shape{4, 128, 4, 64, 256, 12}}) {
    const std::int64_t batch = 1536;
    transformer_shape one = m;
    one.microbatch = 1;
    double layer = layer_forward_flops(one).total(), head = head_forward_flops(one);
    // Recomputing: forward, recomputed forward and a backward of two forwards per layer; the head runs 3.
    CHECK(iteration_flops(m, batch, true) == doctest::Approx(batch * (4 * m.layers * layer + 3 * head)));
    CHECK(iteration_flops(m, batch, false) == doctest::Approx(batch * (3 * m.layers * layer + 3 * head)));
  }
}

TEST_CASE("Parameters follow 12lh^2(1 + 13/12h + (V + s)/12lh): GPT-3 is 175B, Megatron's largest 1008B") {
  CHECK(parameter_count(gpt3()) / 1e9 == doctest::Approx(174.6).epsilon(0.002));
  CHECK(parameter_count({128, 25600, 160, 2048, 51200, 1}) / 1e9 == doctest::Approx(1008.0).epsilon(0.001));
  auto m = gpt3();
  CHECK(stage_parameters(m, m.layers, true) == doctest::Approx(parameter_count(m)));
}

TEST_CASE("A Llama shape counts its grouped-query k and v and its gated MLP: Llama 2's 7B and 70B to the parameter") {
  // Touvron et al. 2023 (Llama 2), Hugging Face configs: 7B l 32, h 4096, 32 heads
  // (k, v full width), f 11008; 70B l 80, h 8192, 8 of 64 heads for k and v
  // (width 1024), f 28672; V 32000, untied head. 6,738,415,616 and 68,976,648,192.
  transformer_shape seven{32, 4096, 32, 4096, 32000, 1, 4096, 11008, true};
  transformer_shape seventy{80, 8192, 64, 4096, 32000, 1, 1024, 28672, true};
  CHECK(parameter_count(seven) == 6'738'415'616.0);
  CHECK(parameter_count(seventy) == 68'976'648'192.0);
  // Forward FLOPs: two per weight of the products, per token, and the same attention as GPT-2.
  double b = 1, s = 4096, h = 8192;
  auto f = layer_forward_flops(seventy);
  CHECK(f.matmul == doctest::Approx(2 * b * s * (h * (2 * h + 2 * 1024) + 3 * h * 28672)));
  CHECK(f.attention == doctest::Approx(4 * b * s * s * h));
  // The defaults are GPT-2's block: 12h² weights, 24bsh² FLOPs.
  transformer_shape gpt{2, 64, 4, 32, 256, 3};
  CHECK(layer_matmul_params(gpt) == 12.0 * 64 * 64);
  CHECK(iteration_flops(seven, 8, false) ==
        doctest::Approx(8 * (3 * 32 * layer_forward_flops({32, 4096, 32, 4096, 32000, 1, 4096, 11008, true}).total() +
                             3 * head_forward_flops(seven))));
}

TEST_CASE("A ring all-reduce costs 2(n-1)/n bytes/bandwidth + 2(n-1) latencies") {
  link_spec ib{1e-5, 25e9};
  CHECK(ring_allreduce_time(4, 1e9, ib) == doctest::Approx(1.5 * 1e9 / 25e9 + 6 * 1e-5));
  CHECK(ring_allreduce_time(625, 2e9, ib) == doctest::Approx(2.0 * 624 / 625 * 2e9 / 25e9 + 2 * 624 * 1e-5));
  CHECK(ring_allreduce_time(1, 1e9, ib) == 0);
  CHECK(ring_allreduce_time(8, 1e9, link_spec{}) == 0);
}

TEST_CASE("Tensor parallelism divides a layer's compute by t and adds four all-reduces of b s h values") {
  auto dev = device_preset("a100_80gb");
  REQUIRE(dev);
  cost_settings one{*dev, default_network("a100_80gb"), "bf16", 1, false, false};
  cost_settings eight = one;
  eight.tensor_parallel = 8;
  auto m = gpt3();
  auto c1 = costs_of(m, one, 1, false), c8 = costs_of(m, eight, 1, false);
  double ar = tensor_parallel_allreduce(m, eight);
  CHECK(ar == doctest::Approx(2.0 * 7 / 8 * (2.0 * 2048 * 12288) / 300e9 + 14 * 5e-6));
  double compute8 = c8.forward - 2 * ar;
  // The GEMMs and attention split by t; the memory-bound part by its activations (Korthikanti et al.).
  CHECK(compute8 < c1.forward / 7);
  CHECK(compute8 > c1.forward / 8);
  CHECK(c8.backward == doctest::Approx(2 * compute8 + 2 * ar));
  auto recompute = eight;
  recompute.recompute = true;
  CHECK(costs_of(m, recompute, 2, false).backward == doctest::Approx(2 * (c8.backward + c8.forward)));
}

TEST_CASE("Presets carry their datasheet peaks and unknown devices list the known ones") {
  CHECK(device_preset("a100_80gb")->peak("bf16") == 312e12);
  CHECK(device_preset("h100_sxm")->peak("bf16") == doctest::Approx(989.4e12));
  CHECK(device_preset("h200")->memory_bytes == 141e9);
  auto bad = device_preset("a100");
  REQUIRE(!bad);
  CHECK(bad.error().message.find("known: a100_80gb, h100_sxm, h200") != std::string::npos);
}

TEST_CASE("A calibrated device's backward ratio, head efficiency and embedding enter a chunk's costs") {
  transformer_shape m{4, 128, 4, 64, 256, 12};
  device_spec d{"cpu", 1e11, 1e11, 1e11, 2e10, 1e10, {1, 1, 1}};
  cost_settings s{d, network_spec{}, "f32", 1, false, true};
  auto plain = costs_of(m, s, 1, false);
  CHECK(plain.backward == doctest::Approx(2 * plain.forward)); // the presets' 2 x forward
  s.device.backward_ratio = 2.5;
  CHECK(costs_of(m, s, 1, false).backward == doctest::Approx(2.5 * plain.forward));
  // The head at its own efficiency: half the rate is twice the time.
  s.device.backward_ratio = 2;
  double logits = costs_of(m, s, 1, true).forward - plain.forward;
  CHECK(logits == doctest::Approx(head_forward_flops(m) / 1e11));
  s.device.efficiency.head = 0.5;
  CHECK(costs_of(m, s, 1, true).forward - plain.forward == doctest::Approx(2 * logits));
  // The embedding: seconds per token per d_model value, forward and backward (all of it W).
  s.device.embedding_forward = 1e-9, s.device.embedding_backward = 3e-9;
  auto first = costs_of(m, s, 1, false, true);
  double values = 12.0 * 64 * 128;
  CHECK(first.forward - plain.forward == doctest::Approx(values * 1e-9));
  CHECK(first.backward - plain.backward == doctest::Approx(values * 3e-9));
  CHECK(first.weight - plain.weight == doctest::Approx(values * 3e-9));
}
