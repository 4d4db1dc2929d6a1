// The outer_sync's bookkeeping around its sync policy (sync_peer.hpp).
#include "schedulers/sync/sync_peer.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

sync_peer::sync_peer(std::string name, int replica, int replicas)
    : name_(std::move(name)), replica_(replica), replicas_(replicas) {}

void sync_peer::resume_at(long performed, std::map<int, std::int64_t> prepared) {
  performed_ = performed;
  prepared_ = exchange_ = std::move(prepared);
}

std::vector<sync_part> sync_peer::start(const sync_method& method, sync_setup setup,
                                        const std::optional<sync_state>& saved) {
  setup.replica = replica_, setup.replicas = replicas_;
  policy_ = method.make(setup);
  for (int r : lost_)
    policy_->lose(r); // heard of before the start: nothing was under way
  if (!saved)
    return {};
  // A resumed run: the exchanges that were under way start again (every replica resumes from the same step).
  std::vector<sync_part> out;
  for (auto& s : policy_->restore(*saved)) {
    int f = s.fragment;
    if (!prepared_.contains(f))
      throw std::runtime_error(
        fmt::format("its method restarts an exchange of fragment {}, which was not under way", f));
    for (auto& p : outgoing(prepared_.at(f), f, {std::move(s)}))
      out.push_back(std::move(p));
  }
  for (const auto& [f, step] : std::map{prepared_}) // parts of other replicas that came before the start values
    replay_early(step, f, out);
  return out;
}

void sync_peer::replay_early(std::int64_t step, int f, std::vector<sync_part>& out) {
  auto early = early_.extract({step, f});
  if (!early.empty())
    for (auto& p : early.mapped())
      for (auto& s : receive(std::move(p)))
        out.push_back(std::move(s));
}

std::vector<sync_part> sync_peer::outgoing(std::int64_t step, int f, std::vector<sync_send> sends) {
  std::vector<sync_part> out;
  for (auto& m : sends) {
    if (m.to < 0 || m.to >= replicas_ || m.to == replica_)
      throw std::runtime_error(fmt::format("{}: its policy sends to replica {} of {}", name_, m.to, replicas_));
    if (std::find(lost_.begin(), lost_.end(), m.to) != lost_.end())
      continue; // left the run
    if (auto b = back_.find(m.to); b != back_.end() && step <= b->second)
      continue; // came back after this exchange began
    bytes_sent_ += static_cast<std::int64_t>(m.payload.wire_bytes());
    out.push_back({step, f, replica_, m.to, m.round, m.piece, std::move(m.payload)});
  }
  return out;
}

std::vector<sync_part> sync_peer::prepare(std::int64_t step, int f, std::span<const float> local) {
  if (!policy_)
    throw std::runtime_error(fmt::format("{}: fragment values before the start values", name_));
  if (prepared_.contains(f))
    throw std::runtime_error(fmt::format("{}: fragment {} prepared at step {} while its exchange of step {} is under "
                                         "way",
                                         name_, f, step, prepared_.at(f)));
  prepared_[f] = step;
  exchange_[f] = step;
  auto out = outgoing(step, f, policy_->prepare(f, step, local));
  replay_early(step, f, out);
  return out;
}

void sync_peer::perform(std::int64_t step, int f, std::vector<float> local) {
  if (!policy_)
    throw std::runtime_error(fmt::format("{}: fragment values before the start values", name_));
  if (!prepared_.contains(f))
    throw std::runtime_error(
      fmt::format("{}: fragment {} performed at step {} before it was prepared", name_, f, step));
  perform_.insert_or_assign(f, std::make_pair(step, std::move(local)));
}

std::vector<sync_part> sync_peer::receive(sync_part m) {
  auto it = exchange_.find(m.fragment);
  if (!policy_ || it == exchange_.end() || it->second < m.step) {
    early_[{m.step, m.fragment}].push_back(std::move(m)); // this replica has not prepared it yet
    return {};
  }
  if (it->second > m.step)
    return {}; // an exchange this replica applied and replaced since: a lost member's, or a repeat after a loss
  if (m.from < 0 || m.from >= replicas_ || m.from == replica_)
    throw std::runtime_error(fmt::format("{}: a message from replica {} of {}", name_, m.from, replicas_));
  return outgoing(m.step, m.fragment, policy_->receive(m.fragment, m.from, m.round, m.piece, std::move(m.payload)));
}

int sync_peer::losses(int r) const {
  auto it = losses_.find(r);
  return it == losses_.end() ? 0 : it->second;
}

std::vector<sync_part> sync_peer::lose(int r) {
  if (r == replica_)
    return {};
  ++losses_[r]; // lost again before a rejoin reached this peer counts too
  if (std::find(lost_.begin(), lost_.end(), r) != lost_.end())
    return {};
  lost_.push_back(r);
  back_.erase(r);
  if (!policy_)
    return {}; // before the start values: nothing under way
  std::vector<sync_part> out;
  for (auto& s : policy_->lose(r)) {
    int f = s.fragment;
    for (auto& p : outgoing(exchange_.at(f), f, {std::move(s)}))
      out.push_back(std::move(p));
  }
  return out;
}

bool sync_peer::rejoin(int r, std::int64_t after, int losses) {
  if (losses < this->losses(r))
    return false; // lost again since the decision
  auto it = std::find(lost_.begin(), lost_.end(), r);
  if (it == lost_.end())
    throw std::runtime_error(fmt::format("{}: replica {} rejoins, but it was not lost", name_, r));
  for (const auto& [f, step] : prepared_)
    if (step > after)
      throw std::runtime_error(fmt::format("{}: replica {} rejoins after step {}, but fragment {}'s exchange of step "
                                           "{} is already under way without it",
                                           name_, r, after, f, step));
  lost_.erase(it);
  back_[r] = after;
  if (policy_)
    policy_->rejoin(r, after);
  return true;
}

std::vector<int> sync_peer::applicable() const {
  std::vector<int> out;
  for (const auto& [f, waiting] : perform_)
    if (policy_->ready(f))
      out.push_back(f);
  return out;
}

std::pair<std::int64_t, std::vector<float>> sync_peer::apply(int f) {
  auto it = perform_.find(f);
  if (it == perform_.end() || !policy_->ready(f))
    throw std::logic_error(fmt::format("{}: fragment {} applied before its exchange was complete", name_, f));
  auto out = std::move(it->second);
  perform_.erase(it);
  prepared_.erase(f);
  policy_->perform(f, out.second);
  ++performed_;
  return out;
}

} // namespace troupe::sched
