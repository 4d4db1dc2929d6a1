// A pipeline stage's checkpoints: the tensors and metadata it saves, checking
// a saved part against the stage, restoring it (--resume), and a warm start's
// weights alone (train.init).
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/stage/stage_engine.hpp"
#include "ops/adamw.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/checkpoint/checkpoint.hpp"

namespace troupe {

std::vector<named_handle> stage_engine::checkpoint_tensors() {
  std::vector<named_handle> out;
  for (std::size_t k = 0; k < models_.size(); ++k) {
    auto params = models_[k]->host_params();
    std::vector<std::vector<named_handle>> extra(params.size()); // each parameter's state, from the components
    for (const auto& b : boundaries_)
      b->save(k, extra);
    for (std::size_t i = 0; i < params.size(); ++i) {
      out.push_back({params[i].name, params[i].value});
      out.insert(out.end(), extra[i].begin(), extra[i].end());
    }
  }
  return out;
}

safetensors_file stage_engine::state() {
  safetensors_file f;
  f.tensors = checkpoint_tensors(); // live handles: to_state_msg copies them before the next step
  f.metadata = checkpoint_metadata();
  return f;
}

namespace {
/// The optimizer steps per chunk that the stack reports (the component that applies the update).
std::vector<long> stack_optimizer_steps(const std::vector<std::unique_ptr<step_boundary>>& stack, std::size_t chunks) {
  for (const auto& b : stack)
    if (auto s = b->optimizer_steps())
      return *s;
  return std::vector<long>(chunks, 0);
}
} // namespace

std::map<std::string, std::string> stage_engine::checkpoint_metadata() {
  std::string steps;
  for (auto n : stack_optimizer_steps(boundaries_, models_.size()))
    steps += fmt::format("{}{}", steps.empty() ? "" : ",", n);
  return {{"optimizer.steps", steps}};
}

std::optional<std::string> check_stage_part(const safetensors_header& part,
                                            const std::vector<std::vector<param_info>>& layouts,
                                            const std::vector<std::string>& kinds, std::vector<long>* optimizer_steps) {
  auto md = part.metadata.find("optimizer.steps");
  if (md == part.metadata.end())
    return "no 'optimizer.steps' in the metadata";
  std::vector<long> opt_steps;
  const auto& text = md->second;
  for (std::size_t at = 0; at <= text.size();) {
    auto comma = std::min(text.find(',', at), text.size());
    long v = -1;
    auto [end, ec] = std::from_chars(text.data() + at, text.data() + comma, v);
    if (ec != std::errc{} || end != text.data() + comma || v < 0)
      return fmt::format("optimizer.steps '{}' in the metadata is not a list of step counts", text);
    opt_steps.push_back(v);
    at = comma + 1;
  }
  if (opt_steps.size() != layouts.size())
    return fmt::format("optimizer state for {} model chunks, this stage has {}", opt_steps.size(), layouts.size());
  std::size_t expected = 0;
  for (std::size_t k = 0; k < layouts.size(); ++k)
    for (const auto& p : layouts[k]) {
      std::vector<std::string> names{p.name};
      if (opt_steps[k] > 0) // no update yet: no optimizer state
        for (const auto& kind : kinds)
          names.push_back("optimizer." + kind + "." + p.name);
      for (const auto& name : names) {
        const auto* t = part.find(name);
        if (!t)
          return fmt::format("tensor '{}' is missing", name);
        if (!(t->shape == p.shape) || t->type != p.type)
          return fmt::format("tensor '{}' is {} {} in the checkpoint but {} {} in the graph's model", name,
                             to_string(t->type), to_string(t->shape), to_string(p.type), to_string(p.shape));
        ++expected;
      }
    }
  if (part.tensors.size() != expected)
    return fmt::format("holds {} tensors, this stage expects {} (a different model cut?)", part.tensors.size(),
                       expected);
  if (optimizer_steps)
    *optimizer_steps = std::move(opt_steps);
  return std::nullopt;
}

caf::error stage_engine::load_part(const safetensors_file& f, const std::string& file,
                                   const std::vector<std::string>& kinds, std::vector<long>* optimizer_steps) {
  // Check everything first, so a mismatch changes nothing.
  std::vector<std::vector<param_info>> layouts;
  for (const auto& m : models_)
    layouts.push_back(m->param_layout());
  if (auto why = check_stage_part(header_of(f), layouts, kinds, optimizer_steps))
    return make_error(errc::invalid_argument, fmt::format("{}: {}", file, *why));
  for (std::size_t k = 0; k < models_.size(); ++k) {
    std::vector<tensor_handle> ps;
    for (const auto& p : layouts[k])
      ps.push_back(f.find(p.name));
    try {
      models_[k]->load_params(ps);
    } catch (const std::exception& e) { // a device that failed to take it
      return make_error(errc::invalid_argument, fmt::format("{}: {}", file, e.what()));
    }
  }
  return {};
}

caf::error stage_engine::load_weights(const safetensors_file& f, const std::string& file) {
  return load_part(f, file, ops::adamw::kinds(), nullptr); // a part of any run's checkpoint: AdamW's state beside
}

caf::error stage_engine::restore(const safetensors_file& f, step_t steps_done, const std::string& file) {
  std::vector<std::string> kinds; // what this stack saves beside each parameter
  for (const auto& b : boundaries_)
    for (auto& k : b->state_kinds())
      kinds.push_back(std::move(k));
  std::vector<long> opt_steps;
  if (auto err = load_part(f, file, kinds, &opt_steps))
    return err;
  for (auto& b : boundaries_)
    if (auto err = b->restore(f, opt_steps, file))
      return err;
  for (auto& b : boundaries_)
    b->resume_at(steps_done);
  core_->resume_at(steps_done);
  return {};
}

} // namespace troupe
