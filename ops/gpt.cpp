// gpt_range: forward, split and fused backward and evaluation of a contiguous
// range of GPT layers.
#include "ops/gpt.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/cross_entropy.hpp"
#include "ops/dispatch.hpp"
#include "ops/embedding.hpp"
#include "ops/gpt_impl.hpp"
#include "ops/grad_clip.hpp"
#include "ops/layer_norm.hpp"
#include "ops/linear.hpp"

namespace troupe::ops {

std::string_view to_string(model_family f) noexcept {
  return f == model_family::llama ? "llama" : "gpt2";
}

int llama_ffn_hidden(int d_model) {
  const int h = 2 * 4 * d_model / 3;
  return (h + 31) / 32 * 32;
}

gpt_range::gpt_range(const gpt_config& cfg, int begin, int end) : impl_(new impl) {
  constexpr auto op = "gpt_range";
  std::unique_ptr<impl> guard{impl_};
  require(cfg.layers > 0 && cfg.d_model > 0 && cfg.heads > 0 && cfg.context > 0 && cfg.vocab > 0, op,
          "layers, d_model, heads, context and vocab must be positive");
  require(cfg.d_model % cfg.heads == 0, op,
          fmt::format("d_model {} is not divisible by heads {}", cfg.d_model, cfg.heads));
  bool head_only = cfg.head_apart && begin == cfg.layers && end == cfg.layers;
  if (cfg.family == model_family::llama) {
    const int kv = kv_heads_of(cfg), hd = cfg.d_model / cfg.heads;
    require(kv > 0 && cfg.heads % kv == 0, op, fmt::format("kv_heads {} does not divide heads {}", kv, cfg.heads));
    require(hd % 2 == 0, op, fmt::format("the head width {} must be even for rotary positions", hd));
    require(ffn_hidden_of(cfg) > 0 && cfg.rope_theta > 0 && cfg.norm_eps > 0, op,
            "ffn_hidden, rope_theta and norm_eps must be positive");
  }
  require(head_only || (0 <= begin && begin < end && end <= cfg.layers), op,
          fmt::format("layer range [{}, {}) is not inside [0, {})", begin, end, cfg.layers));
  impl_->cfg = cfg;
  impl_->begin = begin;
  impl_->end = end;
  impl_->init_params();
  guard.release();
}

gpt_range::gpt_range(gpt_range&& o) noexcept : impl_(o.impl_) {
  o.impl_ = nullptr;
}
gpt_range& gpt_range::operator=(gpt_range&& o) noexcept {
  std::swap(impl_, o.impl_);
  return *this;
}
gpt_range::~gpt_range() {
  delete impl_;
}

const gpt_config& gpt_range::config() const noexcept {
  return impl_->cfg;
}
int gpt_range::begin() const noexcept {
  return impl_->begin;
}
int gpt_range::end() const noexcept {
  return impl_->end;
}
const std::vector<named_tensor>& gpt_range::params() const noexcept {
  return impl_->params;
}
const std::vector<named_tensor>& gpt_range::grads() const noexcept {
  return impl_->grads;
}

mb_cache& gpt_range::impl::acquire(int mb, const char* op) {
  mb_cache* free_slot = nullptr;
  for (auto& s : slots) {
    require(!(s.used && s.mb == mb), op, fmt::format("microbatch {} is already in flight", mb));
    if (!s.used && !free_slot)
      free_slot = &s;
  }
  if (!free_slot) {
    slots.emplace_back();
    free_slot = &slots.back();
    free_slot->layers.resize(std::size_t(local_layers()));
  }
  free_slot->mb = mb;
  free_slot->used = true;
  free_slot->input_done = false;
  return *free_slot;
}

mb_cache& gpt_range::impl::find(int mb, const char* op) {
  for (auto& s : slots)
    if (s.used && s.mb == mb)
      return s;
  throw std::invalid_argument(fmt::format("{}: microbatch {} has no forward in flight", op, mb));
}

void gpt_range::impl::release(mb_cache& c) {
  for (auto& l : c.layers)
    l = layer_cache{};
  c.head = head_cache{};
  c.tokens = {};
  c.d_emb = {};
  c.targets = {};
  c.documents = {};
  c.layer = -1;
  c.weights_later = false;
  c.used = false;
  c.mb = -1;
}

void check_activation(const tensor_handle& x, const gpt_config& cfg, const char* op) {
  require_f32(x, op, "input activation", cfg.d_model);
  require(
    x.rank() == 3 && x.dim(1) <= cfg.context, op,
    fmt::format("input activation must be [B, T ≤ {}, {}], got {}", cfg.context, cfg.d_model, to_string(x.shape())));
}

namespace {
tensor_handle scalar(float v) {
  auto t = tensor_handle::empty({1});
  *t.data<float>() = v;
  return t;
}
} // namespace

tensor_handle gpt_range::forward(int mb, const tensor_handle& input, const tensor_handle& targets,
                                 const tensor_handle& documents) {
  auto& m = *impl_;
  auto& c = m.begin_forward(mb, input, targets, "gpt_range::forward");
  try {
    auto x = m.embed(c, input);
    for (int li = 0; li < m.local_layers(); ++li)
      x = m.block_forward(li, x, &c.layers[std::size_t(li)], documents);
    return m.last() ? m.head_forward(c, x, targets) : x;
  } catch (...) {
    m.release(c);
    throw;
  }
}

tensor_handle gpt_range::backward_input(int mb, const tensor_handle& grad_out) {
  return impl_->backward(mb, grad_out, false, "gpt_range::backward_input");
}

tensor_handle gpt_range::impl::backward(int mb, const tensor_handle& grad_out, bool weights, const char* op) {
  if (weights)
    ensure_grads();
  auto& c = find(mb, op);
  require(!c.input_done, op, fmt::format("backward_input of microbatch {} already ran", mb));
  check_grad_out(c, grad_out, op);
  try {
    tensor_handle dx = last() ? head_backward(c, grad_out, weights) : grad_out;
    // The fused backward runs each block's weight-gradient half right after its
    // input-gradient half, while the block's activations are still in cache; each
    // gradient sees the same operations in the same order as with the split calls.
    for (int li = local_layers() - 1; li >= 0; --li) {
      dx = block_backward_input(li, dx, c.layers[std::size_t(li)]);
      if (weights)
        block_backward_weight(li, c.layers[std::size_t(li)]), done(block_base(li), block_base(li + 1));
    }
    c.input_done = true;
    if (first()) {
      c.d_emb = dx;
      dx = {};
    }
    if (weights) {
      if (first())
        embed_backward_weight(c);
      release(c);
    }
    return dx;
  } catch (...) { // a half-done backward cannot be resumed: drop the microbatch
    release(c);
    throw;
  }
}

mb_cache& gpt_range::impl::begin_forward(int mb, const tensor_handle& input, const tensor_handle& targets,
                                         const char* op) {
  if (!first())
    check_activation(input, cfg, op);
  if (last())
    require(targets.defined() && targets.type() == dtype::i32, op, "the last range needs i32 targets [B, T]");
  auto& c = acquire(mb, op);
  c.batch = input.dim(0);
  c.seq = input.dim(1);
  return c;
}

tensor_handle gpt_range::impl::embed(mb_cache& c, const tensor_handle& input) {
  if (!first())
    return input;
  c.tokens = input;
  return embed_tokens(input);
}

tensor_handle gpt_range::impl::embed_tokens(const tensor_handle& tokens) const {
  if (!llama())
    return embedding_forward(tokens, params[0].value, params[1].value);
  require(tokens.rank() == 2 && tokens.dim(1) <= cfg.context, "gpt_range",
          fmt::format("tokens must be [B, T ≤ {}], got {}", cfg.context, to_string(tokens.shape())));
  return embedding_forward(tokens, params[0].value, {});
}

void gpt_range::impl::embed_backward_weight(mb_cache& c) {
  tensor_handle no_positions;
  embedding_backward_weight(c.d_emb, c.tokens, grads[0].value, llama() ? no_positions : grads[1].value);
  done(0, embed_params());
}

tensor_handle gpt_range::impl::final_norm(const tensor_handle& x, head_cache& hc) const {
  const auto h = head_base();
  if (llama())
    return rms_norm_forward(x, params[h].value, hc.rs, cfg.norm_eps);
  return layer_norm_forward(x, params[h].value, params[h + 1].value, hc.s);
}

tensor_handle gpt_range::impl::head_forward(mb_cache& c, const tensor_handle& x, const tensor_handle& targets) {
  auto& hc = c.head;
  hc.x = x;
  hc.lnf = final_norm(x, hc);
  auto logits = linear_forward(hc.lnf, head_w(), {}, {}, cfg.precision);
  float loss = 0;
  hc.dlogits = cross_entropy_backward(logits, targets, 1.0f, cfg.ignore_index, &loss);
  return scalar(loss);
}

void gpt_range::impl::check_grad_out(const mb_cache& c, const tensor_handle& grad_out, const char* op) const {
  if (last()) {
    if (grad_out.defined()) {
      require_f32(grad_out, op, "loss gradient");
      require(grad_out.numel() == 1, op, "the last range's gradient is the loss gradient [1]");
    }
    return;
  }
  check_activation(grad_out, cfg, op);
  require(grad_out.dim(0) == c.batch && grad_out.dim(1) == c.seq, op,
          fmt::format("gradient shape {} does not match the forward's [{}, {}, {}]", to_string(grad_out.shape()),
                      c.batch, c.seq, cfg.d_model));
}

tensor_handle gpt_range::impl::head_backward(mb_cache& c, const tensor_handle& grad_out, bool weights) {
  float s = grad_out.defined() ? *grad_out.data<float>() : 1.0f;
  if (s != 1.0f)
    for (long i = 0; i < c.head.dlogits.numel(); ++i)
      c.head.dlogits.data<float>()[i] *= s;
  auto h = head_base();
  c.head.d_lnf = linear_backward_input(c.head.dlogits, head_w(), cfg.precision);
  auto dx = llama() ? rms_norm_backward_input(c.head.d_lnf, c.head.x, c.head.rs, params[h].value)
                    : layer_norm_backward_input(c.head.d_lnf, c.head.x, c.head.s, params[h].value);
  if (weights)
    head_backward_weight(c), done(h, h + head_params());
  return dx;
}

void gpt_range::impl::head_backward_weight(mb_cache& c) {
  auto h = head_base();
  tensor_handle no_bias;
  linear_backward_weight(c.head.dlogits, c.head.lnf, head_dw(), no_bias, 1.0f, cfg.precision);
  if (llama())
    rms_norm_backward_weight(c.head.d_lnf, c.head.x, c.head.rs, grads[h].value);
  else
    layer_norm_backward_weight(c.head.d_lnf, c.head.x, c.head.s, grads[h].value, grads[h + 1].value);
}

void gpt_range::backward_weight(int mb) {
  constexpr auto op = "gpt_range::backward_weight";
  auto& m = *impl_;
  m.ensure_grads();
  auto& c = m.find(mb, op);
  require(c.input_done, op, fmt::format("backward_input of microbatch {} has not run", mb));
  try {
    if (m.last())
      m.head_backward_weight(c), m.done(m.head_base(), m.head_base() + m.head_params());
    for (int li = m.local_layers() - 1; li >= 0; --li)
      m.block_backward_weight(li, c.layers[std::size_t(li)]), m.done(m.block_base(li), m.block_base(li + 1));
    if (m.first())
      m.embed_backward_weight(c);
  } catch (...) {
    m.release(c);
    throw;
  }
  m.release(c);
}

tensor_handle gpt_range::backward(int mb, const tensor_handle& grad_out) {
  return impl_->backward(mb, grad_out, true, "gpt_range::backward");
}

tensor_handle gpt_range::evaluate(const tensor_handle& input, const tensor_handle& targets,
                                  const tensor_handle& documents) const {
  constexpr auto op = "gpt_range::evaluate";
  const auto& m = *impl_;
  tensor_handle x;
  if (m.first()) {
    x = m.embed_tokens(input);
  } else {
    check_activation(input, m.cfg, op);
    x = input;
  }
  for (int li = 0; li < m.local_layers(); ++li)
    x = m.block_forward(li, x, nullptr, documents);
  if (!m.last())
    return x;
  head_cache hc;
  auto lnf = m.final_norm(x, hc);
  auto logits = linear_forward(lnf, m.head_w(), {}, {}, m.cfg.precision);
  if (targets.defined())
    return scalar(cross_entropy_forward(logits, targets, m.cfg.ignore_index));
  return logits;
}

int gpt_range::in_flight() const noexcept {
  int n = 0;
  for (const auto& s : impl_->slots)
    n += s.used;
  return n;
}

void gpt_range::on_grads_done(std::function<void(std::size_t, std::size_t)> f) {
  impl_->grads_done = std::move(f);
}

void gpt_range::zero_grads() {
  if (!impl_->released_grads.empty()) // released: the next backward starts from zeroed buffers
    return;
  for (auto& g : impl_->grads)
    std::memset(g.value.raw(), 0, g.value.nbytes());
}

void gpt_range::release_grads() {
  auto& m = *impl_;
  if (!m.released_grads.empty())
    return;
  for (auto& g : m.grads) {
    m.released_grads.push_back(g.value.shape());
    g.value = tensor_handle{};
  }
}

double gpt_range::grad_sq_norm() const {
  return impl_->released_grads.empty() ? ops::grad_sq_norm(impl_->grads) : 0.0;
}
void gpt_range::scale_grads(float factor) {
  if (impl_->released_grads.empty())
    ops::scale_grads(impl_->grads, factor);
}

} // namespace troupe::ops
