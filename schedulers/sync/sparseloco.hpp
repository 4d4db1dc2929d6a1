// SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706) as plain code (#13): the
// error-feedback accumulator, its top-k entries per chunk with 2-bit values as
// they travel, and the step every replica applies with the mean of what all sent.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "schedulers/sync/quantize.hpp"
#include "schedulers/sync/sync_state.hpp"

namespace troupe::sched {

/// Values per chunk: the paper takes top-k within chunks of 4096 entries
/// (64 × 64 blocks of each matrix); here a stage's flat values are cut in runs of 4096.
constexpr std::int64_t sparse_chunk = 4096;

/// The entries kept of a chunk of `len` at `density`: ceil(density · len), at least 1.
std::int64_t sparse_keep(double density, std::int64_t len);

/// The `density` share of largest-magnitude entries of each chunk of `x` (ties:
/// the lower index), each sent in 2 bits: its sign and whether its magnitude is
/// above the mean of the kept magnitudes; the chunk's two scales are the mean
/// magnitude of the kept entries below and above that mean (so each value
/// decodes to the mean of its half). Format sparse2, `cols` = the chunk size;
/// data: a little-endian u32 k (kept per full chunk), then per chunk its kept
/// indices as u16 and their codes four to a byte; scales: (low, high) per chunk.
quantized_rows sparse_topk_2bit(std::span<const float> x, double density, std::int64_t chunk = sparse_chunk);

/// Whether a sparse2 part is well formed, else why not (quantize.hpp's check_rows).
expected<void> check_sparse(const quantized_rows& q);
/// `acc += decode(q)` for a well-formed sparse2 part.
void accumulate_sparse(const quantized_rows& q, std::span<float> acc);

/// One replica's side of SparseLoCo: the shared parameters as last agreed
/// (`global`), and the error-feedback accumulator e (zero at first).
class sparseloco {
public:
  /// `beta`: e's decay (the paper's β, in place of DiLoCo's outer momentum);
  /// `lr`: the outer learning rate α.
  sparseloco(std::vector<float> start, double density, double beta, double lr);

  /// e ← β·e + (global − local); what is sent is Q(TopK(e)); e ← e − decode(sent).
  quantized_rows prepare(std::span<const float> local);
  /// global ← global − α·mean(decoded parts), in the parts' order; `local` ← global.
  void perform(const std::vector<quantized_rows>& parts, std::span<float> local);

  const std::vector<float>& global() const noexcept { return global_; }
  const std::vector<float>& error() const noexcept { return error_; }
  /// Adds `global` and the error feedback `error` to `s`; restore() takes them
  /// up (throws std::invalid_argument when they do not fit).
  void save(sync_state& s) const;
  void restore(const sync_state& s);

private:
  std::vector<float> global_, error_;
  double density_, beta_, lr_;
};

} // namespace troupe::sched
