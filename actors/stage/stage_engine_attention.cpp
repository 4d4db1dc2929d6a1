// A stage engine's actions in pieces around core attention, when attention
// servers run it (stage_attention, #15): starting an action, finishing it, and
// the servers' traffic.
#include <fmt/format.h>

#include "actors/stage/stage_engine.hpp"
#include "actors/stage/stage_engine_detail.hpp"

namespace troupe {

using detail::loss_grad;
using detail::span_of;
using detail::take;

void stage_engine::start_pieces(const sched::stage_task& t) {
  const auto& a = t.what;
  scoped_span s(trace_id, span_of(a.kind), static_cast<std::int32_t>(t.step), a.microbatch);
  auto t0 = trace_now();
  auto& w = slot(t.chunk, a.microbatch);
  auto& range = chunks_[static_cast<std::size_t>(t.chunk)];
  // A split backward (zb_h1): the input-gradient half in pieces like a fused
  // one, then the weight gradients of each nano-batch here, with no attention.
  const bool weights = a.kind != sched::op_kind::input_grad;
  if (a.kind == sched::op_kind::weight_grad) {
    attention_->backward_weight(t.chunk, a.microbatch, range);
  } else if (a.kind == sched::op_kind::forward) {
    auto input = take(w.input, "input", cfg_.name);
    input.value = host_f32(input);
    attention_->start_forward(t.step, t.chunk, a.microbatch, range, input, t.loss ? w.targets : tensor_handle{});
  } else if (t.loss) { // as compute() does: the microbatch's share of the step's tokens
    auto tokens = core_->step_tokens();
    if (tokens <= 0)
      throw std::runtime_error(fmt::format("{}: step {} has no tokens in its plan", cfg_.name, t.step));
    attention_->start_backward(t.step, t.chunk, a.microbatch, range, loss_grad(w.targets.numel(), tokens), weights);
    w.targets = {};
  } else {
    attention_->start_backward(t.step, t.chunk, a.microbatch, range, host_f32(take(w.grad, "gradient", cfg_.name)),
                               weights);
  }
  compute_ns_ += trace_now() - t0;
}

void stage_engine::finish_pieces() {
  const auto& t = pieces_task_;
  if (t.what.kind == sched::op_kind::weight_grad) { // ran whole in start_pieces, with nothing to send on
    core_->finish(t);
    return;
  }
  auto out = attention_->take_output();
  if (t.what.kind == sched::op_kind::forward && t.loss) {
    record_loss(t, slot(t.chunk, t.what.microbatch), out.value.data<float>()[0]);
    out = {};
  }
  if (out.defined())
    outputs_[t.what.kind == sched::op_kind::forward ? 0 : 1] = std::move(out);
  core_->finish(t);
}

void stage_engine::on_attention_result(const attention_result_msg& m) {
  if (!attention_)
    throw std::runtime_error(fmt::format("{}: an attention answer, but this stage sends no attention", cfg_.name));
  attention_->on_result(m);
}

attention_result_msg stage_engine::serve_attention(const attention_task_msg& m) {
  if (!attention_ || attention_->config().self_server < 0)
    throw std::runtime_error(
      fmt::format("{}: an attention task from actor {}, but this stage serves none", cfg_.name, m.key.from));
  return attention_->server().serve(m);
}

} // namespace troupe
