// The graph file's `local_update:` section as typed values: which local-update
// method replaces the every-step all-reduce, and its settings (#13).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace troupe {

/// The outer optimizer of DiLoCo-style methods: torch's SGD over the averaged
/// pseudo-gradient. Defaults are the DiLoCo paper's (Douillard et al. 2023,
/// arXiv 2311.08105, §3: lr 0.7, Nesterov momentum 0.9).
struct outer_optimizer_spec {
  double lr = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

/// SparseLoCo's outer settings when `outer:` is not written: α = 1 (`lr`), and
/// the error-feedback decay β = 0.95 (`momentum`, which it replaces; Sarfi et
/// al. 2025, arXiv 2508.15706). Nesterov has no meaning there.
inline outer_optimizer_spec sparseloco_outer_defaults() { return {1.0, 0.95, false}; }

/// NoLoCo's outer settings when `outer:` is not written: lr 0.7, momentum 0.5
/// (Kolehmainen et al. 2025, arXiv 2506.10911, and jkolehm/noloco's
/// outer_lr/outer_momentum); its step is its own, not torch's Nesterov SGD.
inline outer_optimizer_spec noloco_outer_defaults() { return {0.7, 0.5, false}; }

/// `local_update: {algorithm, sync_every, outer, fragments, delay, alpha,
/// quantize, group, route, periods, density}`. Each replica takes `sync_every`
/// inner steps with its own AdamW before it exchanges anything.
struct local_update_spec {
  bool present = false;
  /// diloco | streaming_diloco | noloco | desloc | sparseloco
  std::string algorithm = "diloco";
  /// H inner steps between exchanges. DiLoCo paper: 500; NoLoCo paper: 50 (set
  /// from the algorithm when the key is absent: local_update_default_sync_every).
  int sync_every = 500;
  outer_optimizer_spec outer;
  /// streaming_diloco: P fragments, one exchanged every H/P steps round robin
  /// (torchft's DiLoCo; H % P == 0).
  int fragments = 1;
  /// streaming_diloco: τ, the exchange starts τ steps before it is applied (τ < H/P).
  int delay = 0;
  /// streaming_diloco: α, the new global is mixed toward the local parameters
  /// (torchft's fragment_update_alpha, default 0: the pure new global).
  double alpha = 0.0;
  /// none | bf16 | int8 | fp8: how the outer exchange travels (per-row scales,
  /// reduced in f32).
  std::string quantize = "none";
  /// noloco: replicas averaged together at each exchange (paper: 2).
  int group = 2;
  /// noloco: `random` sends each microbatch's activation to a random replica
  /// of the next stage (a seeded bijection per boundary); `chain` keeps it.
  std::string route = "random";
  /// desloc: the periods (in inner steps) at which parameters, Adam's first
  /// and second moments are averaged (DES-LOC paper: K_u = 3·K_x, K_v = 6·K_x).
  int period_params = 16, period_momentum = 48, period_variance = 96;
  /// sparseloco: the share of each chunk's entries sent (paper: 1–3%).
  double density = 0.02;
  /// G replica groups (torchft's DiLoCo over HSDP): the data_parallel.replicas
  /// are cut into G groups of replicas / G consecutive replicas that sync every
  /// step inside (a DDP ring, or ZeRO's shards with data_parallel.zero), and the
  /// groups run the method between them. 0: one group per replica.
  int replica_groups = 0;
};

/// A rule `l` breaks: the key it is about (`delay`, `outer.lr`) and why.
struct local_update_problem {
  std::string key;
  std::string message;
};

/// The rules between values, for the graph file and `troupe sync` alike: outer
/// lr > 0, momentum in [0, 1); streaming_diloco (torchft's DiLoCo constructor):
/// P ≤ H, H % P == 0, τ < H/P, α ∈ [0, 1]; noloco: groups partition `replicas`;
/// sparseloco: density in (0, 1]. Empty when `l` is sound.
std::vector<local_update_problem> local_update_problems(const local_update_spec& l, int replicas);

/// The algorithms `local_update.algorithm` accepts: the built-in five, or what
/// the installed source lists (actors/builtin.cpp installs the sync-method
/// registry's names, so a plugin's method is accepted once it is loaded).
std::vector<std::string> local_update_algorithms();
void set_local_update_algorithms(std::function<std::vector<std::string>()> source);

/// H when `sync_every` is not written: the papers' values (DiLoCo 500, Streaming
/// DiLoCo 100, NoLoCo 50, DES-LOC its parameter period); SparseLoCo 50, the
/// issue's example (its paper sweeps H).
int local_update_default_sync_every(const std::string& algorithm);

} // namespace troupe
