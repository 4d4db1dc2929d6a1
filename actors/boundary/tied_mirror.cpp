// The head's copy of a tied matrix following the embedding's outer steps
// (tied_mirror.hpp): what the embedding's stage sends, and how the head's takes it.
#include "actors/boundary/tied_mirror.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "actors/stage/stage_engine.hpp"

namespace troupe {

namespace {
constexpr const char* kinds[] = {"params", "exp_avg", "exp_avg_sq"};
}

tied_mirror::tied_mirror(stage_host& host, int twin, std::string_view embedding, std::string_view copy)
    : host_(host), twin_(twin), embedding_(find(embedding)), copy_(find(copy)) {
  if (embedding_.flat < 0 && copy_.flat < 0)
    throw std::invalid_argument(
      fmt::format("{}: tied embeddings, but the stage holds neither the embedding nor the head", host_.config().name));
}

tied_mirror::place tied_mirror::find(std::string_view name) const {
  int flat = 0;
  const auto& models = host_.models();
  for (std::size_t k = 0; k < models.size(); ++k) {
    const auto& params = models[k]->params();
    for (std::size_t i = 0; i < params.size(); ++i, ++flat)
      if (!name.empty() && params[i].name == name)
        return {static_cast<int>(k), i, flat};
  }
  return {};
}

/// Content `content` (0 params, 1 exp_avg, 2 exp_avg_sq) of the copy at `p`, live.
tensor_handle tied_mirror::tensor(const place& p, int content) const {
  if (content == 0)
    return host_.models()[static_cast<std::size_t>(p.chunk)]->params()[p.param].value;
  auto state = host_.optimizer_state(kinds[content]);
  if (static_cast<std::size_t>(p.flat) >= state.size())
    throw std::runtime_error(
      fmt::format("{}: no {} of the tied matrix to mirror", host_.config().name, kinds[content]));
  return state[static_cast<std::size_t>(p.flat)];
}

void tied_mirror::send(step_t step, const touched& t) {
  if (embedding_.flat < 0)
    return;
  if (copy_.flat >= 0) { // both copies here: in place
    for (int c = 0; c < 3; ++c)
      if (t[static_cast<std::size_t>(c)]) {
        auto from = tensor(embedding_, c), to = tensor(copy_, c);
        std::memcpy(to.raw(), from.raw(), from.nbytes());
      }
    host_.models()[static_cast<std::size_t>(copy_.chunk)]->params_updated();
    return;
  }
  tied_value_msg m{step, host_.config().actor, {}, {}, {}};
  tensor_handle* fields[] = {&m.params, &m.exp_avg, &m.exp_avg_sq};
  for (int c = 0; c < 3; ++c)
    if (t[static_cast<std::size_t>(c)]) {
      auto from = tensor(embedding_, c);
      auto sent = tensor_handle::empty(from.shape()); // the head reads it while this stage trains on
      std::memcpy(sent.raw(), from.raw(), from.nbytes());
      *fields[c] = std::move(sent);
    }
  host_.send(twin_, caf::make_message(tied_atom::value, std::move(m)));
}

bool tied_mirror::expect(step_t step) {
  if (copy_.flat < 0 || embedding_.flat >= 0) // not the head's stage, or both copies here
    return false;
  if (auto it = arrived_.find(step); it != arrived_.end()) {
    apply(it->second);
    arrived_.erase(it);
    return false;
  }
  due_ = step;
  return true;
}

bool tied_mirror::receive(const tied_value_msg& m) {
  const auto& name = host_.config().name;
  if (m.from != twin_ || copy_.flat < 0)
    throw std::runtime_error(
      fmt::format("{}: tied-matrix values from actor {}, whose twin is actor {}", name, m.from, twin_));
  if (m.step == due_) {
    apply(m);
    due_ = -1;
    return true;
  }
  if (m.step < due_ || !arrived_.emplace(m.step, m).second)
    throw std::runtime_error(fmt::format("{}: tied-matrix values for step {} it did not wait for", name, m.step));
  return false;
}

void tied_mirror::apply(const tied_value_msg& m) {
  const tensor_handle* fields[] = {&m.params, &m.exp_avg, &m.exp_avg_sq};
  for (int c = 0; c < 3; ++c)
    if (fields[c]->defined()) {
      auto to = tensor(copy_, c);
      if (!(fields[c]->shape() == to.shape()))
        throw std::runtime_error(fmt::format("{}: the tied matrix's {} of step {} is {}, the copy {}",
                                             host_.config().name, kinds[c], m.step, to_string(fields[c]->shape()),
                                             to_string(to.shape())));
      std::memcpy(to.raw(), fields[c]->raw(), to.nbytes());
    }
  host_.models()[static_cast<std::size_t>(copy_.chunk)]->params_updated();
}

} // namespace troupe
