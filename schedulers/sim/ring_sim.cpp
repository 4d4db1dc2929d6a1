// The data-parallel ring under the simulated clock (ring_sim.hpp): the stages'
// passes release the buckets, the ring members' bookkeeping decides which chunk
// goes when, the emulated links how long it takes.
#include "schedulers/sim/ring_sim.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe::sched::detail {

/// A position's buckets as its stages cut them (make_buckets), and when a
/// chunk's last pass completes each: a pass writes its chunk's gradients from
/// the last parameter down, taking time in proportion to their elements.
struct ring_sim::position_layout {
  std::vector<std::int64_t> elements; ///< by bucket: values it carries (the loss's included)
  std::vector<int> params;            ///< by bucket: parameters a step's last passes complete
  struct completion {
    int bucket = 0, params = 0; ///< this many of the bucket's parameters are written...
    double at = 0;              ///< ...once this share of the pass has run
  };
  std::vector<std::vector<completion>> chunks; ///< by chunk, in the order the pass completes them
  int loss_bucket = -1;                        ///< ZeRO: the loss's bucket of its own, sent at the step's end
  std::int64_t slice = 0;                      ///< ZeRO: the values a shard steps
};

/// One simulated ring member, standing for the replicas of its span.
struct ring_sim::member {
  explicit member(book b) : ring(std::move(b)) {}
  book ring;
  int first = 0, span = 1;         ///< places in the group it stands for
  double* busy = nullptr;          ///< its link to the next member
  link_spec link;                  ///< latency scaled to the hops it stands for
  double bytes = 0;                ///< what each replica of its span sent (scaled)
  std::map<ring_key, int> taken;   ///< replicas of the span that handed the bucket over
  std::map<std::int64_t, int> due; ///< ZeRO: replicas of the span whose shard stepped, by step
};

/// A stage's buckets of the step under way.
struct ring_sim::stage_state {
  std::int64_t step = -1;
  std::vector<int> pending; ///< by bucket: parameters still to be written this step
  std::vector<char> sent;
  int back = 0, gathered = 0;
  int armed = -1; ///< the chunk whose last pass runs, or -1
  bool flushed = false;
  double first_sent = -1;
};

namespace {

/// The parameters' elements of position `s`, by chunk: the given list, or the
/// cost model's count in 4 tensors a layer.
std::vector<std::vector<std::int64_t>> position_tensors(const cluster_config& c, int s, double params) {
  const auto& st = c.stages[static_cast<std::size_t>(s)];
  std::vector<std::vector<std::int64_t>> out;
  if (static_cast<std::size_t>(s) < c.ring.tensors.size() && !c.ring.tensors[static_cast<std::size_t>(s)].empty())
    out = c.ring.tensors[static_cast<std::size_t>(s)];
  else {
    int layers = 0;
    for (auto [b, e] : st.chunks)
      layers += e - b;
    for (auto [b, e] : st.chunks) {
      const double n = params * (e - b) / std::max(layers, 1);
      const int k = std::max(4 * (e - b), 1);
      auto& t = out.emplace_back();
      for (int i = 0; i < k; ++i)
        t.push_back(std::max<std::int64_t>(1, std::llround(n * (i + 1) / k) - std::llround(n * i / k)));
    }
  }
  const auto tp = static_cast<std::int64_t>(std::max(c.costs.tensor_parallel, 1)); // a slice per device
  for (auto& chunk : out)
    for (auto& e : chunk)
      e = (e + tp - 1) / tp;
  return out;
}

} // namespace

ring_sim::ring_sim(const cluster_config& c, int group, const std::vector<double>& params, hooks h)
    : c_(c), h_(std::move(h)), p_(static_cast<int>(c.stages.size())), n_(group),
      k_(std::clamp(c.ring.max_members, 2, std::max(group, 2))) {
  k_ = std::min(k_, n_);
  const bool zero = c.ring.zero > 0;
  for (int s = 0; s < p_; ++s) {
    auto tensors = position_tensors(c, s, params[static_cast<std::size_t>(s)]);
    std::vector<std::vector<std::int64_t>> bytes;
    std::int64_t total = 0;
    for (const auto& chunk : tensors) {
      auto& b = bytes.emplace_back();
      for (auto e : chunk)
        b.push_back(4 * e), total += 4 * e; // f32 gradients, as the stage cuts them
    }
    auto bucket = std::max<std::int64_t>(c.ring.bucket_bytes, 1);
    if (total / bucket >= c.ring.max_buckets)
      bucket = (total + c.ring.max_buckets - 1) / c.ring.max_buckets;
    auto cut = make_buckets(bytes, bucket);
    auto l = std::make_unique<position_layout>();
    l->chunks.resize(tensors.size());
    for (std::size_t b = 0; b < cut.size(); ++b) {
      std::int64_t e = 0;
      for (auto pr : cut[b])
        e += tensors[static_cast<std::size_t>(pr.chunk)][static_cast<std::size_t>(pr.index)];
      l->elements.push_back(e);
      l->params.push_back(static_cast<int>(cut[b].size()));
    }
    // The stage that computes the loss sums it with the gradients: one value
    // more in the last bucket, or (ZeRO) a bucket of its own.
    const bool loss = std::any_of(c.stages[static_cast<std::size_t>(s)].chunks.begin(),
                                  c.stages[static_cast<std::size_t>(s)].chunks.end(),
                                  [&](auto ch) { return ch.second == c.model.layers; });
    if (loss && !l->elements.empty()) {
      if (zero)
        l->loss_bucket = static_cast<int>(l->elements.size()), l->elements.push_back(1), l->params.push_back(0);
      else
        ++l->elements.back();
    }
    for (std::size_t b = 0; b < cut.size(); ++b)
      l->slice += (l->elements[b] + n_ - 1) / n_;
    for (std::size_t ch = 0; ch < tensors.size(); ++ch) {
      std::vector<int> owner(tensors[ch].size(), -1);
      for (std::size_t b = 0; b < cut.size(); ++b)
        for (auto pr : cut[b])
          if (static_cast<std::size_t>(pr.chunk) == ch)
            owner[static_cast<std::size_t>(pr.index)] = static_cast<int>(b);
      std::int64_t all = 0, done = 0;
      for (auto e : tensors[ch])
        all += e;
      auto& out = l->chunks[ch];
      for (auto i = tensors[ch].size(); i-- > 0;) {
        done += tensors[ch][i];
        const double at = all > 0 ? static_cast<double>(done) / static_cast<double>(all) : 1.0;
        if (!out.empty() && out.back().bucket == owner[i])
          ++out.back().params, out.back().at = at;
        else
          out.push_back({owner[i], 1, at});
      }
      if (!out.empty())
        out.back().at = 1.0; // the pass's end writes its last
    }
    layout_.push_back(std::move(l));
  }
  const double hops = k_ > 1 ? static_cast<double>(n_ - 1) / (k_ - 1) : 1.0;
  for (int g = 0; g < c.replicas / n_; ++g)
    for (int s = 0; s < p_; ++s)
      for (int j = 0; j < k_; ++j) {
        auto m = std::make_unique<member>(book{fmt::format("ring {} of position {}", j, s), k_, j, zero});
        m->first = (j * n_ + k_ - 1) / k_;
        m->span = ((j + 1) * n_ + k_ - 1) / k_ - m->first;
        const int from = g * n_ + m->first, to = g * n_ + ((j + 1) % k_ * n_ + k_ - 1) / k_;
        cluster_config::local_update::link l;
        if (c.ring.link_of)
          l = c.ring.link_of(s, from, to);
        else
          l = {fmt::format("ring {}>{}/{}", from, to, s), h_.network(s, from, to)};
        m->busy = &links_.link(l.key);
        m->link = l.spec;
        m->link.latency *= hops;
        members_.push_back(std::move(m));
      }
  for (int r = 0; r < c.replicas; ++r)
    for (int s = 0; s < p_; ++s)
      stages_.push_back(std::make_unique<stage_state>());
  ring_s_.assign(static_cast<std::size_t>(p_), {0.0, 0.0});
}

ring_sim::~ring_sim() = default;

ring_sim::member& ring_sim::member_of(int replica, int position) {
  const int g = replica / n_, q = replica % n_;
  return *members_[static_cast<std::size_t>((g * p_ + position) * k_ + q * k_ / n_)];
}

ring_sim::stage_state& ring_sim::stage(int replica, int position) {
  return *stages_[static_cast<std::size_t>(replica * p_ + position)];
}

namespace {

/// Starts `step` on a stage's buckets when it is a new one.
template <class State, class Layout>
void begin_step(State& st, const Layout& l, std::int64_t step) {
  if (st.step == step)
    return;
  st.step = step;
  st.pending = l.params;
  st.sent.assign(l.elements.size(), 0);
  st.back = st.gathered = 0;
  st.armed = -1;
  st.flushed = false;
  st.first_sent = -1;
}

} // namespace

void ring_sim::pass(int replica, int position, std::int64_t step, int chunk, bool last, double seconds) {
  auto& st = stage(replica, position);
  const auto& l = *layout_[static_cast<std::size_t>(position)];
  begin_step(st, l, step);
  st.armed = last && c_.ring.overlap ? chunk : -1;
  if (st.armed < 0)
    return;
  for (const auto& d : l.chunks[static_cast<std::size_t>(chunk)])
    if (d.at < 1.0)
      h_.post(h_.now() + d.at * seconds, [this, replica, position, step, d] {
        auto& st = stage(replica, position);
        if (st.step == step && (st.pending[static_cast<std::size_t>(d.bucket)] -= d.params) == 0)
          release(replica, position, step, d.bucket);
      });
}

void ring_sim::pass_done(int replica, int position, std::int64_t step, int chunk) {
  auto& st = stage(replica, position);
  if (st.step != step || st.armed != chunk)
    return;
  st.armed = -1;
  for (const auto& d : layout_[static_cast<std::size_t>(position)]->chunks[static_cast<std::size_t>(chunk)])
    if (d.at >= 1.0 && (st.pending[static_cast<std::size_t>(d.bucket)] -= d.params) == 0)
      release(replica, position, step, d.bucket);
}

bool ring_sim::flush(int replica, int position, std::int64_t step) {
  auto& st = stage(replica, position);
  begin_step(st, *layout_[static_cast<std::size_t>(position)], step);
  st.flushed = true;
  for (int b = 0; b < static_cast<int>(st.sent.size()); ++b)
    release(replica, position, step, b);
  return st.back == static_cast<int>(st.sent.size());
}

void ring_sim::release(int replica, int position, std::int64_t step, int bucket) {
  auto& st = stage(replica, position);
  if (st.sent[static_cast<std::size_t>(bucket)])
    return;
  st.sent[static_cast<std::size_t>(bucket)] = 1;
  if (st.first_sent < 0)
    st.first_sent = h_.now();
  auto& m = member_of(replica, position);
  const ring_key key{step, bucket};
  if (++m.taken[key] < m.span)
    return;
  m.taken.erase(key);
  const int g = replica / n_, j = replica % n_ * k_ / n_;
  run(g, position, j,
      m.ring.take(key, layout_[static_cast<std::size_t>(position)]->elements[static_cast<std::size_t>(bucket)]));
}

void ring_sim::run(int group, int position, int j, std::vector<book::event> events) {
  auto& m = *members_[static_cast<std::size_t>((group * p_ + position) * k_ + j)];
  for (const auto& e : events) {
    if (e.what == book::kind::apply)
      continue; // the values: nothing the clock sees
    if (e.what != book::kind::send) {
      done(group, position, j, e);
      continue;
    }
    // A real member's chunk, its bytes scaled to the hops this one stands for.
    const double chunk = static_cast<double>(
      (layout_[static_cast<std::size_t>(position)]->elements[static_cast<std::size_t>(e.key.bucket)] + n_ - 1) / n_);
    const double bytes = chunk * c_.gradient_bytes * (k_ > 1 ? static_cast<double>(n_ - 1) / (k_ - 1) : 1.0);
    m.bytes += bytes;
    const int next = (j + 1) % k_;
    h_.post(link_pacer::arrival(*m.busy, m.link, h_.now(), bytes),
            [this, group, position, next, key = e.key, phase = e.phase] {
              auto& to = *members_[static_cast<std::size_t>((group * p_ + position) * k_ + next)];
              run(group, position, next, to.ring.receive(key, phase, {}));
            });
  }
}

void ring_sim::done(int group, int position, int j, const book::event& e) {
  auto& m = *members_[static_cast<std::size_t>((group * p_ + position) * k_ + j)];
  for (int q = m.first; q < m.first + m.span; ++q) {
    const int r = group * n_ + q;
    auto& st = stage(r, position);
    const int buckets = static_cast<int>(st.sent.size());
    if (e.what == book::kind::gathered) {
      if (++st.gathered == buckets)
        h_.updated(r, position, e.key.step);
      continue;
    }
    if (++st.back < buckets)
      continue;
    auto& t = ring_s_[static_cast<std::size_t>(position)];
    t.first += h_.now() - st.first_sent, ++t.second;
    if (st.flushed)
      h_.synced(r, position, e.key.step);
  }
}

void ring_sim::update(int replica, int position, std::int64_t step) {
  h_.compute(replica, position, shard_step_s(position), [this, replica, position, step] {
    auto& m = member_of(replica, position);
    if (++m.due[step] < m.span)
      return;
    m.due.erase(step);
    const int g = replica / n_, j = replica % n_ * k_ / n_;
    for (int b = 0; b < static_cast<int>(layout_[static_cast<std::size_t>(position)]->elements.size()); ++b)
      run(g, position, j, m.ring.gather({step, b}));
  });
}

double ring_sim::shard_step_s(int position) const {
  return c_.costs.device.optimizer_per_param * static_cast<double>(layout_[static_cast<std::size_t>(position)]->slice);
}

void ring_sim::report(cluster_result& out) const {
  double total = 0;
  for (int r = 0; r < c_.replicas; ++r)
    for (int s = 0; s < p_; ++s) {
      const int g = r / n_, j = r % n_ * k_ / n_;
      const double b = members_[static_cast<std::size_t>((g * p_ + s) * k_ + j)]->bytes;
      out.ring_bytes_by_actor[fmt::format("r{}s{}_{}", r, s, c_.ring.zero > 0 ? "os" : "ar")] = b;
      total += b;
    }
  out.allreduce_bytes = total / static_cast<double>(c_.steps);
  for (int s = 0; s < p_ && static_cast<std::size_t>(s) < out.positions.size(); ++s) {
    auto [sum, n] = ring_s_[static_cast<std::size_t>(s)];
    out.positions[static_cast<std::size_t>(s)].allreduce_s = n > 0 ? sum / n : 0.0;
  }
}

} // namespace troupe::sched::detail
