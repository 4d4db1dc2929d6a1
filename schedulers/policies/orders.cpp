// Closed forms of the GPipe, 1F1B, interleaved 1F1B and ZB-H1 per-rank orders.
#include "schedulers/policies/orders.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::sched {

std::vector<action> gpipe_order(int rank, int ranks, int m) {
  std::vector<action> out;
  for (int k = 0; k < m; ++k)
    out.push_back(fwd(rank, k));
  for (int k = 0; k < m; ++k)
    out.push_back(bwd(rank, k));
  return out;
}

std::vector<action> one_f_one_b_order(int rank, int ranks, int m) {
  int warm = std::min(ranks - rank, m);
  std::vector<action> out;
  for (int k = 0; k < warm; ++k)
    out.push_back(fwd(rank, k));
  for (int k = 0; k < m; ++k) {
    out.push_back(bwd(rank, k));
    if (k + warm < m)
      out.push_back(fwd(rank, k + warm));
  }
  return out;
}

namespace {

int interleaved_warmup(int rank, int p, int m, int v) {
  int total = m * v;
  if (m == p) // Megatron: with one group of microbatches, every forward is warm-up
    return total;
  return std::min((p - rank - 1) * 2 + (v - 1) * p, total);
}

// The k-th forward (or backward) of a rank in Megatron's interleaved order.
action interleaved_nth(int rank, int p, int v, int k, bool forward) {
  int in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward)
    chunk = v - 1 - chunk;
  int mb = (k / (p * v)) * p + in_group % p;
  int stage = rank + chunk * p;
  return forward ? fwd(stage, mb) : bwd(stage, mb);
}

} // namespace

int interleaved_in_flight_limit(int rank, int ranks, int m, int v) {
  return std::min(interleaved_warmup(rank, ranks, m, v) + 1, m * v);
}

expected<std::vector<action>> interleaved_order(int rank, int p, int m, int v) {
  if (v < 1)
    return make_sched_error(fmt::format("interleaved_1f1b: virtual chunks must be at least 1, got {}", v));
  if (m % p != 0)
    return make_sched_error(fmt::format("interleaved_1f1b: microbatches ({}) must be a multiple of stages ({}), "
                                        "as in Megatron-LM's interleaved schedule",
                                        m, p));
  int total = m * v;
  int warm = interleaved_warmup(rank, p, m, v);
  std::vector<action> out;
  for (int k = 0; k < warm; ++k)
    out.push_back(interleaved_nth(rank, p, v, k, true));
  for (int i = 0; i < total - warm; ++i) {
    out.push_back(interleaved_nth(rank, p, v, i + warm, true));
    out.push_back(interleaved_nth(rank, p, v, i, false));
  }
  for (int i = std::max(total - warm, 0); i < total; ++i)
    out.push_back(interleaved_nth(rank, p, v, i, false));
  return out;
}

std::vector<action> zb_h1_order(int rank, int ranks, int m) {
  int warm = std::min(ranks - rank, m);
  int defer = rank; // W_k runs after I_{k+rank}: later ranks defer more, so I passes go up sooner
  std::vector<action> out;
  for (int k = 0; k < warm; ++k)
    out.push_back(fwd(rank, k));
  for (int k = 0; k < m; ++k) {
    out.push_back(igrad(rank, k));
    if (k + warm < m)
      out.push_back(fwd(rank, k + warm));
    if (k - defer >= 0)
      out.push_back(wgrad(rank, k - defer));
  }
  for (int k = std::max(m - defer, 0); k < m; ++k)
    out.push_back(wgrad(rank, k));
  return out;
}

} // namespace troupe::sched
