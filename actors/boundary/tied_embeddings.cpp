// Tied embeddings across pipeline stages (llama's `tie_embeddings`): the stage
// holding the token embedding and the stage holding the head each keep a copy of
// the tied matrix, drawn equal (ops/gpt_init.cpp). At the step boundary each
// sends its gradient of it to its twin and adds the twin's, so both copies take
// the same update every step and stay bit-identical. Megatron-LM does the same
// with its embedding group: finalize_model_grads() (megatron/core/distributed/
// finalize_model_grads.py) reduces over the data-parallel replicas first
// (finish_grad_sync), then all-reduces the word embeddings' gradients between
// the first and the last pipeline stage (_allreduce_word_embedding_grads).
// Here too it sits below the DDP ring in the stack, so it adds the replicas'
// sums; above ZeRO's shards, which take each copy in a bucket of its own only
// once the two are summed, and count the second copy in no norm.
#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"
#include "actors/stage/pipeline_messages.hpp"
#include "actors/stage/stage_engine.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe {

namespace {

constexpr const char* embedding_name = "embed_tokens.weight"; ///< the tied matrix on the embedding's stage
constexpr const char* copy_name = "lm_head.weight";           ///< its copy on the head's stage (ops/gpt_init.cpp)

/// The twin: the stage actor (its index) that holds the other copy; this
/// stage's own when it holds both in different chunks (V-shaped chunks).
struct tied_options {
  int twin = -1;
  bool zero = false; ///< ZeRO's shards take the summed gradients and count the norm (zero_shards.cpp)
};

class tied_embeddings final : public step_boundary {
public:
  tied_embeddings(stage_host& host, const boundary_choice& c)
      : host_(host), opt_(std::any_cast<tied_options>(c.options)) {
    const auto& models = host_.models();
    for (std::size_t k = 0; k < models.size(); ++k) {
      if (!models[k]->device().is_cpu()) // the sum below reads host memory
        throw std::invalid_argument(
          fmt::format("{}: tied embeddings across stages run on the CPU only so far", host_.config().name));
      const auto& params = models[k]->params();
      for (std::size_t i = 0; i < params.size(); ++i)
        if (params[i].name == embedding_name)
          embedding_ = {static_cast<int>(k), i};
        else if (params[i].name == copy_name)
          copy_ = {static_cast<int>(k), i};
    }
    if (embedding_.chunk < 0 && copy_.chunk < 0)
      throw std::invalid_argument(fmt::format(
        "{}: tied embeddings, but the stage holds neither the embedding nor the head", host_.config().name));
  }

  std::string_view type() const override { return "tied_embeddings"; }

  bool sync(step_t step) override {
    if (embedding_.chunk >= 0 && copy_.chunk >= 0) { // both copies here: no message
      auto e = grad(embedding_), h = grad(copy_);
      add(e, h);
      std::memcpy(h.data<float>(), e.data<float>(), e.nbytes());
      return true;
    }
    auto own = grad(mine());
    auto sent = tensor_handle::empty(own.shape());
    std::memcpy(sent.data<float>(), own.data<float>(), own.nbytes()); // the twin reads it while this one adds
    host_.send(opt_.twin,
               caf::make_message(tied_atom::value, tied_grad_msg{step, host_.config().actor, std::move(sent)}));
    waiting_ = step;
    return take(step);
  }

  bool receive(const caf::message& m) override {
    if (!m.match_elements<tied_atom, tied_grad_msg>())
      return false;
    const auto& msg = m.get_as<tied_grad_msg>(1);
    const auto& name = host_.config().name;
    if (msg.from != opt_.twin)
      throw std::runtime_error(
        fmt::format("{}: a tied-embedding gradient from actor {}, whose twin is actor {}", name, msg.from, opt_.twin));
    // Against the matrix, not its gradient: the twin's may come before this
    // stage's backward of the step, when under ZeRO-2 it has no gradient yet.
    if (const auto& want = param(mine()).shape(); !(msg.grad.shape() == want))
      throw std::runtime_error(fmt::format("{}: the tied-embedding gradient of step {} is {}, the matrix {}", name,
                                           msg.step, to_string(msg.grad.shape()), to_string(want)));
    if (!arrived_.emplace(msg.step, msg.grad).second)
      throw std::runtime_error(fmt::format("{}: two tied-embedding gradients for step {}", name, msg.step));
    if (waiting_ == msg.step && take(msg.step))
      host_.synced(msg.step);
    return true;
  }

  /// The two copies hold the same gradient: the embedding's stage counts it in
  /// the global norm, the head's leaves its copy out (with ZeRO its shards do).
  std::optional<double> norm_share(step_t) override {
    if (copy_.chunk < 0 || host_.config().grad_clip <= 0 || opt_.zero)
      return std::nullopt;
    double sq = 0, copy = 0;
    for (const auto& m : host_.models())
      sq += m->grad_sq_norm();
    auto g = grad(copy_);
    for (long i = 0; i < g.numel(); ++i)
      copy += double(g.data<float>()[i]) * g.data<float>()[i];
    return std::max(sq - copy, 0.0);
  }

private:
  struct place {
    int chunk = -1;
    std::size_t param = 0;
  };
  const place& mine() const { return embedding_.chunk >= 0 ? embedding_ : copy_; }
  const tensor_handle& param(const place& p) const {
    return host_.models()[static_cast<std::size_t>(p.chunk)]->params()[p.param].value;
  }
  tensor_handle grad(const place& p) const {
    const auto& g = host_.models()[static_cast<std::size_t>(p.chunk)]->grads()[p.param];
    if (!g.value.defined()) // ZeRO-2 gave it back, and no backward ran here this step
      throw std::runtime_error(
        fmt::format("{}: no gradient of '{}' to exchange with its twin this step", host_.config().name, g.name));
    return g.value;
  }
  /// to += from, element by element (a + b = b + a exactly: both copies get the same sum).
  static void add(tensor_handle& to, const tensor_handle& from) {
    float* x = to.data<float>();
    const float* y = from.data<float>();
    for (long i = 0; i < to.numel(); ++i)
      x[i] += y[i];
  }
  /// Adds the twin's gradient of `step` when it is here; true then.
  bool take(step_t step) {
    auto it = arrived_.find(step);
    if (it == arrived_.end())
      return false;
    auto own = grad(mine());
    add(own, it->second);
    arrived_.erase(it);
    waiting_ = -1;
    return true;
  }

  stage_host& host_;
  tied_options opt_;
  place embedding_, copy_;                  ///< where each copy sits here (chunk -1: not on this stage)
  step_t waiting_ = -1;                     ///< the step whose twin's gradient this stage waits for
  std::map<step_t, tensor_handle> arrived_; ///< the twin's gradients, by step (it may be first)
};

/// The copies a stage's ranges hold: the embedding in a range without the head,
/// the head's copy in one without the embedding. The head is in the range that
/// ends the model, or under SkipPipe in the empty range there (ops::holds_head).
std::pair<bool, bool> copies_of(const graph_spec& g, const actor_spec& a) {
  std::pair<bool, bool> out;
  for (const auto& r : a.layers) {
    bool head = r.end == g.model.layers && (!g.skip_runs() || r.begin == r.end);
    out.first |= r.begin == 0 && !head;
    out.second |= r.begin != 0 && head;
  }
  return out;
}

} // namespace

std::vector<tied_copy> tied_copies_on(const graph_spec& g, const actor_spec& stage) {
  if (!g.model.tie_embeddings)
    return {};
  auto [embedding, copy] = copies_of(g, stage);
  std::vector<tied_copy> out;
  if (embedding)
    out.push_back({embedding_name, true});
  if (copy)
    out.push_back({copy_name, false});
  return out;
}

int tied_twin_of(const graph_spec& g, const actor_spec& stage) {
  if (!g.model.tie_embeddings)
    return -1;
  auto [embedding, copy] = copies_of(g, stage);
  if (!embedding && !copy)
    return -1; // a middle stage, or one range that holds both
  if (embedding && copy)
    return g.index_of(stage.name);
  for (const auto& a : g.actors) // the twin: the other copy's stage in the same replica
    if (a.role.holds_layers && a.replica == stage.replica && a.name != stage.name) {
      auto [e, c] = copies_of(g, a);
      if (embedding ? c : e)
        return g.index_of(a.name);
    }
  throw std::invalid_argument(
    fmt::format("{}: tied embeddings, but no stage of replica {} holds the other copy", stage.name, stage.replica));
}

std::map<int, int> tied_norm_pairs(const graph_spec& g) {
  std::map<int, int> out;
  for (const auto& a : g.actors)
    if (a.role.holds_layers)
      if (int twin = tied_twin_of(g, a), self = g.index_of(a.name); twin >= 0 && twin != self)
        out[self] = std::min(self, twin);
  return out;
}

step_boundary_type tied_embeddings_boundary() {
  return {"tied_embeddings",
          [](const graph_spec& g, const actor_spec& stage) -> std::optional<boundary_choice> {
            int twin = tied_twin_of(g, stage);
            if (twin < 0)
              return std::nullopt;
            return boundary_choice{{}, -1, tied_options{twin, g.data_parallel.zero > 0}};
          },
          [](stage_host& host, const boundary_choice& c) -> std::unique_ptr<step_boundary> {
            return std::make_unique<tied_embeddings>(host, c);
          }};
}

} // namespace troupe
