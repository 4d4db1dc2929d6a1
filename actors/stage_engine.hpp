// The compute side of a pipeline-stage actor, free of CAF: the model chunks this
// rank owns (on the CPU or a CUDA device), the queue its policy reads, held
// messages of future steps, and the step boundary (global-norm clipping and the
// optimizer step).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/stage_model.hpp"
#include "ops/gpt.hpp"
#include "ops/lr_schedule.hpp"
#include "ops/optimizer.hpp"
#include "runtime/messages.hpp"
#include "runtime/safetensors.hpp"
#include "schedulers/stage_policy.hpp"

namespace troupe {

/// What one stage actor needs to know about the run.
struct stage_config {
  std::string name;
  int rank = 0;
  int ranks = 1;
  int chunks = 1;                    ///< virtual stages (model chunks) on this rank
  int microbatches = 1;
  std::int64_t steps = 1;
  std::int64_t eval_every = 0;       ///< 0: evaluate only after the last step
  int eval_batches = 8;
  double grad_clip = 1.0;            ///< global-norm clip; 0 = off
  float weight_decay = 0.1f;         ///< AdamW's decoupled weight decay (matrices and embeddings)
  ops::gpt_config model;
  ops::warmup_cosine lr;
  std::vector<std::pair<int, int>> layers;  ///< [begin, end) per chunk, chunk c = virtual stage rank + c·ranks
  std::string policy = "1f1b";
  sched::policy_params policy_params;
  std::int64_t checkpoint_every = 0;  ///< checkpoint_due(steps done, every, steps) after each update; 0 = never
  troupe::device device;             ///< where the chunks run: cpu or cuda:N (already resolved)
  int max_batch = 1;                 ///< sequences per microbatch (a device model sizes its buffers for it)
};

/// Where the engine's results go; the actor sends them as messages.
struct stage_outbox {
  std::function<void(int rank, const activation_msg&)> forward;   ///< to the rank owning msg.stage
  std::function<void(int rank, const gradient_msg&)> backward;
  std::function<void(int rank, const activation_msg&)> eval;      ///< evaluation activations
  std::function<void(step_t step, double sq_norm)> norm;          ///< to every other rank
  std::function<void(int count)> credit;                          ///< rank 0: more loader batches
  /// Called when the step's gradients are complete, before clipping and the
  /// optimizer (the place for a data-parallel all-reduce), with the CPU chunks
  /// (empty on a device stage: models() has every stage's); may be empty.
  std::function<void(step_t step, std::vector<ops::gpt_range>& chunks)> before_update;
  /// Called right after the optimizer update that completes `steps_done` steps,
  /// when a checkpoint is due; may throw std::runtime_error (a failed write).
  std::function<void(step_t steps_done)> checkpoint;
};

/// What finished at a step boundary, for progress output and the summary.
struct step_report {
  step_t step = 0;
  double loss = 0;        ///< mean training loss over the step's microbatches (last stage)
  double grad_norm = 0;   ///< global norm before clipping (0 when clipping is off)
  float lr = 0;
};

/// A stage's state machine. Feed it messages; it runs one action per `run_one()`.
/// Throws std::runtime_error (with the stage name) on a broken protocol or a NaN loss.
class stage_engine {
public:
  stage_engine(stage_config cfg, stage_outbox out);

  const stage_config& config() const noexcept { return cfg_; }
  bool owns_loss() const noexcept;  ///< holds the last virtual stage
  step_t step() const noexcept { return step_; }
  bool training_done() const noexcept { return step_ >= cfg_.steps; }
  /// Evaluation passes whose loss this stage has computed (last stage only).
  const std::vector<std::pair<step_t, double>>& val_losses() const noexcept { return val_losses_; }
  const std::vector<step_report>& reports() const noexcept { return reports_; }
  /// The model chunks this rank owns (chunk c = virtual stage rank + c·ranks).
  const std::vector<std::unique_ptr<stage_model>>& models() const noexcept { return models_; }
  /// The same chunks as gpt_ranges when they run on the CPU; empty on a device.
  const std::vector<ops::gpt_range>& chunks() const noexcept { return chunks_; }

  /// The rank's initial credit to the data loader (rank 0).
  void start();
  void on_batch(const batch_msg& m, bool eval);
  void on_activation(const activation_msg& m, bool eval);
  void on_gradient(const gradient_msg& m);
  void on_norm(step_t step, double sq_norm);

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

  /// Nanoseconds spent in model compute (forward, backward, optimizer) so far.
  std::int64_t compute_ns() const noexcept { return compute_ns_; }
  std::uint16_t trace_id = 0;

private:
  struct held {
    enum kind_t { batch, activation, gradient } kind;
    bool eval;
    batch_msg b;
    activation_msg a;
    gradient_msg g;
  };
  /// True when a message belongs to a later step than this rank is in.
  bool is_future(step_t msg_step, bool eval) const noexcept { return eval ? msg_step >= step_ : msg_step > step_; }
  void release_held();
  void push_input(int stage, int mb);
  void execute(const sched::action& a);
  void run_eval(int stage, int batch, const stage_tensor& input, step_t step);
  void maybe_finish_step();
  void finish_step();
  int rank_of(int stage) const noexcept { return stage % cfg_.ranks; }
  stage_model& chunk(int stage) { return *models_[static_cast<std::size_t>(stage / cfg_.ranks)]; }

  stage_config cfg_;
  stage_outbox out_;
  /// One per model chunk, over its parameters; declared before the models, so a
  /// device model finishes the work queued on its stream before they go.
  std::vector<std::unique_ptr<ops::optimizer>> optimizers_;
  std::vector<ops::gpt_range> chunks_;                   ///< the CPU chunks, which models_ wrap
  std::vector<std::unique_ptr<stage_model>> models_;
  sched::policy_ptr policy_;
  sched::stage_queue queue_;
  step_t step_ = 0;
  // Fixed slots, so a training step allocates nothing for bookkeeping:
  // index chunk · microbatches + mb; an undefined handle is an empty slot.
  std::vector<stage_tensor> inputs_;    ///< input of (stage, mb)
  std::vector<tensor_handle> targets_;  ///< targets of mb (loss stage)
  std::vector<stage_tensor> grads_;     ///< output gradient of (stage, mb)
  /// The slot of (stage, mb); throws std::runtime_error for a stage this rank
  /// does not own or a microbatch out of range (a broken message).
  std::size_t slot(int stage, int mb) const;
  std::map<int, tensor_handle> eval_targets_;             ///< eval batch -> targets
  std::map<int, stage_tensor> eval_inputs_;               ///< eval batch -> activation (arrived first)
  std::vector<held> held_;
  std::map<step_t, std::pair<int, double>> norms_;        ///< step -> (ranks heard, Σ sq norms)
  bool awaiting_norms_ = false;
  double loss_sum_ = 0;
  int forwards_started_ = 0;
  tensor_handle loss_grad_;                               ///< [1] holding 1/microbatches
  double eval_sum_ = 0;
  int eval_seen_ = 0;
  std::vector<std::pair<step_t, double>> val_losses_;
  std::vector<step_report> reports_;
  std::int64_t compute_ns_ = 0;
  std::int64_t idle_since_ns_ = -1;  ///< when the policy last had nothing to run; -1 when busy
};

} // namespace troupe
