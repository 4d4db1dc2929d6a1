// ZeRO-1/2 at a stage's step boundary: its gradient buckets are
// reduce-scattered to optimizer shards that own a slice of the optimizer state
// each; after the global norm the stage asks its shard to update and runs
// nothing until the updated parameters are gathered back into it. In an
// elastic launch the shards mirror each other's slices
// (actors/optimizer_shard_direct.cpp), and a rejoining replica's stage takes
// its parameters from a live replica's.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "actors/boundary/bucket_sync.hpp"
#include "actors/boundary/rejoin_donor.hpp"
#include "actors/builtin.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe {

namespace {

class zero_shards final : public bucket_sync {
public:
  zero_shards(stage_host& host, const boundary_choice& c) : bucket_sync(host, c) {
    for (const auto& name : opt_.uncounted)
      uncounted_.push_back(buckets_->bucket_holding(name));
  }
  std::string_view type() const override { return "zero_shards"; }

  /// Every replica's shard holds a different slice: each counts its own (in an
  /// elastic launch each the whole bucket's, so every replica reduces the
  /// same norm). Summed in bucket order, however the buckets came back.
  std::optional<double> norm_share(step_t) override {
    double sq = 0;
    for (const auto& [b, v] : slice_sq_)
      sq += v;
    slice_sq_.clear();
    return host_.config().grad_clip > 0 ? sq : 0.0;
  }

  bool applies_update() const override { return true; }
  bool apply(step_t step, float lr, float clip) override {
    host_.send(peer_, caf::make_message(shard_step_atom::value, step, lr, clip));
    asked_ = step;
    return false;
  }

  /// A rejoining replica's stage takes this one's parameters after the loader's step (elastic ZeRO, #26).
  bool after_update(step_t steps_done) override {
    steps_ = steps_done;
    donor_.maybe_send(host_, steps_);
    return true;
  }
  void resume_at(step_t steps_done) override { steps_ = steps_done; }

  bool receive(const caf::message& m) override {
    if (m.match_elements<rejoin_atom, rejoin_msg>()) { // this replica is the donor
      donor_.take(m.get_as<rejoin_msg>(1), steps_, host_);
      donor_.maybe_send(host_, steps_); // at that step already: its state now
      return true;
    }
    if (m.match_elements<reduced_atom, step_t, std::int32_t, double>()) {
      auto step = m.get_as<step_t>(1);
      if (auto b = m.get_as<std::int32_t>(2); std::find(uncounted_.begin(), uncounted_.end(), b) == uncounted_.end())
        slice_sq_[b] = m.get_as<double>(3);
      if (buckets_->on_reduced(step, m.get_as<std::int32_t>(2)))
        host_.synced(step);
      return true;
    }
    if (!m.match_elements<updated_atom, step_t>())
      return false;
    auto step = m.get_as<step_t>(1);
    if (step != asked_)
      throw std::runtime_error(
        fmt::format("{}: the optimizer shard returned the parameters of step {}, which it was not asked for",
                    host_.config().name, step));
    asked_ = -1;
    for (const auto& model : host_.models()) {
      model->params_updated();
      if (opt_.zero == 2) // the shards hold the reduced slices until the next step's backward
        model->release_grads();
      else
        model->zero_grads();
    }
    if (opt_.zero == 2)
      buckets_->drop_grads();
    host_.set_loss_sum(buckets_->loss_sum()); // the whole step's, over every replica, gathered with the parameters
    host_.applied(step);
    return true;
  }

  /// The shards keep the optimizer state: none here, 0 steps per chunk (a part
  /// that holds some fails the stage's check: it has tensors this stage does not keep).
  std::optional<std::vector<long>> optimizer_steps() const override {
    return std::vector<long>(host_.models().size(), 0);
  }

private:
  std::map<int, double> slice_sq_; ///< Σ g² of the shard's slice of each bucket this step
  std::vector<int> uncounted_;     ///< buckets the global norm leaves out (a tied matrix's second copy)
  step_t asked_ = -1;              ///< the step whose update the shard is making
  step_t steps_ = 0;               ///< steps done (after_update's last)
  rejoin_donor donor_;
};

} // namespace

step_boundary_type zero_shards_boundary() {
  return {"zero_shards",
          [](const graph_spec& g, const actor_spec& stage) -> std::optional<boundary_choice> {
            int peer = helper_of(g, "optimizer_shard", stage.name);
            if (peer < 0)
              return std::nullopt;
            bucket_options o{g.data_parallel.bucket, g.data_parallel.overlap, g.data_parallel.zero};
            // Tied embeddings: the copies' gradients are summed before the shards
            // take them, and the second copy is counted once, by its twin's shards.
            for (const auto& t : tied_copies_on(g, stage)) {
              o.alone.push_back(t.name);
              if (!t.counted)
                o.uncounted.push_back(t.name);
            }
            return boundary_choice{{}, peer, std::move(o)};
          },
          [](stage_host& host, const boundary_choice& c) -> std::unique_ptr<step_boundary> {
            return std::make_unique<zero_shards>(host, c);
          }};
}

} // namespace troupe
