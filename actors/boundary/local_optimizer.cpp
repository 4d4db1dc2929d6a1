// The step-boundary component that applies the update on the stage itself:
// AdamW over each model chunk's parameters, its state saved with the stage's
// checkpoint. The bottom of every stack but ZeRO's (whose shards update).
// With post-validation it steps before the global norm and can roll back.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "actors/stage/stage_engine.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "ops/adamw.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

class local_optimizer final : public step_boundary {
public:
  explicit local_optimizer(stage_host& host) : host_(host) {
    for (const auto& m : host_.models())
      optimizers_.push_back(std::make_unique<ops::adamw>(
        m->params(), ops::adamw_options{.weight_decay = host_.config().weight_decay}, m->stream()));
  }

  std::string_view type() const override { return "local_optimizer"; }
  bool applies_update() const override { return true; }

  bool apply(step_t, float lr, float clip) override {
    const auto& models = host_.models();
    for (std::size_t k = 0; k < models.size(); ++k) {
      auto& m = *models[k];
      if (clip < 1.0f)
        m.scale_grads(clip);
      optimizers_[k]->step(m.params(), m.grads(), lr);
      m.params_updated();
      m.zero_grads();
    }
    return true;
  }

  // Post-validation keeps host copies of the parameters and the optimizer state
  // (3 floats a parameter with AdamW, in buffers reused every step); the
  // gradients stay in place (AdamW reads them only) until the verdict.
  bool apply_early(step_t, float lr) override {
    const auto& models = host_.models();
    kept_.resize(models.size());
    for (std::size_t k = 0; k < models.size(); ++k) {
      auto& m = *models[k];
      auto& keep = kept_[k];
      auto params = m.host_params();
      keep.params.resize(params.size());
      for (std::size_t i = 0; i < params.size(); ++i)
        copy_into(keep.params[i], params[i].value);
      auto st = optimizers_[k]->state(); // empty before the first update
      keep.state.tensors.resize(st.tensors.size());
      for (std::size_t i = 0; i < st.tensors.size(); ++i) {
        keep.state.tensors[i].name = st.tensors[i].name;
        copy_into(keep.state.tensors[i].value, st.tensors[i].value);
      }
      keep.state.steps = st.steps;
      optimizers_[k]->step(m.params(), m.grads(), lr);
      m.params_updated();
    }
    return true;
  }

  void validated(bool keep) override {
    const auto& models = host_.models();
    for (std::size_t k = 0; k < models.size() && k < kept_.size(); ++k) {
      auto& m = *models[k];
      if (keep) {
        m.zero_grads();
        continue;
      }
      m.load_params(kept_[k].params);
      m.params_updated();
      optimizers_[k]->load_state(kept_[k].state);
    }
  }

  std::vector<std::string> state_kinds() const override { return ops::adamw::kinds(); }

  void save(std::size_t chunk, std::vector<std::vector<named_handle>>& per_param) const override {
    auto st = optimizers_[chunk]->state(); // per parameter, each kind; empty before the first update
    auto kinds = optimizers_[chunk]->state_kinds().size();
    for (std::size_t j = 0; j < st.tensors.size(); ++j)
      per_param[j / kinds].push_back({"optimizer." + st.tensors[j].name, st.tensors[j].value});
  }

  std::optional<std::vector<long>> optimizer_steps() const override {
    std::vector<long> steps;
    for (const auto& o : optimizers_)
      steps.push_back(o->steps());
    return steps;
  }

  caf::error restore(const safetensors_file& f, const std::vector<long>& steps, const std::string& file) override {
    const auto& models = host_.models();
    for (std::size_t k = 0; k < models.size(); ++k) {
      ops::optimizer_state st{steps[k], {}};
      if (steps[k] > 0)
        for (const auto& p : models[k]->param_layout())
          for (const auto& kind : optimizers_[k]->state_kinds())
            st.tensors.push_back({kind + "." + p.name, f.find("optimizer." + kind + "." + p.name)});
      try {
        optimizers_[k]->load_state(st);
      } catch (const std::exception& e) { // a device that failed to take it
        return make_error(errc::invalid_argument, fmt::format("{}: {}", file, e.what()));
      }
    }
    return {};
  }

  std::int64_t optimizer_bytes() const override {
    std::int64_t bytes = 0;
    const auto& models = host_.models();
    for (std::size_t k = 0; k < models.size(); ++k) // one buffer per parameter and kind, made with the optimizer
      for (const auto& p : models[k]->params())
        bytes += static_cast<std::int64_t>(optimizers_[k]->state_kinds().size() * p.value.nbytes());
    return bytes;
  }

  std::optional<std::vector<tensor_handle>> state_of(std::string_view kind) const override {
    std::vector<tensor_handle> out;
    for (const auto& opt : optimizers_) {
      const auto& kinds = opt->state_kinds();
      auto k = std::find(kinds.begin(), kinds.end(), kind);
      if (k == kinds.end())
        return std::nullopt;
      auto state = opt->state();
      for (auto i = static_cast<std::size_t>(k - kinds.begin()); i < state.tensors.size(); i += kinds.size())
        out.push_back(state.tensors[i].value);
    }
    return out;
  }

private:
  /// A deep host copy of `from` in `to`, whose buffer is reused when the shape fits.
  static void copy_into(tensor_handle& to, const tensor_handle& from) {
    auto host = copy_to_host(from);
    if (!to.defined() || !(to.shape() == host.shape()) || to.type() != host.type())
      to = tensor_handle::empty(host.shape(), host.type());
    std::memcpy(to.raw(), host.raw(), host.nbytes());
  }

  stage_host& host_;
  std::vector<std::unique_ptr<ops::optimizer>> optimizers_;
  /// What apply_early() overwrote, per chunk: for validated() to put back.
  struct kept {
    std::vector<tensor_handle> params;
    ops::optimizer_state state;
  };
  std::vector<kept> kept_;
};

} // namespace

step_boundary_type local_optimizer_boundary() {
  return {"local_optimizer", nullptr, [](stage_host& host, const boundary_choice&) -> std::unique_ptr<step_boundary> {
            return std::make_unique<local_optimizer>(host);
          }};
}

} // namespace troupe
