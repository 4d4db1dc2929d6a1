// A stage's step boundary in its engine: its share of the global norm, and the
// optimizer update once the total is in, or (post-validation) before it, then
// kept, or rolled back and redone clipped, when the total comes.
#include "actors/stage/stage_engine.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "ops/grad_clip.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe {

double stage_engine::gradients_complete(step_t step) {
  plan_hops_.erase(step);
  std::optional<double> share;
  for (auto& b : boundaries_) // every one is asked: a component may reset its count
    if (auto s = b->norm_share(step); s && !share)
      share = s;
  if (share)
    return *share;
  double own_sq = 0; // the stage's own gradients
  if (cfg_.grad_clip > 0)
    for (auto& m : models_)
      own_sq += m->grad_sq_norm();
  return own_sq;
}

void stage_engine::update(step_t step, double total_sq) {
  // When the global norm reached this stage, before the optimizer span below
  // (with post-validation the step's first optimizer span began before it).
  if (cfg_.grad_clip > 0 && trace_recorder::global().enabled())
    trace_recorder::global().count(fmt::format("grad_norm:{}", cfg_.name), std::sqrt(total_sq),
                                   static_cast<std::int32_t>(step));
  scoped_span s(trace_id, span_kind::optimizer, static_cast<std::int32_t>(step));
  auto t0 = trace_now();
  auto tokens = core_->step_tokens();
  step_report rep{step, 0, 0, cfg_.lr.at(step)};
  float clip = 1.0f;
  bool early = std::exchange(early_step_, -1) == step;
  if (cfg_.grad_clip > 0) {
    rep.grad_norm = std::sqrt(total_sq);
    if (!std::isfinite(rep.grad_norm)) {
      if (early)
        applier().validated(false); // the parameters before the step: nothing is lost
      throw std::runtime_error(fmt::format("{}: the gradient norm is {} at step {} (lr {:.3g}); lower train.lr "
                                           "or raise train.warmup",
                                           cfg_.name, rep.grad_norm, step, rep.lr));
    }
    clip = std::min(ops::clip_factor(rep.grad_norm, cfg_.grad_clip), 1.0f);
  }
  bool done = true;
  if (early && clip >= 1.0f) {
    applier().validated(true); // the unclipped update was the right one
  } else {
    if (early) { // the clip binds: back to before the step, then the clipped update, as synchronous clipping makes it
      applier().validated(false);
      rep.rolled_back = true;
      ++rollbacks_;
    }
    done = applier().apply(step, rep.lr, clip);
  }
  compute_ns_ += trace_now() - t0;
  for (auto& chunk_work : work_)
    for (auto& w : chunk_work)
      w = {};
  if (!done) { // applied elsewhere (ZeRO's shards): nothing runs here until the parameters are back
    pending_report_ = rep, pending_tokens_ = tokens;
    awaiting_update_ = step;
    return;
  }
  finish_update(rep, tokens);
}

void stage_engine::update_early(step_t step) {
  scoped_span s(trace_id, span_kind::optimizer, static_cast<std::int32_t>(step));
  auto t0 = trace_now();
  auto& b = applier();
  if (!b.apply_early(step, cfg_.lr.at(step)))
    throw std::runtime_error(fmt::format("{}: train.clip: post_validate steps before the global norm and may roll "
                                         "back, which the step-boundary component {} cannot (its update runs "
                                         "elsewhere); use clip: sync",
                                         cfg_.name, b.type()));
  early_step_ = step;
  compute_ns_ += trace_now() - t0;
}

step_boundary& stage_engine::applier() {
  for (auto& b : boundaries_)
    if (b->applies_update())
      return *b;
  throw std::logic_error(fmt::format("{}: no step-boundary component applies the update", cfg_.name));
}

void stage_engine::finish_update(const step_report& r, std::int64_t tokens) {
  auto rep = r;
  rep.loss = tokens > 0 ? loss_sum_ / static_cast<double>(tokens) : 0.0;
  if (cfg_.loss && cfg_.replica == 0) {
    reports_.push_back(rep);
    trace_recorder::global().count("loss", rep.loss, static_cast<std::int32_t>(rep.step));
    if (cfg_.post_validate) // steps rolled back so far (every stage rolls back the same ones)
      trace_recorder::global().count("rollbacks", static_cast<double>(rollbacks_), static_cast<std::int32_t>(rep.step));
  }
  report_replica_loss(rep.step);
  loss_sum_ = 0;
}

} // namespace troupe
