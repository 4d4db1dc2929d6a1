// One unit of pipeline work (a forward, backward, input-gradient or
// weight-gradient pass of one microbatch on one stage, or a forward fused with
// another microbatch's backward) and its text form.
#pragma once

#include <compare>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "schedulers/expected.hpp"

namespace troupe::sched {

/// What an action computes. B is a whole backward; I and W are its two halves
/// when a schedule splits it (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"):
/// I the gradient with respect to the stage input, W the weight gradient.
/// F&B (DeepSeek's DualPipe, torch's OVERLAP_F_B) is one action made of a
/// forward of one microbatch and a whole backward of another, on two chunks of
/// one rank, run together so that each hides the other's communication.
enum class op_kind : char { forward = 'F', backward = 'B', input_grad = 'I', weight_grad = 'W', overlap = '&' };

/// One action: `kind` of `microbatch` on virtual stage `stage`.
///
/// An F&B action (op_kind::overlap) is the forward of `microbatch` on `stage`
/// with the backward of `back_microbatch` on `back_stage`; the back fields are
/// -1 on every other kind.
///
/// `stage` is the model-chunk (virtual stage) index as printed, not the rank:
/// with p ranks and v chunks per rank, chunk c of rank r is virtual stage
/// r + c*p (round-robin placement, Narayanan et al. 2021) or its V-shaped
/// mirror (chunk_placement). Without interleaving the stage equals the rank.
struct action {
  op_kind kind = op_kind::forward;
  int stage = 0;
  int microbatch = 0;
  int back_stage = -1;
  int back_microbatch = -1;

  friend bool operator==(const action&, const action&) = default;
  friend auto operator<=>(const action& a, const action& b) {
    if (auto c = a.stage <=> b.stage; c != 0)
      return c;
    if (auto c = a.microbatch <=> b.microbatch; c != 0)
      return c;
    if (auto c = static_cast<char>(a.kind) <=> static_cast<char>(b.kind); c != 0)
      return c;
    if (auto c = a.back_stage <=> b.back_stage; c != 0)
      return c;
    return a.back_microbatch <=> b.back_microbatch;
  }
};

/// Where a rank's model chunks sit along the pipeline. Round-robin (Narayanan
/// et al. 2021): chunk c of rank r is virtual stage r + c*p. V-shaped (Qi et
/// al. 2023, ZB-V): odd chunks run the ranks backwards, chunk c of rank r is
/// c*p + r for even c and c*p + p - 1 - r for odd c, so with two chunks rank r
/// holds stages r and 2p - 1 - r and the last chunk returns to rank 0.
enum class chunk_placement { round_robin, v_shape };

/// The virtual stage of chunk `chunk` of rank `rank` out of `ranks`.
inline int virtual_stage(int rank, int ranks, int chunk, chunk_placement placement) {
  bool back = placement == chunk_placement::v_shape && chunk % 2 == 1;
  return chunk * ranks + (back ? ranks - 1 - rank : rank);
}

/// The rank that holds virtual stage `stage` (its chunk is stage / ranks).
inline int rank_of_stage(int stage, int ranks, chunk_placement placement) {
  return virtual_stage(stage % ranks, ranks, stage / ranks, placement) - stage / ranks * ranks;
}

/// Shorthands: `fwd(2, 0)` is `2F0`.
inline action fwd(int stage, int mb) {
  return {op_kind::forward, stage, mb};
}
inline action bwd(int stage, int mb) {
  return {op_kind::backward, stage, mb};
}
inline action igrad(int stage, int mb) {
  return {op_kind::input_grad, stage, mb};
}
inline action wgrad(int stage, int mb) {
  return {op_kind::weight_grad, stage, mb};
}
/// The F&B action of forward `f` and backward `b`: `overlap(fwd(1, 4), bwd(6, 0))` is `1F4&6B0`.
inline action overlap(const action& f, const action& b) {
  return {op_kind::overlap, f.stage, f.microbatch, b.stage, b.microbatch};
}

/// The passes `a` is made of: `a` itself, or an F&B's forward and backward.
/// At most two; `count` says how many.
struct action_parts {
  action part[2];
  int count = 1;
  const action* begin() const { return part; }
  const action* end() const { return part + count; }
};
inline action_parts parts(const action& a) {
  if (a.kind != op_kind::overlap)
    return {{a, a}, 1};
  return {{fwd(a.stage, a.microbatch), bwd(a.back_stage, a.back_microbatch)}, 2};
}

/// True for B and I: the passes that send a gradient upstream.
inline bool is_backward_input(op_kind k) {
  return k == op_kind::backward || k == op_kind::input_grad;
}

/// Prints `<stage><F|I|W|B><microbatch>`, e.g. `2F0`, `1W3`; an F&B as its
/// forward and backward joined by `&`, e.g. `1F4&6B0`.
std::string to_string(const action& a);

/// Prints an order as space-separated actions: `0F0 0F1 0B0`.
std::string to_string(std::span<const action> order);

/// Parses one action such as `2F0` or `1F4&6B0`; fails saying what is malformed.
expected<action> parse_action(std::string_view text);

/// Parses a list of actions separated by spaces, tabs or commas; a failure
/// names the position (1-based) and the offending token.
expected<std::vector<action>> parse_actions(std::string_view text);

} // namespace troupe::sched
