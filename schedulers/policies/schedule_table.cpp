// Parsing, printing and up-front validation of explicit per-rank schedules.
#include "schedulers/policies/schedule_table.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>

#include <fmt/format.h>

namespace troupe::sched {

expected<schedule_table> parse_table(std::string_view text, std::string_view origin) {
  // A control byte means a binary file (an image, an archive): say so rather than quote it as an action.
  for (std::size_t i = 0; i < text.size(); ++i)
    if (auto c = static_cast<unsigned char>(text[i]); (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      return make_sched_error(fmt::format("{}: not a text file (byte 0x{:02x} at offset {}); a schedule table is "
                                          "text, one line of actions per rank such as 0F0 0F1 0B0 0B1",
                                          origin, c, i));
  schedule_table out;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    auto end = text.find('\n', pos);
    if (end == std::string_view::npos)
      end = text.size();
    auto line = text.substr(pos, end - pos);
    ++line_no;
    pos = end + 1;
    auto first = line.find_first_not_of(" \t\r,");
    if (first == std::string_view::npos || line[first] == '#')
      continue;
    auto row = parse_actions(line);
    if (!row)
      return make_sched_error(fmt::format("{}:{}: rank {}: {}", origin, line_no, out.size(), row.error().message));
    out.push_back(std::move(*row));
  }
  return out;
}

expected<schedule_table> load_table(const std::string& path, std::string_view origin) {
  if (origin.empty())
    origin = path;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_sched_error(fmt::format("{}: cannot open the schedule table: {}", origin, std::strerror(errno)));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_table_bytes)
      return make_sched_error(fmt::format("{}: larger than {} MiB; a schedule table is one short line per rank", origin,
                                          max_table_bytes >> 20));
  }
  if (in.bad())
    return make_sched_error(fmt::format("{}: cannot read the schedule table: {}", origin, std::strerror(errno)));
  return parse_table(text, origin);
}

std::string to_string(const schedule_table& table) {
  std::string out;
  for (const auto& row : table)
    out += to_string(std::span<const action>(row)) + "\n";
  return out;
}

bool table_splits_backward(const schedule_table& table) {
  for (const auto& row : table)
    for (const auto& a : row)
      if (a.kind == op_kind::input_grad || a.kind == op_kind::weight_grad)
        return true;
  return false;
}

int table_in_flight_peak(const std::vector<action>& row) {
  int now = 0, peak = 0;
  for (const auto& a : row) {
    if (a.kind == op_kind::forward)
      peak = std::max(peak, ++now);
    else if (is_backward_input(a.kind))
      --now;
  }
  return peak;
}

namespace {

std::string where(int rank, std::size_t index, const action& a) {
  return fmt::format("rank {}, action {} ({})", rank, index + 1, to_string(a));
}

// What `a` waits for on other stages or earlier passes, in dependency order.
std::vector<action> dependencies(const action& a, int stages, bool split) {
  std::vector<action> deps;
  op_kind back = split ? op_kind::input_grad : op_kind::backward;
  switch (a.kind) {
  case op_kind::forward:
    if (a.stage > 0)
      deps.push_back(fwd(a.stage - 1, a.microbatch));
    break;
  case op_kind::backward:
  case op_kind::input_grad:
    deps.push_back(fwd(a.stage, a.microbatch));
    if (a.stage + 1 < stages)
      deps.push_back({back, a.stage + 1, a.microbatch});
    break;
  case op_kind::weight_grad:
    deps.push_back(igrad(a.stage, a.microbatch));
    break;
  case op_kind::overlap: // refused by check_rows
    break;
  }
  return deps;
}

expected<void> check_rows(const schedule_table& t, int p, int m, int v, bool split) {
  for (int r = 0; r < p; ++r) {
    std::map<action, std::size_t> seen;
    for (std::size_t i = 0; i < t[r].size(); ++i) {
      const action& a = t[r][i];
      if (a.stage % p != r || a.stage >= p * v)
        return make_sched_error(fmt::format("{}: stage {} does not run on rank {} (with {} ranks and {} chunks "
                                            "rank {} runs stages {} + c*{}, c < {})",
                                            where(r, i, a), a.stage, r, p, v, r, r, p, v));
      if (a.microbatch >= m)
        return make_sched_error(fmt::format("{}: microbatch {} is out of range (there are {}: 0..{})", where(r, i, a),
                                            a.microbatch, m, m - 1));
      if (a.kind == op_kind::overlap)
        return make_sched_error(fmt::format("{}: an F&B (dualpipev's fused forward and backward) is not replayed by "
                                            "`table`",
                                            where(r, i, a)));
      if (split && a.kind == op_kind::backward)
        return make_sched_error(
          fmt::format("{}: a whole backward B in a table that splits backwards into I and W", where(r, i, a)));
      if (auto it = seen.find(a); it != seen.end())
        return make_sched_error(fmt::format("{}: duplicate of action {}", where(r, i, a), it->second + 1));
      seen.emplace(a, i);
      if (a.kind != op_kind::forward) {
        action before = a.kind == op_kind::weight_grad ? igrad(a.stage, a.microbatch) : fwd(a.stage, a.microbatch);
        if (!seen.contains(before)) {
          bool later = std::find(t[r].begin() + i, t[r].end(), before) != t[r].end();
          return make_sched_error(fmt::format("{}: {} before its {} {}", where(r, i, a),
                                              a.kind == op_kind::weight_grad ? "weight gradient" : "backward",
                                              a.kind == op_kind::weight_grad ? "input gradient" : "forward",
                                              later ? to_string(before) : to_string(before) + " (missing)"));
        }
      }
    }
    std::vector<op_kind> kinds = split ? std::vector{op_kind::forward, op_kind::input_grad, op_kind::weight_grad}
                                       : std::vector{op_kind::forward, op_kind::backward};
    for (int c = 0; c < v; ++c)
      for (int mb = 0; mb < m; ++mb)
        for (auto k : kinds)
          if (action want{k, r + c * p, mb}; !seen.contains(want))
            return make_sched_error(
              fmt::format("rank {}: microbatch {} of stage {} is missing {}", r, mb, want.stage, to_string(want)));
  }
  return {};
}

} // namespace

expected<void> validate_table(const schedule_table& t, int p, int m, int v) {
  if (static_cast<int>(t.size()) != p)
    return make_sched_error(fmt::format("the table has {} rank lines but the pipeline has {} ranks", t.size(), p));
  bool split = table_splits_backward(t);
  if (auto ok = check_rows(t, p, m, v, split); !ok)
    return ok;
  // Run every rank's list in order with zero costs; whatever cannot finish is a deadlock.
  std::map<action, bool> done;
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  int stages = p * v;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r)
      while (next[r] < t[r].size()) {
        const action& a = t[r][next[r]];
        auto deps = dependencies(a, stages, split);
        if (!std::all_of(deps.begin(), deps.end(), [&](const action& d) { return done.contains(d); }))
          break;
        done[a] = true;
        ++next[r];
        progress = true;
      }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r) {
    if (next[r] == t[r].size())
      continue;
    const action& a = t[r][next[r]];
    std::string waits;
    for (const auto& d : dependencies(a, stages, split))
      if (!done.contains(d))
        waits += (waits.empty() ? "" : " and ") + to_string(d) + " on rank " + std::to_string(d.stage % p);
    stuck += fmt::format("{}{} waits for {}", stuck.empty() ? "" : "; ", where(r, next[r], a), waits);
  }
  if (!stuck.empty())
    return make_sched_error("deadlock: " + stuck);
  return {};
}

} // namespace troupe::sched
