// Busy and idle time, bubble fraction, channels and action orders from spans.
#include "runtime/trace/trace_summary.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

namespace troupe {

namespace {

/// The part of a flow id that names the route (target stage and message kind),
/// as actors/stage/pipeline_messages.hpp's flow_id packs it: every message on one
/// route goes to the same receiver.
std::uint64_t route_of(std::uint64_t flow) {
  auto f = flow - 1;
  return f % 4 + 4 * ((f / 4 / 65536) % 4096);
}

std::int64_t union_length(std::vector<std::pair<std::int64_t, std::int64_t>>& iv) {
  std::sort(iv.begin(), iv.end());
  std::int64_t total = 0, cur_b = 0, cur_e = -1;
  for (auto [b, e] : iv) {
    if (b > cur_e) {
      if (cur_e > cur_b)
        total += cur_e - cur_b;
      cur_b = b, cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (cur_e > cur_b)
    total += cur_e - cur_b;
  return total;
}

std::string seconds(std::int64_t ns) {
  return fmt::format("{:.3f}", static_cast<double>(ns) * 1e-9);
}

} // namespace

char action_letter(span_kind k) noexcept {
  switch (k) {
  case span_kind::forward:
    return 'F';
  case span_kind::backward_input:
    return 'I';
  case span_kind::backward_weight:
    return 'W';
  case span_kind::backward:
    return 'B';
  case span_kind::forward_backward:
    return '&';
  default:
    return 0;
  }
}

bool is_busy(const span& s) noexcept {
  switch (s.kind) {
  case span_kind::forward:
  case span_kind::backward_input:
  case span_kind::backward_weight:
  case span_kind::backward:
  case span_kind::forward_backward:
  case span_kind::optimizer:
  case span_kind::eval:
    return true;
  case span_kind::send:
  case span_kind::receive:
    return s.end_ns > s.begin_ns;
  default:
    return false;
  }
}

trace_summary summarize(const trace_snapshot& t, std::int64_t from_ns, std::int64_t to_ns, bool orders) {
  trace_summary out;
  out.span_count = t.spans.size();
  out.dropped = t.dropped;
  out.cut_short = t.cut_short;
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& s : t.spans)
    if (is_busy(s))
      first = std::min(first, s.begin_ns), last = std::max(last, s.end_ns);
  if (first > last)
    first = last = 0;
  out.begin_ns = from_ns >= 0 ? from_ns : first;
  out.end_ns = to_ns >= 0 ? to_ns : last;
  auto window = std::max<std::int64_t>(1, out.end_ns - out.begin_ns);

  std::size_t n = t.actors.size();
  for (const auto& s : t.spans)
    n = std::max<std::size_t>(n, s.actor + 1u);
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> busy(n);
  std::vector<std::int64_t> last_mailbox_t(n, INT64_MIN);
  out.actors.resize(n);
  for (std::size_t i = 0; i < n; ++i)
    out.actors[i].actor =
      i < t.actors.size() ? t.actors[i] : actor_info{static_cast<std::uint16_t>(i), fmt::format("actor{}", i), "", 0};

  // Flows: sends by id, then matched receives give channels.
  struct sent {
    std::uint16_t actor;
    std::uint64_t bytes;
    std::int64_t t;
  };
  std::unordered_map<std::uint64_t, sent> sends;
  for (const auto& s : t.spans)
    if (s.flow != 0 && !s.flow_end)
      sends[s.flow] = {s.actor, s.bytes, s.begin_ns};
  std::map<std::pair<std::uint16_t, std::uint16_t>, channel_summary> chans;
  std::map<std::pair<std::uint16_t, std::uint64_t>, std::uint16_t> route_to; // (sender, route) -> receiver
  std::unordered_map<std::uint64_t, std::int64_t> received;                  // flow -> receive time
  for (const auto& s : t.spans) {
    if (s.flow == 0 || !s.flow_end)
      continue;
    received[s.flow] = s.begin_ns;
    auto i = sends.find(s.flow);
    if (i == sends.end())
      continue;
    auto& c = chans[{i->second.actor, s.actor}];
    c.from = i->second.actor, c.to = s.actor;
    ++c.messages;
    c.bytes += i->second.bytes ? i->second.bytes : s.bytes;
    route_to[{i->second.actor, route_of(s.flow)}] = s.actor;
  }
  for (const auto& [flow, snd] : sends) {
    if (snd.t >= out.end_ns)
      continue;
    auto r = received.find(flow);
    if (r != received.end() && r->second <= out.end_ns)
      continue;
    auto to = route_to.find({snd.actor, route_of(flow)});
    if (to == route_to.end())
      continue;
    ++chans[{snd.actor, to->second}].in_flight;
  }
  for (auto& [key, c] : chans) {
    c.from = key.first, c.to = key.second;
    out.channels.push_back(c);
    if (c.to < n)
      out.actors[c.to].mailbox += c.in_flight;
  }

  for (const auto& s : t.spans) {
    auto& a = out.actors[s.actor];
    if (s.begin_ns <= out.end_ns && s.begin_ns > last_mailbox_t[s.actor] && s.mailbox > 0)
      last_mailbox_t[s.actor] = s.begin_ns, a.mailbox = std::max(a.mailbox, s.mailbox);
    if (s.end_ns < out.begin_ns || s.begin_ns >= out.end_ns)
      continue;
    ++a.spans;
    if (s.begin_ns >= out.begin_ns)
      a.mailbox_max = std::max(a.mailbox_max, s.mailbox);
    if (is_busy(s))
      busy[s.actor].push_back({std::max(s.begin_ns, out.begin_ns), std::min(s.end_ns, out.end_ns)});
    if (s.kind == span_kind::send)
      a.bytes_sent += s.bytes;
  }
  double stage_busy = 0;
  int stages = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto& a = out.actors[i];
    a.busy_ns = union_length(busy[i]);
    a.idle_ns = window - a.busy_ns;
    a.busy_fraction = static_cast<double>(a.busy_ns) / static_cast<double>(window);
    if (a.actor.role == stage_role)
      stage_busy += a.busy_fraction, ++stages;
  }
  if (stages > 0)
    out.bubble_fraction = std::clamp(1.0 - stage_busy / stages, 0.0, 1.0);

  out.stragglers = analyze_step_times(step_times_of(t, from_ns, to_ns));
  if (orders) {
    std::map<std::uint16_t, int> rank;
    for (const auto& a : out.actors)
      if (a.actor.role == stage_role)
        rank.emplace(a.actor.id, static_cast<int>(rank.size()));
    std::map<std::pair<std::uint16_t, std::int32_t>, std::vector<const span*>> by_step;
    for (const auto& s : t.spans)
      if (action_letter(s.kind) && rank.count(s.actor))
        by_step[{s.actor, s.step}].push_back(&s);
    for (auto& [key, v] : by_step) {
      std::sort(v.begin(), v.end(), [](const span* a, const span* b) { return a->begin_ns < b->begin_ns; });
      stage_order o{key.first, rank[key.first], key.second, {}};
      for (const auto* s : v)
        o.actions +=
          fmt::format("{}{}{}{}", o.actions.empty() ? "" : " ", o.rank, action_letter(s->kind), s->microbatch);
      out.orders.push_back(std::move(o));
    }
    std::stable_sort(out.orders.begin(), out.orders.end(),
                     [](const stage_order& a, const stage_order& b) { return a.step < b.step; });
  }

  for (const auto& c : t.counters) {
    if (c.t_ns > out.end_ns && to_ns >= 0)
      continue;
    if (c.name == "loss")
      out.loss = c.value, out.last_step = std::max(out.last_step, c.step);
    else if (c.name == "val_loss")
      out.val_loss = c.value, out.val_step = c.step;
    else if (c.name == "tokens_per_s")
      out.tokens_per_s = c.value;
    else if (c.name.starts_with("loss:r")) // loss:rN, replica N's own microbatches (stage_engine)
      out.replica_loss[std::atoi(c.name.c_str() + 6)] = c.value;
    else if (c.name.starts_with("outer:")) { // outer:ACTOR:steps|bytes, a local-update sync actor's progress
      auto rest = std::string_view{c.name}.substr(6);
      auto colon = rest.rfind(':');
      if (colon != std::string_view::npos) {
        auto& o = out.outer[std::string{rest.substr(0, colon)}];
        (rest.substr(colon + 1) == "steps" ? o.steps : o.bytes) = c.value;
      }
    } else if (c.name.starts_with("held:")) // held:ACTOR:KIND, what an actor holds (record_held)
      for (auto& a : out.actors)
        if (auto rest = std::string_view{c.name}.substr(5);
            rest.starts_with(a.actor.name) && rest.size() > a.actor.name.size() && rest[a.actor.name.size()] == ':') {
          auto kind = rest.substr(a.actor.name.size() + 1);
          auto v = static_cast<std::int64_t>(c.value);
          (kind == "params" ? a.params_bytes : kind == "grads" ? a.grads_bytes : a.optimizer_bytes) = v;
        }
  }
  return out;
}

std::vector<distinct_order> distinct_orders(const std::vector<stage_order>& orders) {
  std::vector<distinct_order> out;
  std::map<std::pair<std::uint16_t, std::string_view>, std::size_t> seen; // (actor, actions) -> index in out
  for (const auto& o : orders) {
    auto [it, fresh] = seen.emplace(std::pair{o.actor, std::string_view{o.actions}}, out.size());
    if (fresh)
      out.push_back({o.actor, o.rank, {}, o.actions});
    out[it->second].steps.push_back(o.step);
  }
  for (auto& d : out)
    std::sort(d.steps.begin(), d.steps.end());
  std::stable_sort(out.begin(), out.end(), [](const distinct_order& a, const distinct_order& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.steps.front() < b.steps.front();
  });
  return out;
}

std::string step_ranges(const std::vector<std::int32_t>& steps) {
  std::string out;
  for (std::size_t i = 0; i < steps.size();) {
    auto j = i;
    while (j + 1 < steps.size() && steps[j + 1] <= steps[j] + 1)
      ++j;
    out += out.empty() ? "" : ", ";
    out += steps[j] > steps[i] ? fmt::format("{}-{}", steps[i] + 1, steps[j] + 1) : fmt::format("{}", steps[i] + 1);
    i = j + 1;
  }
  return (steps.size() == 1 ? "step " : "steps ") + out;
}

std::string to_text(const trace_summary& s) {
  auto opt = [](const std::optional<double>& v, const char* spec) {
    return v ? fmt::format(fmt::runtime(spec), *v) : std::string{"-"};
  };
  std::string out = fmt::format("trace: {} spans, {} actors, window {} s", s.span_count, s.actors.size(),
                                seconds(s.end_ns - s.begin_ns));
  out += s.dropped ? fmt::format(" ({} spans dropped: a ring filled before they were written)", s.dropped) : "";
  out += s.cut_short ? "\nthe file ends mid-event (the run was killed): read up to its last whole event\n" : "\n";
  out += fmt::format("\n{:<16} {:<16} {:>9} {:>9} {:>7} {:>9} {:>7} {:>8}\n", "actor", "type", "busy s", "idle s",
                     "busy %", "bubble %", "spans", "mailbox");
  for (const auto& a : s.actors) {
    bool stage = a.actor.role == stage_role;
    out += fmt::format("{:<16} {:<16} {:>9} {:>9} {:>7.1f} {:>9} {:>7} {:>8}\n", a.actor.name, a.actor.type,
                       seconds(a.busy_ns), seconds(a.idle_ns), 100 * a.busy_fraction,
                       stage ? fmt::format("{:.1f}", 100 * (1 - a.busy_fraction)) : std::string{"-"}, a.spans,
                       a.mailbox_max);
  }
  out += "busy: compute (forward, backward, optimizer, eval) and timed sends, first compute span to last\n"
         "bubble %: a pipeline stage's idle share of that window (other actors wait by design: no bubble)\n"
         "mailbox: the most data messages waiting for the actor at once, counted as it took one (it included)\n";
  out +=
    fmt::format("\npipeline bubble fraction: {}\n", s.bubble_fraction ? fmt::format("{:.1f}%", 100 * *s.bubble_fraction)
                                                                      : std::string{"- (no actor has the stage role)"});
  out += fmt::format("last step {}: loss {}, val loss {}{}, tokens/s {}\n", s.last_step + 1, opt(s.loss, "{:.4f}"),
                     opt(s.val_loss, "{:.4f}"), s.val_loss ? fmt::format(" (after step {})", s.val_step + 1) : "",
                     opt(s.tokens_per_s, "{:.0f}"));
  auto name = [&](std::uint16_t id) {
    return id < s.actors.size() ? s.actors[id].actor.name : fmt::format("actor{}", id);
  };
  out += to_text(s.stragglers);
  if (!s.channels.empty()) {
    out += "\nchannels (messages, MB, in flight):\n";
    for (const auto& c : s.channels)
      out += fmt::format("  {} -> {}: {}, {:.1f}, {}\n", name(c.from), name(c.to), c.messages,
                         static_cast<double>(c.bytes) / 1e6, c.in_flight);
  }
  if (!s.orders.empty()) {
    out += "\naction order per stage, each distinct order once with the steps that ran it\n"
           "(compare with `troupe schedule`):\n";
    for (const auto& d : distinct_orders(s.orders))
      out += fmt::format("  {:<12} {}: {}\n", name(d.actor), step_ranges(d.steps), d.actions);
  }
  return out;
}

std::optional<counter_sample> throughput_meter::on_sample(const counter_sample& c) {
  if (c.name != "loss")
    return std::nullopt;
  std::optional<counter_sample> out;
  if (last_ns >= 0 && c.t_ns > last_ns && c.step > last_step && tokens_per_step > 0) {
    double dt = static_cast<double>(c.t_ns - last_ns) * 1e-9;
    double tokens = static_cast<double>(tokens_per_step) * (c.step - last_step);
    out = counter_sample{c.t_ns, "tokens_per_s", tokens / dt, c.step};
  }
  last_ns = c.t_ns, last_step = c.step;
  return out;
}

} // namespace troupe
