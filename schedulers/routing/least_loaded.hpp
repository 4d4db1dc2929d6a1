// Routing around stragglers: a stage picks, for each activation, the replica of
// the next pipeline position that will finish it soonest (SWARM parallelism's
// stochastic wiring, Ryabinin et al. 2023, "SWARM Parallelism", §3.2).
#pragma once

#include <map>
#include <set>
#include <vector>

#include "schedulers/policies/stage_queue.hpp"

namespace troupe::sched {

/// What a receiver tells its senders with every credit: the work it holds and
/// what a microbatch costs it, both measured (seconds). Zero means not measured yet.
struct load_report {
  double backlog_s = 0; ///< waiting forwards (F + B each) and the backwards owed for activations held (B each)
  double cost_s = 0;    ///< one microbatch here: mean forward + mean backward
};

/// A stage's load as its queue shows it, by its own measured costs.
load_report measure_load(const stage_queue& q);

/// The sender's side: credits and the latest load report of every replica of
/// the next position, and the microbatches sent to each since that report.
/// pick() returns the replica with credit whose estimated finish
/// `backlog + (sent since its report + 1) × cost` is smallest (ties: the most
/// credit), except that the route's own hop (its replica's chain) keeps the
/// microbatch unless that one finishes it half a microbatch's cost sooner.
class least_loaded_chooser {
public:
  explicit least_loaded_chooser(std::vector<int> replicas = {}) : replicas_(std::move(replicas)) {}
  const std::vector<int>& replicas() const { return replicas_; }
  bool holds(int actor) const;
  /// `actor` granted `count` credits and reported its load.
  void grant(int actor, int count, const load_report& load);
  int credits(int actor) const;
  /// Credits over all replicas.
  int total_credits() const;
  /// The replica to send to next (`own`: the route's planned hop); -1 when none has credit.
  int pick(int own) const;
  /// Takes a credit of `actor` for a microbatch sent there.
  void take(int actor);
  /// `actor` left the run (elastic, #26): pick() passes it by and its credits
  /// are forgotten (returned, for the caller's pooled count); holds() stays true.
  int leave(int actor);
  /// `actor` is back (a rejoined replica's stage, #26): pick() considers it
  /// again once it grants credits.
  void rejoin(int actor) { gone_.erase(actor); }

private:
  struct receiver {
    int credits = 0;
    load_report load;
    int sent_since_report = 0;
  };
  std::vector<int> replicas_;
  std::map<int, receiver> receivers_;
  std::set<int> gone_; ///< replicas that left the run
};

} // namespace troupe::sched
