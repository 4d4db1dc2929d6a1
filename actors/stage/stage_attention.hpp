// Core attention on attention servers (DistCA, Zhuang et al. 2025,
// arXiv:2510.18121; #15), free of CAF: what a server computes and keeps, and a
// stage's microbatch run in pieces that stop at each layer's core attention.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "actors/stage/stage_model.hpp"
#include "ops/core_attention_shard.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/messages.hpp"
#include "schedulers/planners/attention_planner.hpp"

namespace troupe {

/// An attention server's state: each shard's forward inputs and statistics,
/// kept for its backward (an activation cache, released by the backward).
class attention_server_state {
public:
  /// Runs task `m` (ops/core_attention_shard.hpp) and returns the answer. Throws
  /// std::runtime_error on a backward whose forward it never ran.
  attention_result_msg serve(const attention_task_msg& m);
  /// Shards whose backward has not come yet.
  std::size_t held() const noexcept { return saved_.size(); }

private:
  struct saved {
    tensor_handle q, k, v;
    ops::shard_attention_saved stats;
  };
  std::map<attention_key, saved> saved_;
};

/// Where a stage's core attention goes (the graph's `attention:`).
struct stage_attention_config {
  std::vector<int> servers; ///< actor indices of the servers; in place: its position's stages, by replica
  int self_server = -1;     ///< in place: this stage's own index among them; -1: separate servers
  int replicas = 1;         ///< replicas of the round, in round_documents order
  int replica = 0;          ///< this stage's
  int nano_batches = 1;
  double tolerance = 0.1;
  int actor = 0; ///< this stage's actor index (answers come back to it)
  int heads = 1;
};

/// One microbatch's training forward or fused backward on a CPU chunk, in pieces:
/// its sequences split into nano-batches, each stopping at every layer's core
/// attention while its shards are away (sent to servers, or queued here when
/// this stage serves them). Which piece runs next is a rule over ready work:
/// a nano-batch whose attention has all come back, the lowest first; else a
/// shard this stage serves itself. So while one nano-batch's attention is away
/// the other's linear work runs — DistCA's ping-pong, from what is ready.
///
/// Every stage of a round plans the same shards: the planner (schedulers/
/// attention_planner.hpp) over the round's document masks, nano-batch by
/// nano-batch, each replica's documents at home on its own server.
class stage_attention {
public:
  struct hooks {
    std::function<void(int server, const attention_task_msg&)> send;
    /// Around each backward piece (its weight gradients): `last` when no other
    /// nano-batch of this microbatch still has to run the same piece.
    std::function<void(bool last)> begin_backward_piece;
    std::function<void()> end_backward_piece;
  };
  stage_attention(stage_attention_config cfg, hooks h);

  const stage_attention_config& config() const noexcept { return cfg_; }
  /// Starts microbatch `mb`'s forward on `range` (chunk `chunk`): its first pieces
  /// run now. `targets`: the loss chunk's; input.round_documents: the round's masks.
  void start_forward(step_t step, int chunk, int mb, ops::gpt_range& range, const stage_tensor& input,
                     const tensor_handle& targets);
  /// Starts its backward from `grad` (the loss chunk: the loss gradient [1]):
  /// fused (`weights`), or its input-gradient half, whose weight gradients
  /// backward_weight computes later (zero-bubble "I" and "W": zb_h1).
  void start_backward(step_t step, int chunk, int mb, ops::gpt_range& range, const tensor_handle& grad,
                      bool weights = true);
  /// The weight-gradient half of microbatch `mb` on `range` (chunk `chunk`), after
  /// its input-gradient half: each nano-batch's, with the backward-piece hooks
  /// around each (`last` on the last). Runs here at once: no attention is involved.
  void backward_weight(int chunk, int mb, ops::gpt_range& range);
  /// A microbatch is in pieces.
  bool busy() const noexcept { return busy_; }
  /// Runs the next ready piece; false when none is ready (attention is away).
  bool run_ready();
  /// A server's answer for the running microbatch.
  void on_result(const attention_result_msg& m);
  /// After busy() turned false: the output (an activation with the input's masks,
  /// the loss [1] weighted over the nano-batches, or the input gradient).
  stage_tensor take_output();
  /// Causal pairs per server over the run's forwards, as the documents' homes
  /// would have them (before) and as planned (after): the balance the servers gave.
  const std::vector<std::int64_t>& pairs_before() const noexcept { return pairs_before_; }
  const std::vector<std::int64_t>& pairs_after() const noexcept { return pairs_after_; }
  /// The state of the shards this stage serves.
  attention_server_state& server() noexcept { return server_; }

private:
  struct shard {
    int row = 0;            ///< in the nano-batch
    std::int64_t start = 0; ///< the document's first token in the row
    std::int64_t q = 0, kv = 0;
    int server = 0;
  };
  struct nano {
    int slot = 0;        ///< the gpt_range microbatch id
    long r0 = 0, r1 = 0; ///< its rows of the microbatch
    std::vector<shard> shards;
    tensor_handle piece; ///< forward: the waiting layer's qkv; backward: its d_att
    tensor_handle acc;   ///< what the shards' answers fill: att [b, T, C] or d_qkv [b, T, 3C]
    int waiting = 0;     ///< shards still away
    int layer = 0;       ///< the waiting layer
    int pieces = 0;      ///< pieces run (the backward's arming counts them)
    bool done = false;
    tensor_handle out;
  };
  void plan(const tensor_handle& round_documents);
  void dispatch(nano& n);
  void absorb(nano& n, const attention_key& key, const attention_result_msg& r);
  void resume(nano& n);
  /// Around a backward piece that every nano-batch runs (`piece` k: the k-th of each).
  void piece_begins(int piece);
  void piece_ends();
  attention_key key_of(const nano& n, int shard_index) const;
  /// Shard `shard_index` of `n` as a task: its q, k, v (forward) or dout (backward) rows.
  attention_task_msg task_of(const nano& n, int shard_index) const;

  stage_attention_config cfg_;
  hooks hooks_;
  attention_server_state server_;
  // The running microbatch.
  bool busy_ = false, backward_ = false;
  bool weights_ = true; ///< backward: fused, or the input-gradient half
  step_t step_ = 0;
  int chunk_ = 0, mb_ = 0;
  long batch_ = 0, seq_ = 0;
  ops::gpt_range* range_ = nullptr;
  std::vector<nano> nanos_;
  std::vector<std::pair<int, int>> local_; ///< (nano, shard) this stage serves itself, queued
  std::vector<int> piece_runs_;            ///< backward: nano-batches that ran piece k
  stage_tensor input_;                     ///< forward: its masks go on with the output
  /// The round's masks of each microbatch whose backward is to come: (chunk, mb) -> masks.
  std::map<std::pair<int, int>, tensor_handle> rounds_;
  /// The nano-batches' gpt_range slots of each microbatch whose weight gradients are to come: (chunk, mb) -> slots.
  std::map<std::pair<int, int>, std::vector<int>> weights_due_;
  std::vector<std::int64_t> pairs_before_, pairs_after_;
};

} // namespace troupe
