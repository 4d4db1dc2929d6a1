// A pipeline-stage actor's engine, free of CAF: the scheduling core it shares
// with the simulated clock (schedulers/policies/stage_core: queue, policy, routes, plans,
// credits, held messages, the norm reduction) plus the model chunks this rank
// owns (on the CPU or a CUDA device), their tensors and the optimizer step.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stage/stage_attention.hpp"
#include "actors/stage/stage_model.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "actors/zero_shard_state.hpp" // held_bytes
#include "ops/gpt.hpp"
#include "ops/lr_schedule.hpp"
#include "ops/optimizer.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "schedulers/routing/router.hpp"
#include "schedulers/policies/stage_core.hpp"
#include "schedulers/policies/stage_policy.hpp"

namespace troupe {

/// What one stage actor needs to know about the run. It is told nothing about
/// its neighbours: every message carries its route, and the router's plan says
/// what each step holds for it.
struct stage_config {
  std::string name;
  int actor = 0;     ///< this stage's index in the graph's actor list (what routes name)
  int rank = 0;      ///< its position among the stage actors (virtual stage ids, policy budgets)
  int ranks = 1;     ///< stage actors in the graph
  int chunks = 1;    ///< model chunks on this actor
  int router = -1;   ///< the actor that sends batches (whose credits a batch's start returns)
  bool loss = false; ///< holds the head: the last hop of every route, it computes the loss
  std::int64_t steps = 1;
  std::int64_t eval_every = 0; ///< 0: evaluate only after the last step
  int eval_batches = 8;
  /// Routes each validation pass takes (routing_policy::eval_routes): batch k of
  /// route v is microbatch v·eval_batches + k. SkipPipe's 2: the full model, then
  /// a path of L stages (#14).
  int eval_routes = 1;
  int short_eval_stages = 0; ///< the stages the second route visits (for the report)
  bool byte_tokens = true;   ///< a token is a byte of text (a loss reads as bits/byte; else bits/token)
  double grad_clip = 1.0;    ///< global-norm clip; 0 = off
  /// `train.clip: post_validate`: step before the global norm, roll back and redo clipped when it binds.
  bool post_validate = false;
  float weight_decay = 0.1f; ///< AdamW's decoupled weight decay (matrices and embeddings)
  ops::gpt_config model;
  ops::warmup_cosine lr;
  std::vector<std::pair<int, int>> layers; ///< [begin, end) per chunk, chunk c = virtual stage rank + c·ranks
  std::string policy = "1f1b";
  sched::policy_params policy_params;
  /// Credits this stage grants each actor that sends it inputs (activations,
  /// batches or targets): sender -> buffers. Granted at start, returned one by
  /// one as inputs are consumed; 0 (or a missing sender) means
  /// sched::default_credits of the policy's bound.
  std::map<int, int> input_credits;
  std::int64_t checkpoint_every = 0; ///< checkpoint_due(steps done, every, steps) after each update; 0 = never
  troupe::device device;             ///< where the chunks run: cpu or cuda:N (already resolved)
  int max_batch = 1;                 ///< sequences per microbatch (a device model sizes its buffers for it)
  /// What the policy reads as now, in seconds; empty: the steady clock. A
  /// simulated clock makes the engine's decisions those of the harness.
  std::function<double()> clock;
  int replica = 0;  ///< which replica; replica 0 speaks for all in the loss report
  int replicas = 1; ///< replicas of the pipeline (more than one: each reports its own loss too)
  /// What the stage does with its gradients and parameters at the end of a step
  /// (actors/boundary/step_boundary.hpp), in stack order; empty: the local optimizer alone.
  std::vector<boundary_choice> boundaries;
  /// Routing around stragglers (`data_parallel.route: least_loaded`): the next
  /// position's replicas that may take this stage's outputs, how many stages
  /// report the hops each step brings here (0: the plan says), and targets
  /// travelling with the activations (sched::stage_core_config).
  std::vector<int> next_replicas;
  int hop_reporters = 0;
  bool targets_travel = false;
  /// Elastic least_loaded (graph_spec::elastic_least_loaded): every stage
  /// actor's replica (actor index -> replica), to know a lost replica's stages.
  std::map<int, int> stage_replicas;
  /// `pipeline.wire: bf16`: training activations and gradients go to other actors as bf16.
  bool wire_bf16 = false;
  /// An emulated slow device (the actor's `slowdown:`): each action takes this
  /// many times its compute, the rest spent asleep. 1: as fast as it runs.
  double slowdown = 1.0;
  /// A stuck device for one step (the actor's `stall: {step, for}`, tests of
  /// the straggler report and the hang detector): the first action of 0-based
  /// step `stall_step` sleeps `stall_s` before it computes. -1: never.
  step_t stall_step = -1;
  double stall_s = 0;
  /// Core attention on attention servers (#15); no servers: colocated, in one piece.
  stage_attention_config attention;
};

/// Where the engine's results go: every message to another actor (named by its
/// index in the graph) through one `send`, as the message the actor receives:
///   (forward_atom, activation_msg)   to the next hop
///   (backward_atom, gradient_msg)    to the previous hop
///   (eval_atom, activation_msg)      evaluation activations
///   (credit_atom, credit_msg)        credits granted to a sender
///   (norm_atom, step, Σ g², from)    this stage's share of the global norm, to the step's reducer
///   (clip_atom, step, total Σ g²)    reducer -> participant
///   (hops_atom, step, from, count)   microbatches of a step sent to a stage (least_loaded)
///   (attention_atom, attention_task_msg)  a core-attention shard to a server
/// and whatever its step-boundary components send their peers.
struct stage_outbox {
  std::function<void(int actor, caf::message m)> send;
  /// Called right after the optimizer update that completes `steps_done` steps,
  /// when a checkpoint is due; may throw std::runtime_error (a failed write).
  std::function<void(step_t steps_done)> checkpoint;
};

/// What finished at a step boundary, for progress output and the summary.
struct step_report {
  step_t step = 0;
  double loss = 0;      ///< mean training loss over the step's microbatches (last stage)
  double grad_norm = 0; ///< global norm before clipping (0 when clipping is off)
  float lr = 0;
  bool rolled_back = false; ///< post-validation: the early update was undone and redone clipped
};

/// A stage's state machine. Feed it messages; it runs one action per `run_one()`.
/// Throws std::runtime_error (with the stage name) on a broken protocol or a NaN loss.
class stage_engine final : public stage_host {
public:
  stage_engine(stage_config cfg, stage_outbox out);
  ~stage_engine();

  const stage_config& config() const noexcept override { return cfg_; }
  /// Holds the head, so every route ends here and it computes the loss.
  bool owns_loss() const noexcept { return cfg_.loss; }
  step_t step() const noexcept { return core_->step(); }
  bool training_done() const noexcept { return core_->training_done() && awaiting_update_ < 0; }
  /// Evaluation passes whose loss this stage has computed (loss stage only), on
  /// the first evaluation route (the full model); a pass counts once every
  /// route's is in.
  const std::vector<std::pair<step_t, double>>& val_losses() const noexcept { return val_losses_; }
  /// The same passes on the second route, when there is one (SkipPipe: a path of L stages).
  const std::vector<std::pair<step_t, double>>& short_val_losses() const noexcept { return short_val_losses_; }
  const std::vector<step_report>& reports() const noexcept { return reports_; }
  /// Post-validation: steps whose early update this stage rolled back (and redid clipped).
  std::int64_t rollbacks() const noexcept { return rollbacks_; }
  /// The model chunks this rank owns (chunk c = virtual stage rank + c·ranks).
  const std::vector<std::unique_ptr<stage_model>>& models() const noexcept override { return models_; }
  /// The same chunks as gpt_ranges when they run on the CPU; empty on a device.
  const std::vector<ops::gpt_range>& chunks() const noexcept { return chunks_; }
  /// The queue the policy reads (credits, in flight, the step's plan).
  const sched::stage_queue& queue() const noexcept { return core_->queue(); }
  /// The scheduling core (routes, plans, credits, held messages, the norm reduction).
  const sched::stage_core& core() const noexcept { return *core_; }
  /// Messages of later steps waiting for this step's update, now and at most so far.
  std::size_t held_count() const noexcept { return core_->held_count(); }
  std::size_t max_held() const noexcept { return core_->max_held(); }
  /// Credits granted to senders at start (the bound on held inputs).
  int credits_granted() const noexcept { return core_->credits_granted(); }

  /// Grants every sender its credits.
  void start();
  void on_plan(const step_plan_msg& m);
  void on_batch(const batch_msg& m, bool eval);
  void on_activation(const activation_msg& m, bool eval);
  void on_gradient(const gradient_msg& m);
  void on_credit(const credit_msg& m);
  /// A sender of the previous position sent this stage `count` microbatches in `step` (least_loaded).
  void on_hops(step_t step, int from, int count);
  /// Elastic least_loaded (#26): replica `replica` left the run. Its stages get
  /// nothing more from here and what comes from them is dropped; a microbatch
  /// whose output went to one of them takes a zero gradient instead of the one
  /// that will not come (sched::stage_core::drop_actors), so it adds nothing.
  void on_replica_lost(int replica);
  /// Elastic least_loaded (#26): the lost replica of the loader's rejoin_msg is
  /// in the run again from its step (sched::stage_core::add_actors); the donor's
  /// stage then hands the message to its step-boundary components too.
  void on_rejoin(const caf::message& m);
  /// Reducer: another participant's Σ g² for `step`.
  void on_norm(step_t step, double sq_norm, int from);
  /// Participant: the global Σ g² for `step`, from the reducer.
  void on_clip(step_t step, double total_sq);
  /// A message for one of the step-boundary components (from its peer actor).
  /// Throws std::runtime_error when none of them takes it.
  void on_boundary_message(const caf::message& m);
  /// Any message a stage receives from other actors (as stage_outbox lists them,
  /// plus batches and plans from the router), handed to the call above that takes it.
  void on_message(const caf::message& m);
  /// Adds a component at the top of the stack (before start()): the first to be asked at each point.
  void add_step_boundary(std::unique_ptr<step_boundary> b);
  /// The stack's components, top first.
  const std::vector<std::unique_ptr<step_boundary>>& step_boundaries() const noexcept { return boundaries_; }
  /// Bytes of parameters, gradients and optimizer state this stage holds.
  held_bytes held() const;
  /// Attention servers: the pieces' state (null when attention is colocated).
  const stage_attention* attention() const noexcept { return attention_.get(); }
  /// Attention servers: a server's answer for the microbatch in pieces.
  void on_attention_result(const attention_result_msg& m);
  /// In place: runs another stage's core-attention shard; the actor sends the answer to m.key.from.
  attention_result_msg serve_attention(const attention_task_msg& m);

  /// Runs the policy's next action, if any; true when one ran (call again soon).
  bool run_one();
  /// After run_one() found nothing to run: seconds from now after which the
  /// policy wants to be asked again even without a message (its patience).
  std::optional<double> wake_in() const;
  /// The state a checkpoint holds, in chunk and parameter order: each parameter
  /// under its own name, then its optimizer's state as `optimizer.KIND.NAME`
  /// (AdamW: `optimizer.exp_avg.NAME`, `optimizer.exp_avg_sq.NAME`); CPU handles
  /// share the live storage: write them out before the next step. Metadata:
  /// `optimizer.steps` per chunk.
  std::vector<named_handle> checkpoint_tensors();
  std::map<std::string, std::string> checkpoint_metadata();
  /// Loads a checkpoint's state (before start()): parameters, optimizer state and
  /// step counts, and continues at step `steps_done`. On a missing tensor or a
  /// shape that differs, returns errc::invalid_argument naming `file`, the
  /// tensor and both shapes, and changes nothing.
  caf::error restore(const safetensors_file& f, step_t steps_done, const std::string& file);
  /// A warm start (`train.init`): takes the parameters of checkpoint part `f`
  /// (`file` names it in errors) and nothing else: the optimizer state stays
  /// fresh and the run starts at step 0. Checked first; a mismatch changes nothing.
  caf::error load_weights(const safetensors_file& f, const std::string& file);

  /// Nanoseconds spent in model compute (forward, backward, optimizer) so far.
  std::int64_t compute_ns() const noexcept { return compute_ns_; }
  /// Nanoseconds of forward and backward actions in each step, by step (the
  /// thread's CPU time plus an emulated device's sleep): the step time the
  /// straggler report compares (runtime/trace/step_stats.hpp).
  const std::map<step_t, std::int64_t>& step_busy_ns() const noexcept { return step_busy_ns_; }
  std::uint16_t trace_id = 0;

private:
  /// The tensors of one hop of one microbatch in this step, by (chunk, microbatch).
  struct tensors {
    stage_tensor input;    ///< tokens (first hop) or an activation
    tensor_handle targets; ///< the loss hop's targets, from the router
    stage_tensor grad;     ///< the output gradient (not on the loss hop)
    shape_t sent;          ///< the shape of the activation it sent on (a zero gradient's, if backed out)
  };
  tensors& slot(int chunk, int mb);
  void compute(const sched::stage_task& t);
  /// Runs one pass (not an F&B) and returns its output (an activation, a gradient, or none).
  stage_tensor run_pass(const sched::stage_task& t);
  /// With attention servers: starts `t` in pieces (stage_attention).
  void start_pieces(const sched::stage_task& t);
  /// The microbatch in pieces is done: its output goes along the route.
  void finish_pieces();
  /// A forward's loss on the loss hop: checked, and added to the step's.
  void record_loss(const sched::stage_task& t, const tensors& w, double v);
  void run_eval(const route_t& route, int hop, int mb, const stage_tensor& input, step_t step);
  double gradients_complete(step_t step);
  void update(step_t step, double total_sq);
  /// Post-validation: the update of `step` before the global norm (update() then validates it).
  void update_early(step_t step);
  step_boundary& applier();
  /// The update of `step` is applied (now, or when its component says so).
  void finish_update(const step_report& rep, std::int64_t tokens);
  stage_model& chunk(int c) { return *models_[static_cast<std::size_t>(c)]; }
  /// Checks part `f` against the chunks (parameters, and `kinds` of optimizer
  /// state beside each), then loads the parameters; the per-chunk optimizer
  /// steps go to `optimizer_steps` when given. A mismatch changes nothing.
  caf::error load_part(const safetensors_file& f, const std::string& file, const std::vector<std::string>& kinds,
                       std::vector<long>* optimizer_steps);
  // stage_host, for the components
  void send(int to, caf::message m) override;
  void synced(step_t step) override;
  void exchanged() override;
  void applied(step_t step) override;
  double loss_sum() const override { return loss_sum_; }
  void set_loss_sum(double v) override { loss_sum_ = v; }
  std::vector<tensor_handle> optimizer_state(std::string_view kind) const override;
  safetensors_file state() override;

  stage_config cfg_;
  stage_outbox out_;
  /// The step boundary's components (their optimizers among them), top first;
  /// declared before the models, so a device model finishes the work queued on
  /// its stream before they go.
  std::vector<std::unique_ptr<step_boundary>> boundaries_;
  std::vector<ops::gpt_range> chunks_; ///< the CPU chunks, which models_ wrap
  std::vector<std::unique_ptr<stage_model>> models_;
  std::unique_ptr<sched::stage_core> core_;
  /// This step's tensors by [chunk][microbatch]; the vectors are reused across steps.
  std::vector<std::vector<tensors>> work_;
  /// The running action's outputs until the core sends them: [0] the
  /// activation a forward sends on, [1] the gradient a backward sends back (an F&B has both).
  stage_tensor outputs_[2];
  std::unique_ptr<stage_attention> attention_;                  ///< attention servers: actions run in pieces
  sched::stage_task pieces_task_;                               ///< the action in pieces
  bool pieces_weight_pass_ = false;                             ///< it is a weight-gradient pass
  bool pass_last_ = false;                                      ///< the pass is the step's last over its chunk
  std::map<int, tensor_handle> eval_targets_;                   ///< eval batch -> targets
  std::map<int, std::pair<route_t, stage_tensor>> eval_inputs_; ///< eval batch -> activation (arrived first)
  double loss_sum_ = 0;                                         ///< Σ loss × tokens over the step's microbatches
  /// This replica's own share of them (before any sum over replicas): its loss curve.
  double own_loss_sum_ = 0;
  std::int64_t own_tokens_ = 0;
  /// With replicas, the loss of this replica's own microbatches as the trace
  /// counter `loss:rN` (the dashboard's and /metrics' per-replica loss).
  void report_replica_loss(step_t step);
  step_t eval_step_ = -1;        ///< the pass being summed (one a replica's loss cut short is not mixed in)
  std::vector<double> eval_sum_; ///< by evaluation route: Σ loss of this pass's batches
  std::vector<int> eval_seen_;   ///< by evaluation route: batches whose loss is in
  std::vector<std::pair<step_t, double>> val_losses_, short_val_losses_;
  std::vector<step_report> reports_;
  step_t early_step_ = -1; ///< post-validation: the step whose update ran before its norm, or -1
  std::int64_t rollbacks_ = 0;
  std::int64_t compute_ns_ = 0;
  std::map<step_t, std::int64_t> step_busy_ns_;
  std::int64_t idle_since_ns_ = -1; ///< when the policy last had nothing to run; -1 when busy
  // Weight-gradient passes, for components that sync during the backward.
  std::map<step_t, int> plan_hops_;   ///< step -> hops its plan gives this stage
  std::map<int, int> replica_losses_; ///< elastic least_loaded: replica -> the losses of it heard
  bool started_ = false;              ///< start() ran: its credits went out
  std::vector<int> weight_passes_;    ///< this step's weight-gradient passes per chunk
  step_t passes_step_ = -1;
  bool begin_weight_pass(const sched::stage_task& t);
  void end_weight_pass();
  /// Runs the stack's syncs of `step` from next_sync_ on, in order: each starts
  /// once the one above it is done, so it sees the gradients that one left (the
  /// tied embeddings' exchange adds the twin's gradient to the replicas' sum).
  /// True when the last is done.
  bool run_syncs(step_t step);
  std::size_t next_sync_ = 0; ///< the component whose sync runs next
  bool syncing_ = false;      ///< a sync of this step is still running
  // An update a component applies elsewhere (ZeRO): nothing runs here until it is back.
  bool hold_for_params(std::function<void()> replay);
  step_t awaiting_update_ = -1;                    ///< the step whose update is out, or -1
  std::vector<std::function<void()>> params_held_; ///< messages that came meanwhile, in order
  step_report pending_report_;
  std::int64_t pending_tokens_ = 0;
  std::int64_t pending_checkpoint_ = -1;
  /// Runs every component's after_update; true when none must be waited for.
  bool exchange(step_t steps_done);
  int exchanges_out_ = 0;        ///< components whose exchange after the update is still running
  step_t pending_exchange_ = -1; ///< an exchange due once an update applied elsewhere is back
};

/// What a stage's checkpoint part must hold, known from its header alone:
/// `optimizer.steps` for each chunk; each parameter of `layouts` (one list per
/// chunk) with its shape and dtype; for a chunk whose optimizer has stepped, its
/// state of each of `kinds` (`optimizer.KIND.NAME`); and nothing else. What
/// does not fit, or nullopt; `optimizer_steps`, when given, gets the per-chunk counts.
std::optional<std::string> check_stage_part(const safetensors_header& part,
                                            const std::vector<std::vector<param_info>>& layouts,
                                            const std::vector<std::string>& kinds,
                                            std::vector<long>* optimizer_steps = nullptr);

} // namespace troupe
