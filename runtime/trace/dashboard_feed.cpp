// The dashboard's data and its WebSocket frames (compact JSON: six numbers a span).
#include "runtime/trace/dashboard_feed.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace troupe {

namespace {

double us(std::int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

/// JSON has no NaN or infinity: those become null.
nlohmann::json number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json optional_number(const std::optional<double>& v) {
  return v ? number(*v) : nlohmann::json(nullptr);
}

} // namespace

dashboard_feed::dashboard_feed(std::string title, bool live, std::size_t max_spans, std::int64_t tokens_per_step)
    : title_(std::move(title)), live_(live), max_spans_(std::max<std::size_t>(max_spans, 1024)) {
  meter_.tokens_per_step = tokens_per_step;
}

void dashboard_feed::poll_recorder() {
  auto& r = trace_recorder::global();
  data_.actors = r.actors();
  std::vector<span> spans;
  std::vector<counter_sample> fresh;
  now_ns_ = trace_now();
  r.collect(cursor_, spans, &fresh);
  data_.dropped = cursor_.missed;
  append(spans, fresh);
}

void dashboard_feed::ingest(int node, trace_snapshot b) {
  for (auto& a : b.actors) {
    auto key = std::pair{node, a.id};
    if (ingested_ids_.count(key) || data_.actors.size() > std::numeric_limits<std::uint16_t>::max())
      continue;
    auto id = static_cast<std::uint16_t>(data_.actors.size());
    ingested_ids_[key] = id;
    data_.actors.push_back({id, std::move(a.name), std::move(a.type), node, std::move(a.role), a.position});
  }
  auto known = std::remove_if(b.spans.begin(), b.spans.end(), [&](span& s) {
    auto i = ingested_ids_.find({node, s.actor});
    if (i == ingested_ids_.end())
      return true;
    s.actor = i->second;
    return false;
  });
  ingest_dropped_ += static_cast<std::uint64_t>(b.spans.end() - known);
  b.spans.erase(known, b.spans.end());
  node_dropped_[node] = b.dropped;
  data_.dropped = ingest_dropped_;
  for (const auto& [n, d] : node_dropped_)
    data_.dropped += d;
  now_ns_ = std::max(now_ns_, trace_now());
  append(b.spans, b.counters);
}

void dashboard_feed::tick() noexcept {
  now_ns_ = std::max(now_ns_, trace_now());
}

void dashboard_feed::append(std::vector<span>& spans, std::vector<counter_sample>& counters) {
  polls_.push_back({now_ns_, base_ + data_.spans.size()});
  data_.spans.insert(data_.spans.end(), spans.begin(), spans.end());
  for (auto& c : counters) {
    auto tps = meter_.on_sample(c);
    data_.counters.push_back(std::move(c));
    if (tps)
      data_.counters.push_back(*tps);
  }
  if (data_.spans.size() > max_spans_) {
    auto cut = data_.spans.size() - max_spans_ / 2;
    data_.spans.erase(data_.spans.begin(), data_.spans.begin() + static_cast<std::ptrdiff_t>(cut));
    base_ += cut;
  }
}

void dashboard_feed::load(trace_snapshot t) {
  data_ = std::move(t);
  for (const auto& s : data_.spans)
    now_ns_ = std::max(now_ns_, s.end_ns);
  finished_ = true;
}

void dashboard_feed::update_stats(std::int64_t window_ns) {
  if (live_ && !finished_) {
    // Only spans delivered by polls inside the window can reach into it.
    auto from = std::max<std::int64_t>(0, now_ns_ - window_ns);
    auto first = std::find_if(polls_.begin(), polls_.end(), [&](const auto& p) { return p.first >= from; });
    auto start = first == polls_.end() ? base_ + data_.spans.size() : std::max(first->second, base_);
    polls_.erase(polls_.begin(), first == polls_.begin() ? first : std::prev(first));
    trace_snapshot recent;
    recent.actors = data_.actors;
    recent.dropped = data_.dropped;
    recent.spans.assign(data_.spans.begin() + static_cast<std::ptrdiff_t>(start - base_), data_.spans.end());
    stats_ = summarize(recent, from, now_ns_, false);
    stats_.span_count = data_.spans.size();
    // Keep every channel ever seen, with its in-flight count from this window.
    for (auto& [key, e] : edges_)
      e.in_flight = 0;
    for (const auto& c : stats_.channels)
      edges_[{c.from, c.to}] = c;
    stats_.channels.clear();
    for (const auto& [key, e] : edges_)
      stats_.channels.push_back(e);
  } else {
    stats_ = summarize(data_, -1, -1, false);
  }
  // The latest counters, whatever the window.
  for (const auto& c : data_.counters) {
    if (c.name == "loss")
      stats_.loss = c.value, stats_.last_step = std::max(stats_.last_step, c.step);
    else if (c.name == "val_loss")
      stats_.val_loss = c.value, stats_.val_step = c.step;
    else if (c.name == "tokens_per_s")
      stats_.tokens_per_s = c.value;
  }
  nlohmann::json j;
  j["now"] = us(now_ns_);
  j["window_s"] = live_ && !finished_ ? static_cast<double>(window_ns) * 1e-9
                                      : static_cast<double>(stats_.end_ns - stats_.begin_ns) * 1e-9;
  j["bubble"] = optional_number(stats_.bubble_fraction);
  j["step"] = stats_.last_step;
  j["loss"] = optional_number(stats_.loss);
  j["val_loss"] = optional_number(stats_.val_loss);
  j["val_step"] = stats_.val_step;
  j["tokens_per_s"] = optional_number(stats_.tokens_per_s);
  j["dropped"] = data_.dropped;
  j["spans_total"] = base_ + data_.spans.size();
  auto& actors = j["actors"] = nlohmann::json::array();
  for (const auto& a : stats_.actors)
    actors.push_back({{"id", a.actor.id},
                      {"busy", number(a.busy_fraction)},
                      {"mailbox", a.mailbox},
                      {"spans", a.spans},
                      {"bytes_sent", a.bytes_sent}});
  j["stragglers"] = to_json(stats_.stragglers);
  auto& chans = j["channels"] = nlohmann::json::array();
  for (const auto& c : stats_.channels)
    chans.push_back(
      {{"from", c.from}, {"to", c.to}, {"messages", c.messages}, {"bytes", c.bytes}, {"in_flight", c.in_flight}});
  stats_frame_ = std::move(j);
}

std::string dashboard_feed::next_frame(feed_cursor& c, std::size_t max_spans, bool& more) {
  auto out = nlohmann::json::object();
  if (!c.hello) {
    nlohmann::json kinds = nlohmann::json::array();
    for (int k = 0; k <= static_cast<int>(span_kind::other); ++k)
      kinds.push_back(std::string{to_string(static_cast<span_kind>(k))});
    out["hello"] = {{"title", title_}, {"live", live_}, {"kinds", kinds}};
    c.hello = true;
  }
  if (c.actors != data_.actors.size()) {
    auto& a = out["actors"] = nlohmann::json::array();
    for (const auto& x : data_.actors)
      a.push_back({{"id", x.id}, {"name", x.name}, {"type", x.type}, {"node", x.node}, {"role", x.role}});
    c.actors = data_.actors.size();
  }
  c.span = std::max(c.span, base_);
  auto end = base_ + data_.spans.size();
  auto upto = std::min<std::uint64_t>(end, c.span + max_spans);
  if (upto > c.span) {
    auto& s = out["spans"] = nlohmann::json::array(); // six numbers a span, one flat array
    s.get_ref<nlohmann::json::array_t&>().reserve(6 * (upto - c.span));
    for (auto i = c.span; i < upto; ++i) {
      const auto& x = data_.spans[i - base_];
      s.push_back(x.actor);
      s.push_back(static_cast<int>(x.kind));
      s.push_back(us(x.begin_ns));
      s.push_back(us(x.end_ns - x.begin_ns));
      s.push_back(x.step);
      s.push_back(x.microbatch);
    }
    c.span = upto;
  }
  more = upto < end;
  if (c.counter < data_.counters.size()) {
    auto& a = out["counters"] = nlohmann::json::array();
    for (; c.counter < data_.counters.size(); ++c.counter) {
      const auto& x = data_.counters[c.counter];
      a.push_back({x.name, us(x.t_ns), number(x.value), x.step});
    }
  }
  if (!out.empty() || !more) {
    if (!stats_frame_.is_null())
      out["stats"] = stats_frame_;
    if (finished_ && !c.finished_sent) {
      out["finished"] = true;
      c.finished_sent = true;
    }
  }
  return out.dump();
}

} // namespace troupe
