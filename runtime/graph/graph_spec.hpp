// The typed form of a graph file: model, data, training, pipeline and trace
// settings, plugins, and the explicit actors and channels the shorthand expands into.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "runtime/graph/local_update_spec.hpp"
#include "runtime/tensor/dtype.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

/// The decoder: `model: {family, layers, d_model, heads, context, vocab, precision}`
/// and, for `family: llama`, `kv_heads, ffn_hidden, rope_theta, tie_embeddings, norm_eps`
/// (ops::gpt_config; ops/model_config.hpp turns this into one).
struct model_spec {
  std::string family = "gpt2";  ///< gpt2 or llama
  int layers = 0;               ///< transformer blocks (required)
  int d_model = 0;              ///< embedding width (required, divisible by heads)
  int heads = 0;                ///< attention heads (required)
  int context = 0;              ///< sequence length in tokens (required)
  int vocab = 256;              ///< byte-level by default
  dtype precision = dtype::f32; ///< f32 or bf16
  // llama only: each 0 (or its default) when not written
  int kv_heads = 0;            ///< key/value heads, dividing heads; 0: heads
  int ffn_hidden = 0;          ///< SwiGLU width; 0: ops::llama_ffn_hidden(d_model)
  double rope_theta = 10000.0; ///< rotary base θ
  bool tie_embeddings = false; ///< the head reuses the token embedding
  double norm_eps = 1e-5;      ///< RMSNorm's epsilon
};

/// `data: {corpus | tokens | jsonl, batch, seed, val_fraction, documents, deal, ...}`:
/// the data source kind is the one whose key is written (runtime/graph/data_source_spec.hpp).
struct data_spec {
  std::string source = "text";       ///< the data source kind: `text` (bytes or a tokenizer), `tokens`, `jsonl`
  std::string source_key = "corpus"; ///< the key that selects it and names its file
  std::string corpus = "kjv";        ///< that file as written: `kjv` or a path (relative to the graph file's folder)
  std::filesystem::path corpus_path; ///< the resolved, existing file
  /// The source's own settings (`dtype`, `tokenizer.model`, ...), each written or
  /// its default, as text; files resolved against the graph file's folder.
  std::map<std::string, std::string> options;
  int batch = 0; ///< sequences per microbatch (required)
  std::uint64_t seed = 1;
  double val_fraction = 0.1; ///< tail of the corpus held out for validation, in [0, 0.5]
  /// How the corpus is cut into documents, whose tokens attend only within their
  /// document (actors/documents.hpp): `none` (one causal window), `chapters`
  /// (the corpus's header lines: the KJV's chapters), `eot` (a token file's
  /// end-of-text id, a JSON-lines record) or `long_tail` (synthetic lengths).
  std::string documents = "none";
  /// How a step's sequences are dealt to the replicas: `in_order` (the corpus's
  /// order), or `heaviest_first`: each round's sequences (one microbatch per
  /// replica) sorted by causal attention pairs, replica 0 taking the heaviest —
  /// DistCA's straggler, one replica drawing the long documents (#15).
  std::string deal = "in_order";
};

/// `attention: {servers, nano_batches, tolerance}`: core attention disaggregated to
/// attention servers (DistCA, Zhuang et al. 2025, arXiv:2510.18121; #15).
struct attention_spec {
  bool present = false;
  /// 0: `in_place`, every stage actor also serves the stages of its position (its
  /// replicas); N > 0: N separate server actors serve every stage.
  int servers = 0;
  int nano_batches = 2;   ///< a microbatch's sequences split in this many, ping-ponged
  double tolerance = 0.1; ///< the planner balances pairs to within (1 ± tolerance) × average
  source_pos pos;
};

/// `train: {steps, lr, weight_decay, warmup, eval_every, eval_batches, grad_clip, clip, init}`.
struct train_spec {
  std::int64_t steps = 0; ///< optimizer steps (required)
  double lr = 3.0e-4;
  double weight_decay = 0.0;
  std::int64_t warmup = 0;     ///< linear warm-up steps
  std::int64_t eval_every = 0; ///< steps between validation passes; 0 = only at the end
  int eval_batches = 8;        ///< microbatches per validation pass
  double grad_clip = 1.0;      ///< global gradient-norm clip; 0 = off
  /// When a stage applies the clip: `sync` waits for the global norm before its
  /// optimizer step; `post_validate` steps at once, unclipped, and rolls back and
  /// redoes the step clipped when the norm then exceeds grad_clip (Qi et al.,
  /// Zero Bubble PP, sec. 4). Needs grad_clip > 0.
  std::string clip = "sync";
  source_pos clip_pos; ///< where `clip` is written
  /// A warm start: a checkpoint (its folder with `latest`, or one step folder)
  /// whose stage weights the run starts from, with fresh optimizer state at step
  /// 0 (DiLoCo's protocol: pretrain, then train locally). Empty = random weights.
  std::string init;
  std::filesystem::path init_path; ///< `init` resolved against the graph file's folder
  source_pos init_pos;             ///< where `init` is written
};

/// `pipeline: {stages, microbatches, schedule, virtual, table, policy, device}`. With no
/// `pipeline:` section a run is one stage with one microbatch.
struct pipeline_spec {
  bool present = false; ///< the file has a `pipeline:` section
  int stages = 1;
  int microbatches = 1;
  std::string schedule = "1f1b";    ///< a name from graph_vocabulary::schedules
  int virtual_stages = 1;           ///< YAML key `virtual`: model chunks per stage actor (interleaved)
  std::string table;                ///< YAML key `table`: the action CSV for `schedule: table`
  std::filesystem::path table_path; ///< `table` resolved against the graph file's folder
  /// YAML key `policy`: the schedule's options (`{max_in_flight: 3}`), checked
  /// against the keys the schedule declares; a stage's own `policy:` overrides them.
  std::map<std::string, std::string> policy;
  /// Where stages run unless an actor entry sets its own `device:`: `cpu`, `cuda:N`,
  /// or `cuda` (each node's CUDA stages take its devices in rank order, round robin).
  std::string device = "cpu";
  /// What training activations and their gradients cross to another stage actor
  /// as: `f32`, or `bf16` (half the bytes, rounded to nearest even; the receiver
  /// widens them back), as a bf16 model's stages would send them.
  std::string wire = "f32";
  /// YAML key `routing`: the routing policy that gives each microbatch its route
  /// (`chain`, or `{policy: paths, paths: [[s0, s2, s1, s3], [s0, s3]]}`).
  std::string routing = "chain";
  std::vector<std::vector<std::string>> paths; ///< `routing.paths`: stage names per path
  /// `routing: {policy: NAME, KEY: VALUE}`: the settings the policy registered, each written or its default.
  std::map<std::string, std::string> routing_options;
  source_pos routing_pos; ///< where `routing` is written (the section if not)
};

/// `data_parallel: {replicas, bucket, zero}`: R replicas of the pipeline, each
/// position's replicas reducing their gradients through a ring of all-reduce
/// peers. Without the section a run is one replica.
struct data_parallel_spec {
  bool present = false;          ///< the file has a `data_parallel:` section
  int replicas = 1;              ///< R: a step's global batch is R × data.batch × pipeline.microbatches
  std::int64_t bucket = 4 << 20; ///< gradient bytes per bucket (`4MB`, `512KB` or a number of bytes)
  int zero = 0;                  ///< ZeRO stage: 0 (plain all-reduce) for now
  /// Reduce each bucket as soon as backward has written it (true), or all of them
  /// once the step's backward is done (false: the baseline overlap is measured against).
  bool overlap = true;
  /// `own`: a microbatch stays on its replica's chain; `least_loaded`: each stage
  /// sends an activation to the replica of the next position likely to finish it first.
  std::string route = "own";
  /// What the all-reduce ring sends its gradient chunks as: `f32`, or `bf16` (half
  /// the bytes; each hop's partial sums and the reduced values are rounded to bf16,
  /// summed in f32, so every replica ends with the same values: PyTorch DDP's
  /// bf16_compress_hook). The step's train loss rides in the last bucket, so the
  /// printed train loss is then a bf16 value too. ZeRO's rings stay f32.
  std::string wire = "f32";
};

/// `trace: {file, hang_after}`: where the Chrome-trace JSON goes (empty = no
/// trace) and when the hang detector names an actor stuck in one handler.
struct trace_spec {
  std::string file;                ///< as written
  std::filesystem::path file_path; ///< `file` resolved against the graph file's folder, like every path in it
  /// `hang_after: 2min`-style duration (`120s`): an actor in one handler longer
  /// than this is named with what it was doing (runtime/trace/hang_watch.hpp); 0s: never.
  double hang_after_s = 120;
};

/// `cluster: {launcher, nodes, hosts, address, port, transport, token_file}`:
/// how `troupe launch` spreads the actors over processes. Without the section
/// a graph runs in one process.
struct cluster_spec {
  bool present = false;
  std::string launcher = "local";    ///< local, ssh or slurm
  int nodes = 1;                     ///< node processes; stages spread evenly unless an actor names its `node:`
  std::vector<std::string> hosts;    ///< ssh: one host per node (cycled when fewer)
  std::string address = "127.0.0.1"; ///< where the coordinator listens (and only there)
  int port = 0;                      ///< 0 = any free port
  std::string transport = "auto";    ///< tensor bytes between nodes: ucx, tcp or auto
  std::string token_file;            ///< the shared token; empty = $TROUPE_TOKEN, else one made per launch
  std::filesystem::path token_path;  ///< `token_file` resolved against the graph file's folder
  /// Local launcher: node i runs only on the i-th CPU this process may use (mod
  /// their count), so each emulated device is one core.
  bool pin = false;
  /// `troupe launch` restarts a run that lost a node, at most this many times,
  /// from the latest complete checkpoint (checkpoint.every is then required);
  /// an elastic local-update run starts the lost node alone again instead, its
  /// replicas rejoining with a live replica's state (#26).
  int restart = 0;
  /// Seconds a lost node stays down before a restart starts it (the whole run,
  /// or the node alone): a machine that takes that long to come back. 0: at once.
  double restart_delay = 0;
  /// A local-update run that loses a node holding only replicas goes on without
  /// them (and with `restart`, takes them back). false: it stops, or restarts
  /// from its latest checkpoint as any other run does.
  bool elastic = true;
  /// What an elastic run's step does while a replica is out: `keep` its batch
  /// (the replicas left take the lost one's microbatches in turn) or `shrink`
  /// (they are not made). graph_spec::keeps_batch_on_loss says which applies.
  std::string batch_on_loss = "keep";
  /// Not read from the file: set in a node process that replaces a lost node of
  /// an elastic run (#26), whose replica's actors start from a live replica's state.
  bool joining = false;
};

/// `checkpoint: {dir, every, keep}`: where and how often a run saves its state
/// (runtime/checkpoint/checkpoint.hpp describes the layout). `every` counts optimizer
/// steps; a checkpoint is taken after every `every` steps and after the last one
/// (checkpoint_due), named by the steps completed, `DIR/step-000016`.
struct checkpoint_spec {
  bool present = false;           ///< the file has a `checkpoint:` section
  std::string dir;                ///< as written
  std::filesystem::path dir_path; ///< `dir` resolved against the graph file's folder
  std::int64_t every = 0;         ///< optimizer steps between checkpoints; 0 = none
  int keep = 2;                   ///< complete checkpoints kept; older ones are removed
  /// Set by `troupe run --resume`, not by the file: the complete checkpoint
  /// folder every actor restores from, and the steps it holds (0 = a fresh run).
  std::filesystem::path resume_folder;
  std::int64_t resume_step = 0;
};

/// One link level of `sim.links`: a negative value takes the device's default.
struct sim_link_spec {
  double latency = -1;   ///< seconds per message
  double bandwidth = -1; ///< bytes/s per device and direction; 0 = unlimited
};

/// A `devices:` entry: a device for `troupe sim`, written out or based on a
/// preset, or a device file (`sim.device: calibrated.yaml`, as `troupe sim
/// --calibrate` writes one). Negative values are unset (taken from `base`, or
/// required without one; the ends, overheads and cores default to none).
struct sim_device_spec {
  std::string name;
  std::string base;     ///< a preset name, or empty
  double peak_f32 = -1; ///< `peak_tflops: {f32, tf32, bf16}`, stored in FLOP/s
  double peak_tf32 = -1;
  double peak_bf16 = -1;
  double memory_bandwidth = -1;                         ///< `memory_gbps`, stored in bytes/s
  double memory_bytes = -1;                             ///< `memory_gb`, stored in bytes
  double matmul = -1, attention = -1, elementwise = -1; ///< `efficiency: {...}` in (0, 1]
  double head = -1;           ///< `efficiency: {head}`: the output head's, on its logits FLOPs
  double backward_ratio = -1; ///< a layer's backward over its forward
  double embedding_forward = -1, embedding_backward = -1; ///< `embedding_ns: {forward, backward}` per value, in s
  double action_overhead = -1;                            ///< `action_overhead_us`, stored in seconds
  double optimizer_per_param = -1;                        ///< `optimizer_ns_per_param`, stored in seconds
  int cores = -1;                                         ///< cores a node's stage actors share; 0 = a device each
  double shared_slowdown = -1;                            ///< how much longer an op takes with every core busy
  source_pos pos;
};

/// `sim:` and `devices:`: how `troupe sim` sizes and prices the graph. The
/// graph's stage actors form one replica of `data_parallel`; each stage runs
/// on `tensor_parallel` devices of one node. Other commands ignore the section.
struct sim_spec {
  bool present = false;
  /// A preset (a100_80gb, h100_sxm, h200), a `devices:` name, or a device file
  /// (a name ending in .yaml, .yml or .json, relative to the graph file's folder).
  std::string device = "a100_80gb";
  int tensor_parallel = 1;
  int data_parallel = 1;
  int devices_per_node = 8;
  bool recompute = false;    ///< full activation recomputation (Megatron's `--recompute-granularity full`)
  bool count_head = true;    ///< the last stage also runs the output head; false gives equal stages
  double gradient_bytes = 4; ///< per parameter in the data-parallel all-reduce
  sim_link_spec within_node, between_nodes; ///< `links: {within_node, between_nodes}`
  sim_link_spec wide_area;                  ///< `links: {wide_area}`: between sites
  int nodes_per_site = 0;                   ///< nodes of one site (datacenter); 0: one site holds every node
  std::vector<sim_device_spec> devices;     ///< the `devices:` section
};

/// A link between two locations: a message of n bytes takes latency + n / bandwidth.
struct network_link {
  double latency = -1;  ///< seconds, one way; negative = not described
  double bandwidth = 0; ///< bytes/s; 0 = unlimited
};

/// `network:`: where each network node is and the links between locations,
/// inline (`locations:` + `links:`), from a CSV file (`csv:`) or a preset
/// (`preset:`, runtime/graph/network_presets.hpp). It prices SkipPipe's plans
/// (`troupe plan paths`) and, as `link(a, b)`, an emulated channel between nodes.
struct network_section {
  bool present = false;
  std::string preset;             ///< a preset's name, or empty
  std::string csv;                ///< as written
  std::filesystem::path csv_path; ///< `csv` resolved against the graph file's folder
  std::vector<std::string> locations;
  std::vector<std::vector<network_link>> links; ///< [i][j] between locations i != j, symmetric
  network_link within{1e-3, 2.0 * (1 << 30)};   ///< `within_location`: SkipPipe's same-cluster (1 ms, 2 GiB/s)
  double overhead = 0;             ///< seconds added to every hop between nodes (SkipPipe's 0.35 s of copies)
  std::vector<int> node_locations; ///< network node -> location index
  source_pos pos;
  int nodes() const { return static_cast<int>(node_locations.size()); }
  /// The link from node `a` to node `b` (within a location when they share one).
  network_link link(int a, int b) const;
};

/// `skip:`: SkipPipe's partial and reordered paths (schedulers/planners/skippipe_planner.hpp).
struct skip_spec {
  bool present = false;
  int path_length = 0;   ///< L: stages each microbatch visits, stage 0 first (required)
  int memory = 3;        ///< microbatches a node past stage 0 holds in one iteration
  int max_per_stage = 0; ///< microbatches a stage past 0 serves; 0 = memory × nodes of the smallest position
  int swaps = 2;         ///< visits below the furthest stage reached (SkipPipe: 2)
  int swap_distance = 1; ///< how far below (SkipPipe: 1)
  int max_jump = 4;      ///< how far past the furthest reached one hop goes (SkipPipe: 4)
  std::string planner = "skippipe"; ///< a registered planner (schedulers/planners/path_planner.hpp)
  /// The planner's own settings (the keys it registered), each written or its default, as text.
  std::map<std::string, std::string> planner_options;
  std::vector<std::vector<int>> placement; ///< network nodes per stage position; empty = searched
  std::uint64_t seed = 1;
  source_pos pos;
};

/// A half-open range of transformer blocks `[begin, end)` held by a stage.
struct layer_range {
  int begin = 0;
  int end = 0;
  friend bool operator==(const layer_range&, const layer_range&) = default;
};

struct actor_spec;
struct graph_spec;
struct safetensors_header; // runtime/checkpoint/safetensors.hpp

/// Where a cluster launch puts an actor whose entry names no `node:`.
enum class actor_placement : std::uint8_t {
  first_node,       ///< node 0
  by_position,      ///< pipeline positions spread evenly over the nodes, in rank order
  with_first_stage, ///< on the node of the pipeline's first position (a feeder beside what it feeds)
  with_stage,       ///< on the node of the layer holder its `stage:` key names (a helper beside its stage)
};

/// What an actor type's entries are to the graph loader, placement and
/// checkpoints: runtime/ applies these rules by role and never names a type.
/// Each actor type declares its role when it registers (actor_type_info::role);
/// the loader copies it into every entry of that type.
struct actor_role {
  /// The entries hold pipeline layers: `layers:` is required, `device:` allowed
  /// (pipeline.device unless set), each gets a rank by its first layer, and
  /// together they number pipeline.stages and cover model.layers once.
  bool holds_layers = false;
  actor_placement placement = actor_placement::first_node;
  /// The identity keys (beyond "type") its checkpoint parts carry, which a
  /// resume checks against the graph (checkpoint_identity); unset when the
  /// type writes no checkpoint.
  std::function<std::map<std::string, std::string>(const graph_spec&, const actor_spec&)> checkpoint_identity;
  /// Checks this entry's part of a checkpoint before a resume starts anything,
  /// from the part's header: the tensors it must hold with their shapes and
  /// dtypes, the metadata it restores from. What does not fit (a sentence), or
  /// nullopt. Unset: the identity alone is checked.
  std::function<std::optional<std::string>(const graph_spec&, const actor_spec&, const safetensors_header&)>
    check_checkpoint_part;
  /// Checks that a weights file (`train.init: FILE.safetensors`, Hugging Face's
  /// names) holds what this entry starts from: its tensors, shapes, dtypes and
  /// the model's shape. What does not fit (a sentence naming the tensor), or
  /// nullopt. Unset: the type holds nothing a weights file gives.
  std::function<std::optional<std::string>(const graph_spec&, const actor_spec&, const std::filesystem::path&)>
    check_init_file;
};

/// One actor of the graph. Keys the loader knows are typed; the rest stay in
/// `params` for the actor type to read (and check, through graph_vocabulary).
struct actor_spec {
  std::string name;
  std::string type;
  std::string node;                         ///< where it runs (cluster launches); empty = this process
  std::vector<layer_range> layers;          ///< `layers: [a, b]` or `[[a, b], [c, d]]` (types that hold layers)
  std::string device;                       ///< layer holders: cpu, cuda or cuda:N (pipeline.device unless set)
  int rank = -1;                            ///< layer holders: position in the pipeline (by first layer); else -1
  int replica = 0;                          ///< layer holders: which data-parallel replica (`r1s0` is replica 1)
  actor_role role;                          ///< its type's role, as registered (set by the loader)
  std::map<std::string, YAML::Node> params; ///< every other key, as written
  bool expanded = false;                    ///< made by the shorthand, not written explicitly
  source_pos pos;                           ///< where the entry starts (or the shorthand section)
};

/// A directed edge `from -> to` between two actors.
struct channel_spec {
  std::string from;
  std::string to;
  int credits = 0;      ///< messages in flight it allows; 0 = the receiver's policy decides
  double bandwidth = 0; ///< emulated link, bytes/s, both directions; 0 = unlimited
  double latency = 0;   ///< emulated one-way latency, seconds
  bool expanded = false;
  source_pos pos;
};

/// A plugin library named in `plugins:`.
struct plugin_spec {
  std::string path;               ///< as written
  std::filesystem::path resolved; ///< relative paths resolved against the graph file's folder
  source_pos pos;
};

/// The whole validated, expanded graph.
struct graph_spec {
  std::filesystem::path file; ///< the graph file as given
  model_spec model;
  data_spec data;
  train_spec train;
  pipeline_spec pipeline;
  data_parallel_spec data_parallel;
  local_update_spec local_update;
  trace_spec trace;
  cluster_spec cluster;
  checkpoint_spec checkpoint;
  sim_spec sim;
  network_section network;
  skip_spec skip;
  attention_spec attention;
  std::vector<plugin_spec> plugins;
  std::vector<actor_spec> actors; ///< expanded and explicit, explicit overriding by name
  std::vector<channel_spec> channels;
  /// Where each key of the file's mappings was written, by key path
  /// (`model.vocab`, `pipeline.table`), or the `--set` that wrote it: how checks
  /// outside the loader (an actor type's `check`) point at a key.
  std::map<std::string, source_pos, std::less<>> key_positions;

  /// Where `path` was written: its key, else the nearest enclosing key that
  /// was, else the file itself.
  source_pos where(std::string_view path) const;

  /// The actor called `name`, or nullptr.
  const actor_spec* find_actor(std::string_view name) const noexcept;
  /// The position of the actor called `name` in `actors` (its actor index), or -1.
  int index_of(std::string_view name) const noexcept;
  /// The layer-holding actor a helper actor serves (its `stage:` key: an
  /// all-reduce peer, an optimizer shard, an outer sync), or nullptr.
  const actor_spec* served_stage(const actor_spec& helper) const;
  /// The positions in `channels` of the channels from the actor called `name`.
  std::vector<int> channels_from(std::string_view name) const;
  /// The first actor of type `type` that a channel from `from` reaches (a
  /// ring's next member: all-reduce peers, optimizer shards), or nullptr.
  const actor_spec* channel_target(const actor_spec& from, std::string_view type) const;
  /// The node (0 .. cluster.nodes - 1) that runs `a`: its `node:` if given,
  /// else by its role's placement (actor_placement).
  int node_of(const actor_spec& a) const;
  /// Tokens one optimizer step consumes: replicas × batch × microbatches × context.
  std::int64_t tokens_per_step() const noexcept;
  /// Replicas that sync every step together (a DDP ring or ZeRO's shards): all
  /// of data_parallel.replicas, or one group of local_update.replica_groups; 1
  /// when each local-update replica is its own group.
  int sync_group_size() const noexcept;
  /// SkipPipe's planned paths drive a run (#14): a `skip:` section whose network
  /// has one node per stage actor (pipeline.stages × replicas), node placement[s][i]
  /// being replica i of position s. Other `skip:` graphs can be planned
  /// (`troupe plan paths`) but not run.
  bool skip_runs() const noexcept;
  /// An elastic local-update run deals a lost replica's microbatches to the
  /// replicas left (`cluster.batch_on_loss: keep`, on the default chain routes
  /// and a rule schedule; other routes are their policy's to give, and a table
  /// replays a fixed set of microbatches, so those steps shrink).
  bool keeps_batch_on_loss() const noexcept;
  /// A launch that goes on when it loses a data-parallel replica's node, and
  /// with `cluster.restart` takes it back live (#26): a `cluster:` section,
  /// elastic, DDP or ZeRO-1/2 every step (no local update; routes across
  /// replicas only as elastic_least_loaded). The actors beside its stages that sum their gradients then
  /// take their direct forms (actors/allreduce_direct.cpp and ZeRO's beside
  /// it), which exchange directly, and
  /// each replica reduces its own gradient norm (its stages hold the same
  /// summed gradients as every other replica's).
  bool elastic_ddp() const noexcept;
  /// Elastic DDP routed around stragglers (`route: least_loaded`, one chunk a
  /// stage): on a loss every stage stops routing to the lost replica's stages,
  /// counts the microbatches they sent it as all they will, and backs a
  /// microbatch it sent them out with a zero gradient (actors/stage/stage_engine.cpp).
  bool elastic_least_loaded() const noexcept;
  /// A launch of local-update training that goes on when it loses a replica's
  /// node (each replica its own group, chain routes, `cluster.elastic`).
  bool elastic_local_update() const noexcept;
  /// Microbatches move between replicas at stage boundaries: least_loaded
  /// routing, or a local-update method's own routes (NoLoCo's random ones).
  bool routes_across_replicas() const noexcept;

  /// What the lookups above keep between calls (graph_spec.cpp): actor names to
  /// indices and channels by their `from`, extended as the lists grow, rebuilt
  /// when they change otherwise (each hit is checked against the list), so
  /// lookups stay O(1) in graphs of 10,000s of actors.
  struct directory;
  mutable std::shared_ptr<directory> directory_;

private:
  /// Brings directory_ up to date with `actors`; call with directory_mutex held.
  const directory& indexed() const;
};

/// The schedule names every build knows: gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv, v_half, v_min, table.
const std::vector<std::string>& builtin_schedule_names();

/// The `cluster:` line of to_yaml (empty when the section is absent).
std::string cluster_yaml(const cluster_spec& c);

/// Prints the expanded graph as readable YAML (what `troupe check` shows).
std::string to_yaml(const graph_spec& g);

} // namespace troupe
