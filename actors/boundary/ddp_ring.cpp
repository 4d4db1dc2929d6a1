// The DDP step boundary: a stage's gradient buckets go to its all-reduce peer
// during the backward and come back summed over the replicas (with the step's
// loss), before the stage's own optimizer applies them.
#include <fmt/format.h>

#include "actors/boundary/bucket_sync.hpp"
#include "actors/boundary/rejoin_donor.hpp"
#include "actors/builtin.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe {

namespace {

class ddp_ring final : public bucket_sync {
public:
  using bucket_sync::bucket_sync;
  std::string_view type() const override { return "ddp_ring"; }

  /// The ring's members hold the same summed gradients: its first counts them for the global norm.
  std::optional<double> norm_share(step_t) override {
    if (opt_.first)
      return std::nullopt;
    return 0.0;
  }

  /// A rejoining replica's stage takes this one's state after the loader's step (elastic DDP, #26).
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
    if (!m.match_elements<reduced_atom, step_t, std::int32_t>())
      return false;
    auto step = m.get_as<step_t>(1);
    if (buckets_->on_reduced(step, m.get_as<std::int32_t>(2))) {
      if (host_.config().loss)
        host_.set_loss_sum(buckets_->loss_sum()); // the whole step's, over every replica
      host_.synced(step);
    }
    return true;
  }

private:
  step_t steps_ = 0; ///< steps done (after_update's last)
  rejoin_donor donor_;
};

} // namespace

step_boundary_type ddp_ring_boundary() {
  return {"ddp_ring",
          [](const graph_spec& g, const actor_spec& stage) -> std::optional<boundary_choice> {
            int peer = helper_of(g, "allreduce_peer", stage.name);
            if (peer < 0)
              return std::nullopt;
            return boundary_choice{{},
                                   peer,
                                   bucket_options{g.data_parallel.bucket, g.data_parallel.overlap, 0,
                                                  // elastic DDP: each replica reduces its own norm
                                                  g.elastic_ddp() || stage.replica % g.sync_group_size() == 0}};
          },
          [](stage_host& host, const boundary_choice& c) -> std::unique_ptr<step_boundary> {
            return std::make_unique<ddp_ring>(host, c);
          }};
}

} // namespace troupe
