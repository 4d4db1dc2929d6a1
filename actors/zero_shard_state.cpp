// An optimizer shard's state (actors/zero_shard_state.hpp).
#include "actors/zero_shard_state.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"
#include "ops/gpt.hpp"
#include "ops/grad_clip.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/trace/trace.hpp"
#include "ops/model_config.hpp"

namespace troupe {

namespace {

constexpr std::int64_t f32 = 4;

std::int64_t elements_of(const std::vector<std::vector<sched::shard_param>>& chunks) {
  std::int64_t n = 0;
  for (const auto& c : chunks)
    for (const auto& p : c)
      n += p.elements;
  return n;
}

bool holds_loss(const graph_spec& g, const actor_spec& stage) {
  ops::gpt_config cfg;
  cfg.layers = g.model.layers, cfg.head_apart = g.skip_runs();
  for (const auto& r : stage.layers)
    if (ops::holds_head(cfg, r.begin, r.end))
      return true;
  return false;
}

} // namespace

void record_held(const std::string& actor, const held_bytes& h) {
  auto& tr = trace_recorder::global();
  tr.count("held:" + actor + ":params", static_cast<double>(h.params));
  tr.count("held:" + actor + ":grads", static_cast<double>(h.grads));
  tr.count("held:" + actor + ":optimizer", static_cast<double>(h.optimizer));
}

std::vector<std::vector<sched::shard_param>> zero_params(const graph_spec& g, const actor_spec& stage) {
  const auto cfg = ops::model_config(g);
  std::vector<std::vector<sched::shard_param>> out;
  for (const auto& r : stage.layers) {
    auto& chunk = out.emplace_back();
    for (const auto& p : ops::gpt_param_specs(cfg, r.begin, r.end))
      chunk.push_back({p.name, p.shape.numel(), p.shape.rank() >= 2}); // AdamW decays rank >= 2 (ops/adamw.hpp)
  }
  return out;
}

sched::shard_layout stage_shard_layout(const graph_spec& g, const actor_spec& stage, int members, int rank) {
  auto params = zero_params(g, stage);
  std::vector<sched::param_ref> alone;
  for (const auto& t : tied_copies_on(g, stage))
    for (std::size_t c = 0; c < params.size(); ++c)
      for (std::size_t i = 0; i < params[c].size(); ++i)
        if (params[c][i].name == t.name)
          alone.push_back({static_cast<int>(c), static_cast<int>(i)});
  return sched::make_shard_layout(params, g.data_parallel.bucket, members, rank, alone);
}

zero_prediction predict_held(const graph_spec& g, const actor_spec& stage) {
  auto params = zero_params(g, stage);
  auto psi = elements_of(params);
  auto kinds = static_cast<std::int64_t>(ops::adamw::kinds().size());
  zero_prediction p;
  p.stage.params = f32 * psi;
  p.stage.grads = g.data_parallel.zero == 2 ? 0 : f32 * psi; // ZeRO-2: only during a step's backward
  p.stage.optimizer = g.data_parallel.zero == 0 ? kinds * f32 * psi : 0;
  if (g.data_parallel.zero > 0) {
    auto members = g.sync_group_size();
    auto rank = stage.replica % members;
    auto slice = stage_shard_layout(g, stage, members, rank).elements();
    if (g.elastic_ddp()) // it mirrors the next replica's slice too (actors/optimizer_shard_direct.cpp)
      slice += stage_shard_layout(g, stage, members, (rank + 1) % members).elements();
    p.shard.optimizer = kinds * f32 * slice;
    p.shard.grads = g.data_parallel.zero == 2 ? f32 * slice : 0;
  }
  return p;
}

zero_shard::zero_shard(const graph_spec& g, const actor_spec& stage, int rank, int stage_index)
    : zero_(g.data_parallel.zero), stage_index_(stage_index), loss_(holds_loss(g, stage)) {
  layout_ = stage_shard_layout(g, stage, g.sync_group_size(), rank);
  std::vector<ops::named_tensor> shapes;
  std::int64_t at = 0;
  for (std::size_t i = 0; i < layout_.segments.size(); ++i) {
    auto n = layout_.segments[i].elements;
    slice_at_.push_back(at), at += n;
    // A segment of a matrix stays rank 2 ({1, n}), so AdamW decays it as it would the whole.
    shapes.push_back({layout_.names[i], tensor_handle::empty(layout_.decays[i] ? shape_t{1, n} : shape_t{n})});
  }
  adamw_ =
    std::make_unique<ops::adamw>(shapes, ops::adamw_options{.weight_decay = static_cast<float>(g.train.weight_decay)});
  if (zero_ == 2)
    grad_slice_ = tensor_handle::zeros({at});
  params_.resize(layout_.segments.size());
  grads_.resize(layout_.segments.size());
}

ops::named_tensor zero_shard::view(const tensor_handle& t, const sched::shard_segment& s, std::size_t i) const {
  auto flat = t.reshape({t.numel()}).slice(s.offset, s.offset + s.elements);
  return {layout_.names[i], layout_.decays[i] ? flat.reshape({1, s.elements}) : flat};
}

void zero_shard::bind_parameters(int b, const std::vector<tensor_handle>& params) {
  for (std::size_t i = 0; i < layout_.segments.size(); ++i)
    if (const auto& s = layout_.segments[i]; s.bucket == b)
      params_[i] = view(params.at(static_cast<std::size_t>(s.tensor)), s, i);
}

double zero_shard::keep_gradients(int b, const float* flat, const std::vector<tensor_handle>& grads) {
  double sq = 0;
  for (std::size_t i = 0; i < layout_.segments.size(); ++i) {
    const auto& s = layout_.segments[i];
    if (s.bucket != b)
      continue;
    const float* src = flat + s.flat;
    for (std::int64_t k = 0; k < s.elements; ++k)
      sq += static_cast<double>(src[k]) * static_cast<double>(src[k]);
    // Stage 1 keeps the slice in the stage's gradient buffer, stage 2 in its own.
    grads_[i] = zero_ == 2
                  ? ops::named_tensor{layout_.names[i], grad_slice_.slice(slice_at_[i], slice_at_[i] + s.elements)}
                  : view(grads.at(static_cast<std::size_t>(s.tensor)), s, i);
    if (layout_.decays[i])
      grads_[i].value = grads_[i].value.reshape({1, s.elements});
    std::memcpy(grads_[i].value.raw(), src, static_cast<std::size_t>(s.elements) * sizeof(float));
  }
  return sq;
}

void zero_shard::update(float lr, float clip) {
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].value.defined() || !grads_[i].value.defined())
      throw std::runtime_error(fmt::format("optimizer shard: no gradient for '{}' this step", layout_.names[i]));
  if (clip < 1.0f)
    ops::scale_grads(grads_, clip);
  adamw_->step(params_, grads_, lr);
  for (auto& g : grads_)
    g.value = {};
}

void zero_shard::write_parameters(int b, float* flat) const {
  for (std::size_t i = 0; i < layout_.segments.size(); ++i)
    if (const auto& s = layout_.segments[i]; s.bucket == b)
      std::memcpy(flat + s.flat, params_[i].value.raw(), static_cast<std::size_t>(s.elements) * sizeof(float));
}

std::vector<float> zero_shard::slice_values() const {
  std::vector<float> out(static_cast<std::size_t>(layout_.elements()));
  for (std::size_t i = 0; i < layout_.segments.size(); ++i) {
    if (!params_[i].value.defined())
      throw std::logic_error(fmt::format("optimizer shard: '{}' is not bound", layout_.names[i]));
    std::memcpy(out.data() + slice_at_[i], params_[i].value.raw(),
                static_cast<std::size_t>(layout_.segments[i].elements) * sizeof(float));
  }
  return out;
}

void write_slice(const sched::shard_layout& layout, const std::vector<const std::vector<tensor_handle>*>& params,
                 std::span<const float> values) {
  if (static_cast<std::int64_t>(values.size()) != layout.elements())
    throw std::invalid_argument(fmt::format("slice {} of {}: {} values for its {} elements", layout.rank,
                                            layout.members, values.size(), layout.elements()));
  const float* src = values.data();
  for (const auto& s : layout.segments) {
    const auto* bucket = params.at(static_cast<std::size_t>(s.bucket));
    const auto& t = bucket->at(static_cast<std::size_t>(s.tensor));
    if (s.offset + s.elements > t.numel())
      throw std::invalid_argument(fmt::format("slice {} of {}: a segment past its parameter's {} elements", layout.rank,
                                              layout.members, t.numel()));
    std::memcpy(static_cast<float*>(t.raw()) + s.offset, src, static_cast<std::size_t>(s.elements) * sizeof(float));
    src += s.elements;
  }
}

held_bytes zero_shard::held() const {
  auto slice = layout_.elements();
  return {0, grad_slice_.defined() ? static_cast<std::int64_t>(grad_slice_.nbytes()) : 0,
          static_cast<std::int64_t>(adamw_->state_kinds().size()) * f32 * slice};
}

std::vector<named_handle> zero_shard::checkpoint_tensors() const {
  std::vector<named_handle> out;
  for (auto& t : adamw_->state().tensors)
    out.push_back({"optimizer." + t.name, t.value});
  return out;
}

std::map<std::string, std::string> zero_shard::checkpoint_metadata() const {
  return {{"optimizer.steps", std::to_string(adamw_->steps())},
          {"zero.slice", fmt::format("{} of {}", layout_.rank, layout_.members)}};
}

std::optional<std::string> zero_shard::check_part(const safetensors_header& part) const {
  auto md = part.metadata.find("optimizer.steps");
  if (md == part.metadata.end())
    return "no 'optimizer.steps' in the metadata";
  long steps = 0;
  try {
    steps = std::stol(md->second);
  } catch (const std::exception&) {
    return fmt::format("optimizer.steps '{}' is not a step count", md->second);
  }
  std::size_t expected = 0;
  if (steps > 0)
    for (std::size_t i = 0; i < layout_.names.size(); ++i)
      for (const auto& kind : adamw_->state_kinds()) {
        auto name = "optimizer." + kind + "." + layout_.names[i];
        const auto* t = part.find(name);
        if (!t)
          return fmt::format("tensor '{}' is missing (a different slice of the parameters?)", name);
        if (t->shape.numel() != layout_.segments[i].elements)
          return fmt::format("tensor '{}' has {} elements, this slice {}", name, t->shape.numel(),
                             layout_.segments[i].elements);
        ++expected;
      }
  if (part.tensors.size() != expected)
    return fmt::format("holds {} tensors, this slice expects {}", part.tensors.size(), expected);
  return std::nullopt;
}

caf::error zero_shard::restore(const safetensors_file& f, const std::string& file) {
  if (auto why = check_part(header_of(f)))
    return make_error(errc::invalid_argument, fmt::format("{}: {}", file, *why));
  ops::optimizer_state st{std::stol(f.metadata.at("optimizer.steps")), {}};
  if (st.steps > 0)
    for (std::size_t i = 0; i < layout_.names.size(); ++i)
      for (const auto& kind : adamw_->state_kinds()) {
        auto t = f.find("optimizer." + kind + "." + layout_.names[i]);
        st.tensors.push_back(
          {kind + "." + layout_.names[i], t.reshape(layout_.decays[i] ? shape_t{1, t.numel()} : shape_t{t.numel()})});
      }
  try {
    adamw_->load_state(st);
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument, fmt::format("{}: {}", file, e.what()));
  }
  return {};
}

std::string zero_checkpointing::write(const zero_shard& s, std::int64_t steps_done, const std::string& actor) const {
  return part_checkpointing::write(actor, steps_done, s.checkpoint_tensors(), s.checkpoint_metadata());
}

caf::error zero_checkpointing::restore(zero_shard& s, const std::string& actor) const {
  auto f = read(actor);
  if (!f)
    return f.error();
  return *f ? s.restore(**f, resume_file(actor)) : caf::error{};
}

caf::expected<zero_ring> zero_ring_of(const graph_spec& g, const actor_spec& shard) {
  zero_ring ring;
  if (auto s = shard.params.find("stage"); s != shard.params.end() && s->second.IsScalar())
    if (const auto* a = g.find_actor(s->second.Scalar()); a && a->role.holds_layers)
      ring.stage = a, ring.stage_index = g.index_of(a->name), ring.rank = a->replica % g.sync_group_size();
  const auto* next = g.channel_target(shard, shard.type);
  ring.next_index = next ? g.index_of(next->name) : -1;
  if (!ring.stage || ring.next_index < 0)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: an optimizer_shard needs a `stage:` it serves and a channel to the next "
                                  "shard of its ring",
                                  shard.name));
  return ring;
}

} // namespace troupe
