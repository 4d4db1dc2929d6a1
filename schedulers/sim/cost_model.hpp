// Cost models for the simulated clock: what a device can do (peak FLOP/s,
// memory bandwidth and capacity, efficiency per op kind), what a link costs,
// the FLOPs of a GPT layer from its shape, and what collectives send.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schedulers/expected.hpp"

namespace troupe::sched {

/// How well a device's kernels reach its peak, per kind of op (0, 1].
struct op_efficiency {
  double matmul = 1;      ///< GEMMs: the 24·b·s·h² of a layer and the logits
  double attention = 1;   ///< QKᵀ and softmax·V: the 4·b·s²·h of a layer
  double elementwise = 1; ///< memory-bound ops (layer norm, GELU, softmax, dropout), as a share of memory bandwidth
  /// The output head (final norm, logits, softmax and loss) on its 2·b·s·h·V
  /// FLOPs; 0: the matmul efficiency (the presets count only the logits GEMM).
  double head = 0;
};

/// One device: peak dense FLOP/s per dtype, memory bandwidth and capacity.
struct device_spec {
  std::string name;
  double peak_f32 = 0;         ///< FLOP/s
  double peak_tf32 = 0;        ///< FLOP/s
  double peak_bf16 = 0;        ///< FLOP/s (f16 is the same on these parts)
  double memory_bandwidth = 0; ///< bytes/s
  double memory_bytes = 0;     ///< capacity
  op_efficiency efficiency;
  /// A layer's backward over its forward: 2 for twice the FLOPs (the presets);
  /// measured kernels differ (a calibrated CPU's is what it timed).
  double backward_ratio = 2;
  /// The embedding lookup's forward and backward, seconds per token per d_model
  /// value (the first stage's extra work; 0 in the presets, small on GPUs).
  double embedding_forward = 0, embedding_backward = 0;
  /// Seconds a stage actor spends per action besides its op: taking the
  /// message, asking its policy, sending the result (a CPU actor's overhead).
  double action_overhead = 0;
  /// Seconds of the optimizer step per parameter, once per step per stage.
  double optimizer_per_param = 0;
  /// Cores that one node's stage actors share, as actors on a host's CPU do:
  /// 0 = each stage actor has its own device (GPUs). With S actors busy on
  /// C < S cores each runs at C/S of its speed (processor sharing).
  int cores = 0;
  /// How much longer an op takes while every one of `cores` computes at once
  /// than alone (0.05: 5%), from the caches and memory bandwidth they share;
  /// linear in the busy cores between one and all.
  double shared_slowdown = 0;
  /// Peak FLOP/s for `dtype` ("f32", "tf32", "bf16", "f16").
  double peak(std::string_view dtype) const;
};

/// The built-in devices: a100_80gb, h100_sxm, h200 (datasheet figures in cost_model.cpp).
const std::vector<device_spec>& device_presets();
/// Their names, in that order.
std::vector<std::string> device_preset_names();
/// The preset called `name`; fails listing the known names.
expected<device_spec> device_preset(std::string_view name);

/// A link: a message of n bytes takes latency + n / bandwidth. Bandwidth 0 is unlimited.
struct link_spec {
  double latency = 0;   ///< seconds
  double bandwidth = 0; ///< bytes/s, per direction, per device
  double time(double bytes) const { return latency + (bandwidth > 0 ? bytes / bandwidth : 0.0); }
};

/// Links per level: devices of one node (NVLink), between nodes of one site
/// (InfiniBand, one NIC per device), and between sites (wide area). Devices are
/// numbered node by node and nodes site by site.
struct network_spec {
  int devices_per_node = 8;
  link_spec within_node{};
  link_spec between_nodes{};
  link_spec wide_area{};
  int nodes_per_site = 0; ///< 0: one site holds every node
  std::int64_t node_of(std::int64_t device) const { return device / std::max(devices_per_node, 1); }
  std::int64_t site_of(std::int64_t device) const { return nodes_per_site > 0 ? node_of(device) / nodes_per_site : 0; }
  /// The link between two devices: the level of the first boundary they cross.
  const link_spec& between(std::int64_t a, std::int64_t b) const {
    return site_of(a) != site_of(b) ? wide_area : node_of(a) != node_of(b) ? between_nodes : within_node;
  }
};

/// The default network of a preset's node: a DGX/HGX box of 8 devices.
network_spec default_network(std::string_view device);

/// Ring all-reduce of `bytes` over `n` ranks on links of `link`: each rank
/// sends 2(n-1)/n of the bytes, in 2(n-1) steps each paying the latency:
/// 2(n-1)/n · bytes / bandwidth + 2(n-1) · latency (Patarasuk and Yuan 2009;
/// REFERENCES.md, ZeRO). 0 for n = 1.
double ring_allreduce_time(int n, double bytes, const link_spec& link);

/// The GPT of ops/ (ops/gpt.hpp) as the FLOP formulas see it.
struct transformer_shape {
  int layers = 0;     ///< l
  int hidden = 0;     ///< h
  int heads = 0;      ///< a
  int sequence = 0;   ///< s
  int vocab = 0;      ///< V
  int microbatch = 1; ///< b: sequences per microbatch
  int kv_hidden = 0;  ///< the width of k and of v (grouped-query attention: h·kv_heads/a); 0: h
  int ffn = 0;        ///< the MLP's hidden width f; 0: 4h
  bool gated = false; ///< Llama's block: a gated MLP (gate, up and down), RMSNorm, no biases, no positions
  bool tied = false;  ///< the head reuses the embedding (counted once)
};

/// Weights of one layer's matrix products: h·(2h + 2·kv) for q, k, v and the
/// projection, plus 2·h·f for GPT-2's MLP or 3·h·f for a gated one (12h² for GPT-2).
double layer_matmul_params(const transformer_shape& m);

/// Forward FLOPs of one layer for one microbatch: 2·b·s·layer_matmul_params
/// (24·b·s·h² for GPT-2: QKV, projection and the 4h MLP, 2 FLOPs per
/// multiply-add) + 4·b·s²·h (QKᵀ and attention over values) (Narayanan et al.
/// 2021, §5.1). Split as matmul and attention.
struct layer_flops {
  double matmul = 0;
  double attention = 0;
  double total() const { return matmul + attention; }
};
layer_flops layer_forward_flops(const transformer_shape& m);
/// Forward FLOPs of the output head (logits): 2·b·s·h·V.
double head_forward_flops(const transformer_shape& m);
/// Bytes of a layer's activations for one microbatch on each of `t` tensor-
/// parallel devices, 2-byte values: s·b·h·(10 + 24/t + 5·a·s/(h·t)) (Korthikanti
/// et al. 2022, eqs. 1 and 2; 34 + 5as/h at t = 1). Used both as the memory a
/// layer holds and as the bytes its memory-bound ops move.
double layer_activation_bytes(const transformer_shape& m, int t = 1);

/// FLOPs of one iteration of `batch` sequences (B = b · microbatches · replicas):
/// with full recomputation 96·B·s·l·h²(1 + s/6h + V/16lh) (Narayanan et al.
/// 2021, eq. 3: what Megatron's TFLOP/s count); without, 72·B·s·l·h²(1 + s/6h + V/12lh)
/// (the model FLOPs of MFU). Both are 4 (or 3) forwards of every layer plus 3 of
/// the head, which is how a gated (Llama) shape is counted.
double iteration_flops(const transformer_shape& m, std::int64_t batch, bool recompute);

/// Parameters: 12·l·h²·(1 + 13/12h + (V + s)/12lh) (Narayanan et al. 2021, §5.1);
/// a gated (Llama) model: its blocks, the embedding, the final norm and, untied, the head.
double parameter_count(const transformer_shape& m);
/// Parameters of `layers` blocks (12h² + 13h each for GPT-2; a gated block's
/// products and its two norms), plus the embeddings when `embedding` (Llama's has no positions).
double stage_parameters(const transformer_shape& m, int layers, bool embedding);

/// What a stage's chunk costs, in seconds, per microbatch, on `t` devices of one node.
struct chunk_costs {
  double forward = 0;
  double backward = 0; ///< B = I + W (with recomputation: includes the recomputed forward)
  /// W when backward is split (I = backward - weight): half of the backward
  /// without recomputation, so F = I = W on one device, as Qi et al. 2023 assume.
  double weight = 0;
};

/// The settings a chunk's cost depends on.
struct cost_settings {
  device_spec device;
  network_spec network;
  std::string dtype = "bf16";
  int tensor_parallel = 1; ///< t: the stage's layers are split over t devices of one node
  bool recompute = false;  ///< full activation recomputation: the backward runs the forward again
  bool count_head = true;  ///< the loss stage also runs the output head (logits)
};

/// A layer's forward on t devices: FLOPs / t at peak x efficiency, its
/// memory-bound ops, and the tensor-parallel all-reduces of b·s·h values (two
/// forward, two backward: Shoeybi et al. 2019, Fig. 4) on the node's links;
/// its backward the device's backward_ratio of that compute. `head` adds the
/// output head, `embedding` the embedding lookup (device.embedding_*).
chunk_costs costs_of(const transformer_shape& m, const cost_settings& s, int layers, bool head, bool embedding = false);

/// The time of one tensor-parallel all-reduce of a layer's output (0 for t = 1).
double tensor_parallel_allreduce(const transformer_shape& m, const cost_settings& s);

} // namespace troupe::sched
