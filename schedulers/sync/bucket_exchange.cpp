// DDP's gradient buckets summed by direct exchanges (#26).
#include "schedulers/sync/bucket_exchange.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/exchange_policies.hpp"

namespace troupe::sched {

bucket_exchanges::bucket_exchanges(int replicas, int self, wire_format format)
    : replicas_(replicas), self_(self), format_(format) {
  if (replicas < 1 || self < 0 || self >= replicas)
    throw std::invalid_argument(fmt::format("bucket_exchanges: replica {} of {}", self, replicas));
}

bool bucket_exchanges::out(int r, std::int64_t step) const {
  if (std::find(lost_.begin(), lost_.end(), r) == lost_.end())
    return false;
  auto b = back_.find(r);
  return b == back_.end() || step < b->second;
}

void bucket_exchanges::collect(const key& k, std::vector<sync_send> sends, std::vector<bucket_send>& out) const {
  for (auto& s : sends)
    out.push_back({k.first, k.second, std::move(s)});
}

std::vector<bucket_send> bucket_exchanges::start(std::int64_t step, int bucket, std::span<const float> values) {
  // Exchanges two steps back are done on every member still here: they go.
  ex_.erase(ex_.begin(), ex_.lower_bound({step - 1, 0}));
  key k{step, bucket};
  auto& e = ex_[k];
  if (e.ex)
    throw std::invalid_argument(fmt::format("bucket {} of step {} started twice", bucket, step));
  e.ex.emplace(all_replicas(replicas_), self_, format_, sync_row_values, true);
  for (int r = 0; r < replicas_; ++r)
    if (r != self_ && out(r, step))
      e.ex->lose(r); // before it starts: nothing to send again
  std::vector<bucket_send> out;
  collect(k, e.ex->start(values), out);
  for (auto& m : std::exchange(e.early, {}))
    if (!this->out(m.from, step))
      collect(k, e.ex->receive(m.from, m.round, m.piece, std::move(m.part)), out);
  return out;
}

std::vector<bucket_send> bucket_exchanges::receive(std::int64_t step, int bucket, int from, int round, int piece,
                                                   quantized_rows part) {
  key k{step, bucket};
  if (!ex_.count(k) && !ex_.empty() && k < ex_.begin()->first)
    return {}; // an exchange this member no longer holds: every member still here is past it
  auto& e = ex_[k];
  std::vector<bucket_send> out;
  if (!e.ex)
    e.early.push_back({from, round, piece, std::move(part)});
  else
    collect(k, e.ex->receive(from, round, piece, std::move(part)), out);
  return out;
}

std::vector<bucket_send> bucket_exchanges::lose(int r) {
  if (r < 0 || r >= replicas_ || r == self_)
    throw std::invalid_argument(
      fmt::format("bucket_exchanges: replica {} of {} lost, told replica {}", r, replicas_, self_));
  bool again = back_.erase(r) > 0; // lost again after it came back: it is still in lost_
  if (!again && std::find(lost_.begin(), lost_.end(), r) != lost_.end())
    return {};
  if (!again)
    lost_.push_back(r);
  std::vector<bucket_send> out;
  for (auto& [k, e] : ex_) { // under way, and the last ones done
    std::erase_if(e.early, [&](const early_part& m) { return m.from == r; });
    if (e.ex)
      collect(k, e.ex->lose(r), out);
  }
  return out;
}

void bucket_exchanges::rejoin(int r, std::int64_t from) {
  if (std::find(lost_.begin(), lost_.end(), r) == lost_.end() || back_.count(r))
    throw std::invalid_argument(fmt::format("bucket_exchanges: replica {} rejoins, but it was not lost", r));
  for (const auto& [k, e] : ex_)
    if (k.first >= from && e.ex)
      throw std::invalid_argument(
        fmt::format("bucket_exchanges: replica {} rejoins from step {}, which has started here", r, from));
  back_[r] = from;
}

std::vector<bucket_sum> bucket_exchanges::take_done() {
  std::vector<bucket_sum> out;
  for (auto& [k, e] : ex_)
    if (e.ex && !e.taken && e.ex->done()) {
      e.taken = true;
      out.push_back({k.first, k.second, e.ex->take()});
    }
  return out;
}

} // namespace troupe::sched
