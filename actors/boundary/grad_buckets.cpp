// Gradient buckets of a data-parallel stage (actors/boundary/grad_buckets.hpp).
#include "actors/boundary/grad_buckets.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

grad_buckets::grad_buckets(const std::vector<std::unique_ptr<stage_model>>& models, std::int64_t bucket_bytes,
                           std::function<double()> loss_sum, send_fn send, bool zero,
                           const std::vector<std::string>& alone)
    : models_(models), loss_sum_(std::move(loss_sum)), send_(std::move(send)) {
  std::vector<std::vector<std::int64_t>> bytes;
  for (const auto& m : models_) {
    auto& b = bytes.emplace_back();
    for (const auto& g : m->grads())
      b.push_back(static_cast<std::int64_t>(g.value.nbytes()));
  }
  std::vector<sched::param_ref> own; // the `alone` parameters
  for (const auto& name : alone)
    for (std::size_t c = 0; c < models_.size(); ++c)
      for (std::size_t i = 0; i < models_[c]->grads().size(); ++i)
        if (models_[c]->grads()[i].name == name)
          own.push_back({static_cast<int>(c), static_cast<int>(i)});
  layout_ = sched::make_buckets(bytes, bucket_bytes, own);
  deferred_.assign(layout_.size() - own.size(), false);
  deferred_.resize(layout_.size(), true);
  bucket_of_.resize(models_.size());
  for (std::size_t c = 0; c < models_.size(); ++c)
    bucket_of_[c].assign(models_[c]->grads().size(), -1);
  buckets_.resize(layout_.size());
  grad_shapes_.resize(layout_.size());
  for (std::size_t b = 0; b < layout_.size(); ++b)
    for (const auto& p : layout_[b]) {
      bucket_of_[static_cast<std::size_t>(p.chunk)][static_cast<std::size_t>(p.index)] = static_cast<int>(b);
      const auto& g = models_[static_cast<std::size_t>(p.chunk)]->grads()[static_cast<std::size_t>(p.index)].value;
      if (g.type() != dtype::f32 || !g.device().is_cpu())
        throw std::invalid_argument(
          fmt::format("data_parallel: gradient '{}' is not an f32 host tensor; replicas train on the CPU for now",
                      models_[static_cast<std::size_t>(p.chunk)]->grads()[static_cast<std::size_t>(p.index)].name));
      buckets_[b].tensors.push_back(g);
      grad_shapes_[b].push_back(g.shape());
      if (zero)
        buckets_[b].params.push_back(
          models_[static_cast<std::size_t>(p.chunk)]->params()[static_cast<std::size_t>(p.index)].value);
    }
  if (loss_sum_ && !buckets_.empty()) {
    loss_ = tensor_handle::empty({1});
    if (zero) {
      buckets_.emplace_back(); // a bucket of its own, sent when the step's backward is done
      deferred_.push_back(false);
    }
    buckets_.back().tensors.push_back(loss_);
  }
  for (std::size_t c = 0; c < models_.size(); ++c)
    models_[c]->on_grads_done(
      [this, c](std::size_t first, std::size_t end) { grads_done(static_cast<int>(c), first, end); });
}

void grad_buckets::begin_pass(std::int64_t step, int chunk, bool last) {
  if (step != step_) { // a new step: every bucket waits for its chunk's last pass again
    step_ = step, back_ = 0;
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      buckets_[b] = {std::move(buckets_[b].tensors), std::move(buckets_[b].params),
                     b < layout_.size() ? static_cast<int>(layout_[b].size()) : 0, false, false};
  }
  armed_chunk_ = last ? chunk : -1;
}

void grad_buckets::end_pass() {
  armed_chunk_ = -1;
}

void grad_buckets::grads_done(int chunk, std::size_t first, std::size_t end) {
  if (chunk != armed_chunk_)
    return;
  const auto& owner = bucket_of_[static_cast<std::size_t>(chunk)];
  // From the last parameter down, as the buckets run: they complete in their order.
  for (auto i = std::min(end, owner.size()); i-- > first;) {
    auto& b = buckets_[static_cast<std::size_t>(owner[i])];
    if (--b.pending == 0 && !b.sent && !deferred_[static_cast<std::size_t>(owner[i])])
      send(owner[i]);
  }
}

void grad_buckets::send(int b) {
  auto& bk = buckets_[static_cast<std::size_t>(b)];
  bk.sent = true;
  if (static_cast<std::size_t>(b) < layout_.size()) // the live buffers: ZeRO-2 gives them back between steps
    for (std::size_t i = 0; i < layout_[static_cast<std::size_t>(b)].size(); ++i) {
      const auto& p = layout_[static_cast<std::size_t>(b)][i];
      bk.tensors[i] = models_[static_cast<std::size_t>(p.chunk)]->grads()[static_cast<std::size_t>(p.index)].value;
      // A stage that ran no backward this step (least_loaded sent it no
      // microbatch) still holds none after ZeRO-2 gave them back: its share of
      // the sum is zeros. An empty handle here crashed the shard's copy.
      if (!bk.tensors[i].defined())
        bk.tensors[i] = tensor_handle::zeros(grad_shapes_[static_cast<std::size_t>(b)][i]);
    }
  if (loss_.defined() && static_cast<std::size_t>(b) + 1 == buckets_.size())
    loss_.data<float>()[0] = static_cast<float>(loss_sum_());
  send_(bucket_msg{step_, b, bk.tensors, bk.params});
}

bool grad_buckets::flush(std::int64_t step) {
  if (step != step_)
    begin_pass(step, -1, false);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    if (!buckets_[b].sent)
      send(static_cast<int>(b));
  return back_ == static_cast<int>(buckets_.size());
}

bool grad_buckets::on_reduced(std::int64_t step, int b) {
  if (step != step_ || b < 0 || static_cast<std::size_t>(b) >= buckets_.size() ||
      !buckets_[static_cast<std::size_t>(b)].sent || buckets_[static_cast<std::size_t>(b)].back)
    throw std::runtime_error(
      fmt::format("all-reduce peer returned bucket {} of step {}, which is not out (step {})", b, step, step_));
  buckets_[static_cast<std::size_t>(b)].back = true;
  return ++back_ == static_cast<int>(buckets_.size());
}

void grad_buckets::drop_grads() {
  for (std::size_t b = 0; b < layout_.size(); ++b)
    for (std::size_t i = 0; i < layout_[b].size(); ++i)
      buckets_[b].tensors[i] = {};
}

int grad_buckets::bucket_holding(std::string_view name) const {
  for (std::size_t b = 0; b < layout_.size(); ++b)
    for (const auto& p : layout_[b])
      if (models_[static_cast<std::size_t>(p.chunk)]->grads()[static_cast<std::size_t>(p.index)].name == name)
        return static_cast<int>(b);
  return -1;
}

double grad_buckets::loss_sum() const {
  return loss_.defined() ? static_cast<double>(loss_.data<float>()[0]) : 0.0;
}

} // namespace troupe
