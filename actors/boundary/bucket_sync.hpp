// What the DDP ring and ZeRO's optimizer shards share at a stage's step
// boundary: gradient buckets that leave during the step's last backward pass
// over each chunk, and a step that waits only for the ones still out.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/boundary/grad_buckets.hpp"
#include "actors/stage/stage_engine.hpp"
#include "actors/boundary/step_boundary.hpp"

namespace troupe {

/// `data_parallel:`'s options for a bucketed sync.
struct bucket_options {
  std::int64_t bucket_bytes = 4 << 20; ///< gradient bytes per bucket
  bool overlap = true;                 ///< buckets go during the last backward pass (else once the step's work is done)
  int zero = 0;                        ///< 0: all-reduce peers; 1, 2: ZeRO's optimizer shards
  /// The ring's first member: it counts the (summed, hence equal) gradients in
  /// the global norm for its whole ring.
  bool first = true;
  /// Parameters whose gradient a component above rewrites at the step boundary
  /// (a tied matrix, actors/boundary/tied_embeddings.cpp): each goes in a bucket
  /// of its own, once the step's backward is done.
  std::vector<std::string> alone = {};
  /// Of those, the ones the global norm leaves out (a tied matrix's second copy).
  std::vector<std::string> uncounted = {};
};

/// The bucketed part of a sync component; `peer` serves this stage.
class bucket_sync : public step_boundary {
public:
  bucket_sync(stage_host& host, const boundary_choice& c)
      : host_(host), peer_(c.peer), opt_(std::any_cast<bucket_options>(c.options)) {
    std::function<double()> loss;
    if (host.config().loss)
      loss = [&host] { return host.loss_sum(); };
    buckets_ = std::make_unique<grad_buckets>(
      host.models(), opt_.bucket_bytes, std::move(loss),
      [this](bucket_msg m) { host_.send(peer_, caf::make_message(bucket_atom::value, std::move(m))); }, opt_.zero > 0,
      opt_.alone);
  }
  void begin_pass(step_t step, int chunk, bool last) override {
    buckets_->begin_pass(step, chunk, last && opt_.overlap);
  }
  void end_pass() override { buckets_->end_pass(); }
  bool sync(step_t step) override { return buckets_->flush(step); }

protected:
  stage_host& host_;
  int peer_;
  bucket_options opt_;
  std::unique_ptr<grad_buckets> buckets_;
};

} // namespace troupe
