// The same graph at any size under a simulated clock: a pipeline's stage
// actors repeated over data-parallel replicas, each replica with its router,
// their real stage_core / router_core / policies, and a cost model for compute,
// links and collectives instead of CAF and kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/graph/local_update_spec.hpp"
#include "schedulers/sim/cost_model.hpp"
#include "schedulers/expected.hpp"
#include "schedulers/routing/routing_policy.hpp"

namespace troupe::sched {

/// One interval of a simulated actor's time, for a trace: a compute action
/// (`kind` F, B, I or W) or its position's data-parallel all-reduce (`S`).
struct sim_span {
  int replica = 0;
  int position = 0;
  char kind = 'F';
  std::int64_t step = 0;
  int microbatch = -1;       ///< -1 for an all-reduce
  double begin = 0, end = 0; ///< simulated seconds
};

/// One simulated cluster: `stages` is one replica's stage actors (their names
/// and model chunks; actor numbers are assigned here), repeated `replicas` times.
struct cluster_config {
  transformer_shape model; ///< model.microbatch is b, sequences per microbatch
  cost_settings costs;     ///< device, links, tensor parallelism, recomputation
  int replicas = 1;        ///< d: data-parallel replicas of the whole pipeline
  int microbatches = 1;    ///< m: per replica per step
  std::int64_t steps = 1;
  std::string policy = "1f1b"; ///< the stage policy (a registered name)
  std::map<std::string, std::string> policy_options;
  /// Options of one position's stages (by position), over policy_options.
  std::map<int, std::map<std::string, std::string>> stage_policy_options;
  std::string routing = "chain";               ///< the routing policy
  std::vector<std::vector<std::string>> paths; ///< for `paths`
  std::vector<route_stage> stages;             ///< one replica, in pipeline order (their `actor` is ignored)
  double gradient_bytes = 4;                   ///< per parameter in the data-parallel all-reduce (f32 main gradients)
  double activation_bytes = 2;                 ///< per value sent between stages (bf16)
  bool reduce_norm = true;                     ///< global-norm clipping: each replica's stages reduce Σg² every step
  /// Optimizer post-validation (`train.clip: post_validate`): with reduce_norm,
  /// each stage's optimizer step starts when its gradients are final rather
  /// than when the total comes back. The check always passes here (the
  /// simulator has no gradients), so no rollback is priced.
  bool post_validate = false;
  /// `own`: a microbatch stays on its replica's chain; `least_loaded`: each
  /// stage sends an output to the replica of the next position likely to finish
  /// it first (data_parallel.route; schedulers/routing/least_loaded.hpp).
  std::string route = "own";
  /// By slot (replica · stages + position): the node process of each stage
  /// actor, whose cores its compute shares (a launched graph's placement);
  /// empty: devices_per_node consecutive devices make a node.
  std::vector<int> nodes;
  /// Compute of a stage actor (`r1s1`) this many times slower: an emulated slow device.
  std::map<std::string, double> slowdown;
  /// When set, the cost of a compute action (kind F, B, I or W) of `microbatch`
  /// of `step` on the stage actor at (`replica`, `position`), given the cost
  /// model's `nominal`: work that differs by microbatch, such as each replica's
  /// documents under core attention (schedulers/sim/attention_sim.hpp).
  using action_cost_fn =
    std::function<double(int replica, int position, std::int64_t step, int microbatch, char kind, double nominal)>;
  action_cost_fn action_cost;
  /// Called with each span of the replicas `traced` marks (by replica; empty: none) as it ends, in simulated time order.
  std::function<void(const sim_span&)> on_span;
  std::vector<char> traced;
  /// SkipPipe's nodes (#14), when `present`: stage actor (r, s) is the r-th network
  /// node of position s (a slot with no node gets no work), one router feeds them
  /// all and microbatch k of a step follows `paths[k]` across replicas (routing
  /// `skippipe`: hops named `r1s3`, stage 0's head chunk last, `r0s0.1`). Stage 0
  /// holds two chunks, the embedding's and the head's; the others one. The
  /// policy must take chunks in any order (gpipe). A message between stage actors
  /// takes their nodes' link plus `hop_overhead` when it carries a tensor; the
  /// router sits with every start node (no delay). No data-parallel all-reduce:
  /// SkipPipe prices an iteration without one.
  struct skip_nodes {
    bool present = false;
    int path_length = 0;
    /// Between the stage actors of slots a and b (slot = replica · stages + position).
    std::vector<std::vector<link_spec>> links;
    double hop_overhead = 0; ///< seconds (SkipPipe's copies between host and GPU)
  } skip;
  /// Local-update training (#13), when `present`: no all-reduce across
  /// replica groups every step; after each update every stage follows its
  /// method's schedule and its outer_sync peer exchanges with the peers of the
  /// same place in the other groups (schedulers/sim/outer_sim.hpp).
  struct local_update {
    bool present = false;
    local_update_spec spec;
    std::uint64_t seed = 0; ///< data.seed (NoLoCo's groups)
    int group = 1;          ///< replicas per replica group: a ring all-reduce inside every step
    /// By position: its parameter tensors' sizes in the stage's order (what
    /// fragments cut); a position without a list has the cost model's count.
    std::vector<std::vector<std::int64_t>> tensors;
    /// The link a part crosses from the outer_sync of (from, position) to that
    /// of (to, position), by replica; parts on links of one `key` queue behind
    /// each other (one emulated connection). Unset: the network's level
    /// between the stages' devices, a link per pair.
    struct link {
      std::string key;
      link_spec spec;
    };
    std::function<link(int position, int from, int to)> link_of;
    /// A peer holds at most this many values, and all peers together 4 times
    /// as many (a peer at least 16 rows of 1024): a larger stage is exchanged
    /// as a proportionally smaller one, its bytes and compute scaled back up.
    std::int64_t max_values = std::int64_t{1} << 22;
  } outer;
  /// The data-parallel ring of each position (#25): a stage's gradient buckets
  /// leave as its last backward pass over each chunk completes them, and each
  /// goes round the ring by the members' own bookkeeping (schedulers/sync/ring_peer.hpp)
  /// over links that serialise its chunks (schedulers/sim/ring_sim.hpp).
  struct data_parallel {
    std::int64_t bucket_bytes = 4 << 20; ///< f32 gradient bytes per bucket (data_parallel.bucket)
    bool overlap = true;                 ///< buckets leave during the last pass (else once the step's work is done)
    /// ZeRO stage (1, 2): the members are optimizer shards; a bucket is
    /// reduce-scattered, the shard steps its slice (the device's
    /// optimizer_per_param a value), and the updated parameters are all-gathered.
    int zero = 0;
    /// By position, chunk: its parameters' elements in the model's order (what
    /// buckets cut); a position without a list has the cost model's count.
    std::vector<std::vector<std::vector<std::int64_t>>> tensors;
    /// The link a chunk crosses from the ring member of (from, position) to
    /// that of (to, position); unset: the network's level between their devices.
    std::function<local_update::link(int position, int from, int to)> link_of;
    /// A ring of more members runs as a ring of this many, each hop standing
    /// for (n-1)/(k-1) of the real ring's (its bytes and latency scaled): a
    /// member still sends 2(n-1)/n of the bucket, in fewer events.
    int max_members = 16;
    /// A position cut into more buckets is cut into this many larger ones.
    int max_buckets = 64;
  } ring;
};

/// What one pipeline position (the same stage in every replica) did.
struct position_result {
  std::string name;
  int layers = 0;
  double busy = 0;         ///< compute seconds, summed over the replicas
  int peak_in_flight = 0;  ///< most activations held at once, over the replicas
  double parameters = 0;   ///< of the stage (all t devices together)
  double memory_bytes = 0; ///< per device: model states + peak activations
  /// Its ring's time a step: from a stage's first bucket leaving to its last
  /// coming back (ZeRO: reduce-scattered), the mean over replicas and steps.
  double allreduce_s = 0;
};

/// What the simulation measured.
struct cluster_result {
  double makespan = 0;    ///< simulated seconds of all steps
  double iteration_s = 0; ///< makespan / steps
  double busy = 0;        ///< compute seconds over all stage actors
  /// Idle share of the stage actors' time, 1 - busy / (stage actors x makespan):
  /// the pipeline bubble plus waiting for the data-parallel all-reduce.
  double bubble_fraction = 0;
  double sync_wait_s = 0; ///< per step: gradients complete everywhere -> all-reduces done (critical path)
  int stage_actors = 0;
  std::int64_t devices = 0; ///< stage actors x t
  std::int64_t tokens_per_step = 0;
  double flops_per_step = 0;       ///< Megatron's count (with the recomputed forward when recomputing)
  double model_flops_per_step = 0; ///< without recomputation (for MFU)
  double parameters = 0;
  double peak_flops = 0; ///< per device, in the settings' dtype
  std::uint64_t events = 0;
  std::uint64_t messages = 0;
  double p2p_bytes = 0;       ///< activations and gradients between stages
  double allreduce_bytes = 0; ///< per step: bytes the ring members sent, summed over all of them
  /// Bytes each ring member sent over the run (`r0s1_ar`, ZeRO `r0s1_os`).
  std::map<std::string, double> ring_bytes_by_actor;
  double wall_s = 0; ///< real seconds the simulation took
  std::vector<position_result> positions;
  /// Local-update exchanges (cluster_config::outer).
  struct outer_exchanges {
    long exchanges = 0;                           ///< outer steps each stage took (fragment exchanges applied)
    double bytes = 0;                             ///< bytes every outer_sync sent over the run
    double exchange_s = 0;                        ///< mean time from a fragment's prepare to its exchange being applied
    double wait_s = 0;                            ///< mean time a stage waited at a perform for its exchange
    std::map<std::string, double> bytes_by_actor; ///< `r0s1_sync`: what each outer_sync sent
  } outer;
  /// Forwards each stage actor ran over the run, by name (`r0s1`): where routing sent the work.
  std::map<std::string, int> forwards;
  /// FLOP/s per device as Megatron counts them (flops_per_step), in TFLOP/s.
  double tflops_per_device() const;
  /// Model FLOPs utilisation: model_flops_per_step / (iteration_s x devices x peak).
  double mfu() const;
  double tokens_per_s() const { return iteration_s > 0 ? tokens_per_step / iteration_s : 0.0; }
};

/// `replicas` replicas of `stages` equal stages (2 layers of a small GPT each,
/// A100 costs, free links, the head not counted): the straggler experiments' shape.
cluster_config equal_stage_cluster(int stages, int replicas, int microbatches, int steps);

/// Runs `steps` steps. Fails on a bad configuration, on a policy that breaks
/// its bounds, or when the pipeline stalls (naming a stuck stage).
expected<cluster_result> simulate_cluster(const cluster_config& config);

} // namespace troupe::sched
