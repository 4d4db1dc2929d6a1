// Device presets from their datasheets, link defaults, the GPT's FLOP formulas
// and what a stage's chunk costs under tensor parallelism.
#include "schedulers/sim/cost_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace troupe::sched {

namespace {

constexpr double tera = 1e12, giga = 1e9;

// Dense (no 2:4 sparsity) peaks. Efficiencies are one set for every preset,
// fitted once to Megatron-LM 2021's Table 1 on A100s (examples/sim/README.md);
// attention kernels and memory-bound ops reach less of their peak than GEMMs.
constexpr op_efficiency fitted{.matmul = 0.62, .attention = 0.35, .elementwise = 0.7};

std::vector<device_spec> make_presets() {
  return {
    // NVIDIA A100 Tensor Core GPU datasheet (2021), SXM 80GB column: FP32 19.5
    // TFLOPS, TF32 156, BF16/FP16 312 (dense; the sparse figures are twice),
    // 80 GB HBM2e at 2,039 GB/s.
    {"a100_80gb", 19.5 * tera, 156 * tera, 312 * tera, 2039 * giga, 80 * giga, fitted},
    // NVIDIA H100 Tensor Core GPU datasheet, SXM column: FP32 67 TFLOPS, TF32
    // 989 and BF16 1,979 with sparsity (494.7 and 989.4 dense), 80 GB HBM3 at 3.35 TB/s.
    {"h100_sxm", 67 * tera, 494.7 * tera, 989.4 * tera, 3350 * giga, 80 * giga, fitted},
    // NVIDIA H200 Tensor Core GPU datasheet, SXM column: the H100's compute,
    // 141 GB HBM3e at 4.8 TB/s.
    {"h200", 67 * tera, 494.7 * tera, 989.4 * tera, 4800 * giga, 141 * giga, fitted},
  };
}

} // namespace

double device_spec::peak(std::string_view dtype) const {
  if (dtype == "f32")
    return peak_f32;
  if (dtype == "tf32")
    return peak_tf32;
  return peak_bf16;
}

const std::vector<device_spec>& device_presets() {
  static const std::vector<device_spec> presets = make_presets();
  return presets;
}

std::vector<std::string> device_preset_names() {
  std::vector<std::string> names;
  for (const auto& d : device_presets())
    names.push_back(d.name);
  return names;
}

expected<device_spec> device_preset(std::string_view name) {
  for (const auto& d : device_presets())
    if (d.name == name)
      return d;
  return make_sched_error(fmt::format("unknown device '{}' (known: {})", name, fmt::join(device_preset_names(), ", ")));
}

network_spec default_network(std::string_view device) {
  network_spec n;
  n.devices_per_node = 8;
  // Latencies are per message (per ring step): a few microseconds, as NCCL's
  // tuning tables assume for NVLink and InfiniBand; not datasheet figures.
  if (device == "a100_80gb") {
    // DGX A100: third-generation NVLink, 600 GB/s per GPU both directions
    // together (300 each way); eight 200 Gb/s HDR InfiniBand HCAs, one per GPU (25 GB/s).
    n.within_node = {5e-6, 300 * giga};
    n.between_nodes = {10e-6, 25 * giga};
  } else {
    // DGX/HGX H100 and H200: fourth-generation NVLink, 900 GB/s per GPU (450
    // each way); eight 400 Gb/s NDR ConnectX-7 ports, one per GPU (50 GB/s).
    n.within_node = {5e-6, 450 * giga};
    n.between_nodes = {10e-6, 50 * giga};
  }
  // Between sites (used only with nodes_per_site): an assumed 10 Gb/s per
  // device and 30 ms one way, a cross-continent path; not a measured figure.
  n.wide_area = {30e-3, 1.25 * giga};
  return n;
}

double ring_allreduce_time(int n, double bytes, const link_spec& link) {
  if (n <= 1)
    return 0;
  double steps = 2.0 * (n - 1);
  return steps / n * (link.bandwidth > 0 ? bytes / link.bandwidth : 0.0) + steps * link.latency;
}

double layer_matmul_params(const transformer_shape& m) {
  double h = m.hidden, kv = m.kv_hidden > 0 ? m.kv_hidden : h, f = m.ffn > 0 ? m.ffn : 4 * h;
  return h * (2 * h + 2 * kv) + (m.gated ? 3 : 2) * h * f;
}

layer_flops layer_forward_flops(const transformer_shape& m) {
  double b = m.microbatch, s = m.sequence, h = m.hidden;
  return {2 * b * s * layer_matmul_params(m), 4 * b * s * s * h};
}

double head_forward_flops(const transformer_shape& m) {
  return 2.0 * m.microbatch * m.sequence * m.hidden * m.vocab;
}

double layer_activation_bytes(const transformer_shape& m, int t) {
  double b = m.microbatch, s = m.sequence, h = m.hidden, a = m.heads;
  return s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
}

double iteration_flops(const transformer_shape& m, std::int64_t batch, bool recompute) {
  if (!m.gated) {
    double B = static_cast<double>(batch), s = m.sequence, l = m.layers, h = m.hidden, V = m.vocab;
    if (recompute)
      return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  }
  // The same count for any block: 4 (or 3) forwards of every layer and 3 of the head, per sequence.
  auto one = m;
  one.microbatch = 1;
  return static_cast<double>(batch) *
         ((recompute ? 4 : 3) * m.layers * layer_forward_flops(one).total() + 3 * head_forward_flops(one));
}

double parameter_count(const transformer_shape& m) {
  double l = m.layers, h = m.hidden, V = m.vocab, s = m.sequence;
  if (m.gated)
    return stage_parameters(m, m.layers, true) + h + (m.tied ? 0.0 : V * h);
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

double stage_parameters(const transformer_shape& m, int layers, bool embedding) {
  double h = m.hidden, V = m.vocab;
  if (m.gated)
    return layers * (layer_matmul_params(m) + 2 * h) + (embedding ? V * h : 0.0);
  return layers * (12 * h * h + 13 * h) + (embedding ? (V + m.sequence) * h : 0.0);
}

double tensor_parallel_allreduce(const transformer_shape& m, const cost_settings& s) {
  // The layer's output, b·s·h values of 2 bytes, summed over the t devices.
  double bytes = 2.0 * m.microbatch * m.sequence * m.hidden;
  return ring_allreduce_time(s.tensor_parallel, bytes, s.network.within_node);
}

chunk_costs costs_of(const transformer_shape& m, const cost_settings& s, int layers, bool head, bool embedding) {
  const auto& d = s.device;
  double t = s.tensor_parallel, peak = d.peak(s.dtype);
  auto f = layer_forward_flops(m);
  double compute = f.matmul / t / (peak * d.efficiency.matmul) + f.attention / t / (peak * d.efficiency.attention) +
                   layer_activation_bytes(m, s.tensor_parallel) / (d.memory_bandwidth * d.efficiency.elementwise);
  double ar = tensor_parallel_allreduce(m, s);
  // Megatron's tensor-parallel layer: two all-reduces forward (after attention
  // and after the MLP) and two backward (their conjugates).
  double fwd = compute + 2 * ar, bwd = d.backward_ratio * compute + 2 * ar;
  chunk_costs c{layers * fwd, layers * bwd, layers * bwd / 2};
  if (s.recompute)
    c.backward += layers * fwd;
  if (head && s.count_head) {
    double efficiency = d.efficiency.head > 0 ? d.efficiency.head : d.efficiency.matmul;
    double logits = head_forward_flops(m) / t / (peak * efficiency);
    c.forward += logits;
    c.backward += d.backward_ratio * logits;
    c.weight += d.backward_ratio * logits / 2;
  }
  if (embedding) {
    double values = static_cast<double>(m.microbatch) * m.sequence * m.hidden / t;
    c.forward += values * d.embedding_forward;
    c.backward += values * d.embedding_backward;
    c.weight += values * d.embedding_backward; // all of it is the table's gradient
  }
  return c;
}

} // namespace troupe::sched
