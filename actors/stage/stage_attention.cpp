// A stage's microbatch in pieces around core attention, and what an attention
// server computes (DistCA, arXiv:2510.18121; #15).
#include "actors/stage/stage_attention.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe {

attention_result_msg attention_server_state::serve(const attention_task_msg& m) {
  attention_result_msg r{m.key};
  if (!m.key.backward) {
    if (!m.q.defined() || !m.k.defined() || !m.v.defined())
      throw std::runtime_error(fmt::format("attention task of stage {} microbatch {} layer {} shard {} lacks q, k or v",
                                           m.key.from, m.key.microbatch, m.key.layer, m.key.shard));
    saved s{m.q, m.k, m.v, {}};
    r.out = ops::shard_attention_forward(m.q, m.k, m.v, m.heads, s.stats);
    saved_.insert_or_assign(m.key, std::move(s));
    return r;
  }
  auto it = saved_.find(m.key); // the key's order leaves out the direction
  if (it == saved_.end())
    throw std::runtime_error(fmt::format("attention backward of stage {} step {} microbatch {} layer {} shard {} "
                                         "without its forward here",
                                         m.key.from, m.key.step, m.key.microbatch, m.key.layer, m.key.shard));
  auto g = ops::shard_attention_backward(m.dout, it->second.q, it->second.k, it->second.v, it->second.stats, m.heads);
  saved_.erase(it);
  r.dq = std::move(g.dq), r.dk = std::move(g.dk), r.dv = std::move(g.dv);
  return r;
}

namespace {

/// Rows [r0, r1) of a [B, ...] tensor (the tensor itself when that is all of it).
tensor_handle rows(const tensor_handle& t, long r0, long r1) {
  if (r0 == 0 && r1 == t.dim(0))
    return t;
  auto shape = t.shape();
  const auto row_bytes = t.nbytes() / static_cast<std::size_t>(t.dim(0));
  std::vector<std::int64_t> dims(shape.begin(), shape.end());
  dims[0] = r1 - r0;
  auto out = tensor_handle::empty(shape_t{std::span<const std::int64_t>(dims)}, t.type());
  std::memcpy(out.raw(), static_cast<const std::byte*>(t.raw()) + static_cast<std::size_t>(r0) * row_bytes,
              static_cast<std::size_t>(r1 - r0) * row_bytes);
  return out;
}

/// Tokens [first, first + count) of row `row` of x [b, T, W], columns [col, col + width), as [count, width].
tensor_handle block(const tensor_handle& x, long row, long first, long count, long col, long width) {
  const long T = x.dim(1), W = x.dim(2);
  auto out = tensor_handle::empty({count, width});
  const float* src = x.data<float>() + (row * T + first) * W + col;
  float* dst = out.data<float>();
  for (long i = 0; i < count; ++i)
    std::memcpy(dst + i * width, src + i * W, sizeof(float) * static_cast<std::size_t>(width));
  return out;
}

/// Adds (or writes) b [count, width] into the same place of x.
void put_block(tensor_handle& x, long row, long first, long count, long col, const tensor_handle& b, bool add) {
  const long T = x.dim(1), W = x.dim(2), width = b.dim(1);
  if (b.dim(0) != count)
    throw std::runtime_error(fmt::format("attention answer of {} rows where {} were sent", b.dim(0), count));
  float* dst = x.data<float>() + (row * T + first) * W + col;
  const float* src = b.data<float>();
  for (long i = 0; i < count; ++i)
    for (long j = 0; j < width; ++j)
      dst[i * W + j] = add ? dst[i * W + j] + src[i * width + j] : src[i * width + j];
}

} // namespace

stage_attention::stage_attention(stage_attention_config cfg, hooks h) : cfg_(std::move(cfg)), hooks_(std::move(h)) {
  if (cfg_.servers.empty() || cfg_.nano_batches < 1 || cfg_.replicas < 1)
    throw std::invalid_argument("stage_attention: needs servers, nano-batches and replicas");
}

void stage_attention::plan(const tensor_handle& round_documents) {
  const auto& d = round_documents;
  if (!d.defined() || d.type() != dtype::i32 || d.rank() != 3 || d.dim(0) != cfg_.replicas || d.dim(1) != batch_ ||
      d.dim(2) != seq_)
    throw std::runtime_error(fmt::format("microbatch {}: its round's masks must be i32 [{}, {}, {}], got {}", mb_,
                                         cfg_.replicas, batch_, seq_,
                                         d.defined() ? to_string(d.shape()) : std::string{"none"}));
  const int S = static_cast<int>(cfg_.servers.size()), N = cfg_.nano_batches;
  nanos_.assign(static_cast<std::size_t>(N), {});
  const long per = batch_ / N, extra = batch_ % N;
  long r0 = 0;
  for (int k = 0; k < N; ++k) {
    auto& n = nanos_[std::size_t(k)];
    n.slot = mb_ * N + k;
    n.r0 = r0, n.r1 = r0 + per + (k < extra ? 1 : 0);
    r0 = n.r1;
    // The round's documents in these rows, replica by replica: each at home on its replica's server.
    std::vector<sched::attention_document> docs;
    std::vector<std::pair<int, std::int64_t>> mine; // doc index -> (row in the nano-batch, start); row -1: another's
    for (int r = 0; r < cfg_.replicas; ++r)
      for (long b = n.r0; b < n.r1; ++b) {
        const std::int32_t* m = d.data<std::int32_t>() + (std::int64_t(r) * batch_ + b) * seq_;
        for (long i = 0; i < seq_;) {
          long e = i + 1;
          while (e < seq_ && m[e] != e)
            ++e;
          docs.push_back({e - i, cfg_.self_server >= 0 ? r : r % S});
          mine.emplace_back(r == cfg_.replica ? static_cast<int>(b - n.r0) : -1, i);
          i = e;
        }
      }
    auto p = sched::plan_attention(docs, {S, cfg_.tolerance});
    if (!backward_) {
      pairs_before_.resize(std::size_t(S)), pairs_after_.resize(std::size_t(S));
      for (int i = 0; i < S; ++i)
        pairs_before_[std::size_t(i)] += p.before[std::size_t(i)],
          pairs_after_[std::size_t(i)] += p.after[std::size_t(i)];
    }
    for (const auto& s : p.shards)
      if (auto [row, start] = mine[std::size_t(s.doc)]; row >= 0)
        n.shards.push_back({row, start, s.q, s.kv, s.server});
  }
}

attention_key stage_attention::key_of(const nano& n, int shard_index) const {
  return {step_,  cfg_.actor, mb_,         static_cast<std::int32_t>(&n - nanos_.data()),
          chunk_, n.layer,    shard_index, backward_};
}

attention_task_msg stage_attention::task_of(const nano& n, int shard_index) const {
  const auto& s = n.shards[std::size_t(shard_index)];
  const long c = range_->config().d_model, q0 = s.start + s.kv - s.q;
  attention_task_msg m{key_of(n, shard_index), cfg_.heads};
  if (!backward_)
    m.q = block(n.piece, s.row, q0, s.q, 0, c), m.k = block(n.piece, s.row, s.start, s.kv, c, c),
    m.v = block(n.piece, s.row, s.start, s.kv, 2 * c, c);
  else
    m.dout = block(n.piece, s.row, q0, s.q, 0, c);
  return m;
}

void stage_attention::dispatch(nano& n) {
  const long b = n.r1 - n.r0, c = range_->config().d_model;
  n.acc = tensor_handle::zeros({b, seq_, backward_ ? 3 * c : c});
  n.waiting = static_cast<int>(n.shards.size());
  const int k = static_cast<int>(&n - nanos_.data());
  for (int i = 0; i < static_cast<int>(n.shards.size()); ++i) {
    const auto& s = n.shards[std::size_t(i)];
    if (s.server == cfg_.self_server) { // served here, when nothing else is ready
      local_.emplace_back(k, i);
      continue;
    }
    hooks_.send(cfg_.servers[std::size_t(s.server)], task_of(n, i));
  }
}

void stage_attention::absorb(nano& n, const attention_key& key, const attention_result_msg& r) {
  const auto& s = n.shards.at(std::size_t(key.shard));
  const long c = range_->config().d_model, q0 = s.start + s.kv - s.q;
  if (!backward_) {
    put_block(n.acc, s.row, q0, s.q, 0, r.out, false);
  } else {
    put_block(n.acc, s.row, q0, s.q, 0, r.dq, true);
    put_block(n.acc, s.row, s.start, s.kv, c, r.dk, true);
    put_block(n.acc, s.row, s.start, s.kv, 2 * c, r.dv, true);
  }
  --n.waiting;
}

void stage_attention::start_forward(step_t step, int chunk, int mb, ops::gpt_range& range, const stage_tensor& input,
                                    const tensor_handle& targets) {
  busy_ = true, backward_ = false;
  step_ = step, chunk_ = chunk, mb_ = mb, range_ = &range;
  batch_ = input.value.dim(0), seq_ = input.value.dim(1);
  input_ = input;
  plan(input.round_documents);
  rounds_[{chunk, mb}] = input.round_documents;
  for (auto& n : nanos_) {
    n.piece = range.forward_begin(n.slot, rows(input.value, n.r0, n.r1),
                                  targets.defined() ? rows(targets, n.r0, n.r1) : tensor_handle{},
                                  input.documents.defined() ? rows(input.documents, n.r0, n.r1) : tensor_handle{});
    n.layer = 0;
    dispatch(n);
  }
}

void stage_attention::start_backward(step_t step, int chunk, int mb, ops::gpt_range& range, const tensor_handle& grad,
                                     bool weights) {
  auto round = rounds_.find({chunk, mb});
  if (round == rounds_.end())
    throw std::runtime_error(fmt::format("microbatch {}: a backward without its forward's round", mb));
  busy_ = true, backward_ = true, weights_ = weights;
  step_ = step, chunk_ = chunk, mb_ = mb, range_ = &range;
  auto masks = std::move(round->second);
  rounds_.erase(round);
  batch_ = masks.dim(1), seq_ = masks.dim(2);
  plan(masks);
  const int layers = range.end() - range.begin();
  piece_runs_.assign(static_cast<std::size_t>(layers + 1), 0);
  for (auto& n : nanos_) {
    tensor_handle g;
    if (range.is_last()) { // the nano-batch's share of the microbatch's loss gradient
      g = tensor_handle::empty({1});
      g.data<float>()[0] =
        (grad.defined() ? grad.data<float>()[0] : 1.0f) * static_cast<float>(n.r1 - n.r0) / static_cast<float>(batch_);
    } else {
      g = rows(grad, n.r0, n.r1);
    }
    piece_begins(0);
    n.piece = range.backward_begin(n.slot, g, weights_);
    piece_ends();
    n.pieces = 1;
    n.layer = layers - 1;
    dispatch(n);
  }
}

void stage_attention::resume(nano& n) {
  bool done = false;
  if (!backward_) {
    auto out = range_->forward_resume(n.slot, n.acc, done);
    if (!done) {
      n.piece = std::move(out), ++n.layer;
      dispatch(n);
    } else {
      n.done = true, n.out = std::move(out);
    }
    return;
  }
  piece_begins(n.pieces);
  auto out = range_->backward_resume(n.slot, n.acc, done);
  piece_ends();
  ++n.pieces;
  if (!done) {
    n.piece = std::move(out), --n.layer;
    dispatch(n);
    return;
  }
  n.done = true, n.out = std::move(out);
  if (!weights_)
    weights_due_[{chunk_, mb_}].push_back(n.slot);
}

void stage_attention::piece_begins(int piece) {
  // Only a fused backward's pieces compute weight gradients.
  if (weights_)
    hooks_.begin_backward_piece(++piece_runs_.at(std::size_t(piece)) == cfg_.nano_batches);
}

void stage_attention::piece_ends() {
  if (weights_)
    hooks_.end_backward_piece();
}

void stage_attention::backward_weight(int chunk, int mb, ops::gpt_range& range) {
  auto due = weights_due_.find({chunk, mb});
  if (due == weights_due_.end())
    throw std::runtime_error(fmt::format("microbatch {}: a weight-gradient pass without its input-gradient half", mb));
  auto slots = std::move(due->second);
  weights_due_.erase(due);
  for (std::size_t k = 0; k < slots.size(); ++k) {
    hooks_.begin_backward_piece(k + 1 == slots.size());
    range.backward_weight(slots[k]);
    hooks_.end_backward_piece();
  }
}

bool stage_attention::run_ready() {
  if (!busy_)
    return false;
  for (auto& n : nanos_)
    if (!n.done && n.waiting == 0) {
      resume(n);
      busy_ = std::any_of(nanos_.begin(), nanos_.end(), [](const nano& x) { return !x.done; });
      return true;
    }
  if (local_.empty())
    return false;
  auto [k, i] = local_.front();
  local_.erase(local_.begin());
  auto& n = nanos_[std::size_t(k)];
  auto m = task_of(n, i);
  absorb(n, m.key, server_.serve(m));
  return true;
}

void stage_attention::on_result(const attention_result_msg& m) {
  const auto& k = m.key;
  if (!busy_ || k.step != step_ || k.microbatch != mb_ || k.chunk != chunk_ || k.backward != backward_ || k.nano < 0 ||
      k.nano >= static_cast<int>(nanos_.size()) || nanos_[std::size_t(k.nano)].layer != k.layer ||
      nanos_[std::size_t(k.nano)].waiting == 0)
    throw std::runtime_error(fmt::format(
      "an attention answer for step {} microbatch {} layer {} that nothing waits for", k.step, k.microbatch, k.layer));
  absorb(nanos_[std::size_t(k.nano)], k, m);
}

stage_tensor stage_attention::take_output() {
  stage_tensor out;
  const bool last = range_->is_last();
  if (!backward_ && last) { // the microbatch's mean loss: the nano-batches' weighted by their sequences
    double loss = 0;
    for (const auto& n : nanos_)
      loss += static_cast<double>(n.out.data<float>()[0]) * static_cast<double>(n.r1 - n.r0);
    out.value = tensor_handle::empty({1});
    out.value.data<float>()[0] = static_cast<float>(loss / static_cast<double>(batch_));
  } else if (nanos_.front().out.defined()) {
    if (nanos_.size() == 1) {
      out.value = std::move(nanos_.front().out);
    } else {
      auto shape = nanos_.front().out.shape();
      std::vector<std::int64_t> dims(shape.begin(), shape.end());
      dims[0] = batch_;
      out.value = tensor_handle::empty(shape_t{std::span<const std::int64_t>(dims)});
      auto* dst = static_cast<std::byte*>(out.value.raw());
      for (const auto& n : nanos_) {
        std::memcpy(dst, n.out.raw(), n.out.nbytes());
        dst += n.out.nbytes();
      }
    }
  }
  if (!backward_)
    out.documents = input_.documents, out.round_documents = input_.round_documents;
  input_ = {};
  for (auto& n : nanos_)
    n.out = {}, n.piece = {}, n.acc = {};
  return out;
}

} // namespace troupe
