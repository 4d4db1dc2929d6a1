// Step times per actor and the EWMA verdict on stragglers: see step_stats.hpp.
#include "runtime/trace/step_stats.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "runtime/trace/median.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe {

straggler_report analyze_step_times(const std::vector<step_times>& in, const step_stats_options& o) {
  straggler_report out;
  out.options = o;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto& a = in[i];
    actor_step_stats st;
    st.actor = a.actor;
    st.steps = a.busy.size();
    std::vector<double> ms;
    for (auto [step, ns] : a.busy) {
      ms.push_back(static_cast<double>(ns) * 1e-6);
      // The peers' median at this step: a slow actor is slow against the
      // others doing the same kind of work at the same time, whatever the step costs.
      std::vector<double> peers, same_position;
      for (std::size_t j = 0; j < in.size(); ++j)
        if (j != i && in[j].role == a.role)
          if (auto p = in[j].busy.find(step); p != in[j].busy.end()) {
            peers.push_back(static_cast<double>(p->second));
            if (a.position >= 0 && in[j].position == a.position)
              same_position.push_back(static_cast<double>(p->second));
          }
      if (!same_position.empty())
        peers = std::move(same_position);
      double med = median(std::move(peers));
      double ratio = med > 0 ? static_cast<double>(ns) / med : 1.0;
      // A spike against the actor's own level is a stall, and it enters the
      // EWMA clipped at that bound: one stall lifts the EWMA by at most
      // alpha × (stall_above - 1) × level (0.3 at level 1), so it stays a
      // one-off however long it lasted, while a lasting slowdown climbs in
      // a few steps (3x: 1.69 after two steps, 2.9 after ten).
      double bound = o.stall_above * st.ewma;
      if (ratio > bound)
        st.stalls.push_back(step);
      st.ewma = o.alpha * std::min(ratio, bound) + (1 - o.alpha) * st.ewma;
      st.peak_ratio = std::max(st.peak_ratio, ratio);
      st.above += st.ewma > o.chronic_above;
    }
    if (!ms.empty()) {
      st.min_ms = *std::min_element(ms.begin(), ms.end());
      st.max_ms = *std::max_element(ms.begin(), ms.end());
      st.median_ms = median(ms);
    }
    // Chronic: the EWMA stayed up for at least half the actor's steps.
    st.chronic = st.steps > 0 && 2 * st.above >= st.steps;
    out.actors.push_back(std::move(st));
  }
  for (std::size_t i = 0; i < out.actors.size(); ++i)
    if (out.actors[i].steps > 0)
      out.top.push_back(i);
  std::stable_sort(out.top.begin(), out.top.end(), [&](std::size_t x, std::size_t y) {
    const auto &a = out.actors[x], &b = out.actors[y];
    return a.chronic != b.chronic ? a.chronic : a.ewma > b.ewma;
  });
  if (out.top.size() > o.top_k)
    out.top.resize(o.top_k);
  return out;
}

std::vector<step_times> step_times_of(const trace_snapshot& t, std::int64_t from_ns, std::int64_t to_ns) {
  std::map<std::uint16_t, step_times> by_actor;
  std::map<std::uint16_t, std::set<std::int32_t>> cut; // steps with an action outside the window
  for (const auto& s : t.spans) {
    if (s.step < 0 || !action_letter(s.kind) || s.actor >= t.actors.size() || t.actors[s.actor].role.empty())
      continue;
    if ((from_ns >= 0 && s.begin_ns < from_ns) || (to_ns >= 0 && s.end_ns > to_ns)) {
      cut[s.actor].insert(s.step);
      continue;
    }
    auto& a = by_actor[s.actor];
    a.busy[s.step] += s.end_ns - s.begin_ns;
  }
  std::vector<step_times> out;
  for (auto& [id, a] : by_actor) {
    a.actor = t.actors[id].name, a.role = t.actors[id].role, a.position = t.actors[id].position;
    for (auto step : cut[id])
      a.busy.erase(step);
    out.push_back(std::move(a));
  }
  return out;
}

nlohmann::json to_json(const straggler_report& r) {
  auto top = nlohmann::json::array();
  for (auto i : r.top)
    top.push_back(r.actors[i].actor);
  auto actors = nlohmann::json::object();
  for (const auto& a : r.actors)
    actors[a.actor] = {{"steps", a.steps},     {"min_ms", a.min_ms}, {"median_ms", a.median_ms},
                       {"max_ms", a.max_ms},   {"ewma", a.ewma},     {"peak_ratio", a.peak_ratio},
                       {"chronic", a.chronic}, {"stalls", a.stalls}};
  return {{"top", top},
          {"actors", actors},
          {"chronic_above", r.options.chronic_above},
          {"stall_above", r.options.stall_above}};
}

std::string to_text(const straggler_report& r) {
  if (r.top.empty())
    return {};
  std::string out = fmt::format("\nslowest actors by step time (busy ms per step; ewma: of the ratio to its peers' "
                                "median, chronic above {:.2f} for half its steps or more):\n",
                                r.options.chronic_above);
  out += fmt::format("  {:<16} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6}  {}\n", "actor", "steps", "min", "median", "max",
                     "ewma", "peak", "verdict");
  for (auto i : r.top) {
    const auto& a = r.actors[i];
    std::string verdict = a.chronic           ? "chronic"
                          : !a.stalls.empty() ? fmt::format("one-off stall at {}", step_ranges(a.stalls))
                                              : "-";
    out += fmt::format("  {:<16} {:>6} {:>9.2f} {:>9.2f} {:>9.2f} {:>6.2f} {:>6.2f}  {}\n", a.actor, a.steps, a.min_ms,
                       a.median_ms, a.max_ms, a.ewma, a.peak_ratio, verdict);
  }
  return out;
}

} // namespace troupe
