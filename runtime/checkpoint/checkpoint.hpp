// Checkpoints of a run: the folder layout, one actor's part of a checkpoint,
// the bookkeeping that marks a checkpoint complete, and finding one to resume.
// No CAF actors here: the one-process runner and the multi-process coordinator share it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/graph/graph_spec.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

// Layout of a checkpoint folder DIR (`checkpoint.dir`):
//
//   DIR/step-000016/stage0.safetensors   one file per checkpointing actor, written
//   DIR/step-000016/loader.safetensors   by that actor (tmp file, fsync, rename)
//   DIR/step-000016/checkpoint.json      written by the runner once every part is
//                                        there: {"step": 16, "parts": {actor: file},
//                                        "every": 8, "keep": 2} (the run's settings,
//                                        which a resumed run keeps)
//   DIR/latest                           "step-000016\n", replaced atomically after
//                                        checkpoint.json; names the newest complete one
//
// Steps count optimizer updates done: step-000016 holds the state after code
// steps 0..15, and a run resumed from it trains step 16 next. A folder without
// checkpoint.json is incomplete (the run stopped while writing it) and is never
// resumed from. Each part's `__metadata__` holds "actor", "step" and identity
// keys (checkpoint_identity) that say which graph it belongs to.

/// `step-000016`.
std::string checkpoint_folder_name(std::int64_t step);

/// `stage0.safetensors`: the part `actor` writes.
std::string checkpoint_part_name(const std::string& actor);

/// Whether a checkpoint is taken once `steps_done` of `total` steps are done:
/// after every `every` steps, and after the last step so the trained model is
/// never lost when `every` does not divide `total`. Never when `every` is 0.
constexpr bool checkpoint_due(std::int64_t steps_done, std::int64_t every, std::int64_t total) noexcept {
  return every > 0 && steps_done > 0 && (steps_done % every == 0 || steps_done == total);
}

/// The actors of `g` that write a part of every checkpoint (those whose role
/// declares a checkpoint identity), in graph order.
std::vector<std::string> checkpoint_actors(const graph_spec& g);

/// What a part must agree on with the graph it is restored into: its "type",
/// plus what its role's checkpoint_identity adds (the model shape and layer
/// ranges of a stage, say, or the seed, batch shape and corpus size of a loader).
std::map<std::string, std::string> checkpoint_identity(const graph_spec& g, const actor_spec& a);

/// Writes `actor`'s part of the checkpoint after `step` steps into
/// `dir/step-N/` (created when needed), adding "actor", "step" and the write's
/// start time to `metadata`; a checkpoint.json already there is removed first
/// (the step is being rewritten). Returns the file name relative to the step folder;
/// an unwritable folder or a full disk is errc::io_failed naming the file.
caf::expected<std::string> write_checkpoint_part(const std::filesystem::path& dir, std::int64_t step,
                                                 const std::string& actor, const std::vector<named_handle>& tensors,
                                                 std::map<std::string, std::string> metadata);

/// Reads `actor`'s part from the step folder `folder`, checking that it is that
/// actor's and holds `step` (errc::io_failed naming the file otherwise).
caf::expected<safetensors_file> read_checkpoint_part(const std::filesystem::path& folder, const std::string& actor,
                                                     std::int64_t step);

/// One actor's share of a run's checkpoints, for actors that write a part of
/// their own beside the stages (a ZeRO optimizer shard, a local-update sync
/// actor): where parts go, when, and the part a resumed run starts from.
struct part_checkpointing {
  std::filesystem::path dir; ///< checkpoint.dir; empty: nothing is saved
  std::int64_t every = 0, steps = 0;
  std::filesystem::path resume_folder; ///< the step folder resumed from; empty: a fresh start
  std::int64_t resume_step = 0;
  std::map<std::string, std::string> identity; ///< checkpoint_identity of the actor

  /// The settings of `g` for its actor `a`.
  static part_checkpointing of(const graph_spec& g, const actor_spec& a);
  /// Whether a part is due once `steps_done` steps are done (checkpoint_due).
  bool due(std::int64_t steps_done) const;
  /// Writes `actor`'s part after `steps_done` steps, the identity added to
  /// `metadata`; returns its file name. Throws std::runtime_error on a failed write.
  std::string write(const std::string& actor, std::int64_t steps_done, const std::vector<named_handle>& tensors,
                    std::map<std::string, std::string> metadata) const;
  /// `actor`'s part of the checkpoint being resumed; nullopt on a fresh start.
  caf::expected<std::optional<safetensors_file>> read(const std::string& actor) const;
  /// The path of that part, for messages.
  std::string resume_file(const std::string& actor) const;
};

/// A checkpoint that became complete.
struct checkpoint_commit {
  std::int64_t step = 0;
  std::filesystem::path folder;
  std::uint64_t bytes = 0; ///< the parts' sizes together
  double write_ms = 0;     ///< the slowest part: from its writer starting to its report arriving
};

/// The runner's bookkeeping: which actors reported which step, committing a
/// step once all of them have, and pruning old checkpoints.
class checkpoint_tracker {
public:
  /// `actors` are the ones that must report every step (checkpoint_actors);
  /// `every` (checkpoint.every) goes into each checkpoint.json with `keep`,
  /// and `steps` (train.steps, the learning-rate schedule's length).
  checkpoint_tracker(std::filesystem::path dir, std::vector<std::string> actors, int keep, std::int64_t every = 0,
                     std::int64_t steps = 0);

  /// Records that `actor` wrote `file` for `step`. True when that completes the
  /// step (every actor has reported it and it is newer than the last commit).
  /// A report from an actor not in the list is ignored (false).
  bool on_report(const std::string& actor, std::int64_t step, const std::string& file);

  /// Makes a complete `step` the latest: writes its checkpoint.json, then
  /// replaces DIR/latest (both atomically), then prunes. On failure (full disk)
  /// returns errc::io_failed and DIR/latest still names the previous checkpoint.
  caf::expected<checkpoint_commit> commit(std::int64_t step);

  /// Keeps the newest `keep` complete checkpoints up to `upto` and removes older
  /// ones, and incomplete folders below `upto`; folders past `upto` are left alone.
  caf::error prune(std::int64_t upto) const;

  /// Removes the folders past the last commit that hold no checkpoint.json (a
  /// step some part failed to write), best effort. Call it only once every
  /// writer has stopped: a part may be writing into such a folder until then.
  void discard_incomplete() const;

  /// The last committed step, or -1.
  std::int64_t last_committed() const noexcept { return last_; }

private:
  struct pending {
    std::map<std::string, std::string> files; ///< actor -> file
    std::chrono::system_clock::time_point last_arrival;
    double slowest_ms = 0;
  };
  std::filesystem::path dir_;
  std::set<std::string> actors_;
  int keep_;
  std::int64_t every_;
  std::int64_t steps_;
  std::int64_t last_ = -1;
  std::map<std::int64_t, pending> pending_;
};

/// A run's hold on its checkpoint folder: an exclusive flock on DIR/lock, held
/// until destroyed (or the process ends), so two runs never write one folder.
/// The file says who holds it ("pid 1234 on host a"); it is left in place.
class checkpoint_dir_lock {
public:
  checkpoint_dir_lock() = default;
  checkpoint_dir_lock(checkpoint_dir_lock&& other) noexcept;
  checkpoint_dir_lock& operator=(checkpoint_dir_lock&& other) noexcept;
  checkpoint_dir_lock(const checkpoint_dir_lock&) = delete;
  checkpoint_dir_lock& operator=(const checkpoint_dir_lock&) = delete;
  ~checkpoint_dir_lock();

  /// Locks `dir` (which must exist). errc::invalid_argument naming the holder
  /// when another run holds it; errc::io_failed when the lock file cannot be made.
  static caf::expected<checkpoint_dir_lock> acquire(const std::filesystem::path& dir);

  /// Whether a folder is held.
  bool held() const noexcept { return fd_ >= 0; }

private:
  int fd_ = -1;
};

/// Prepares `g`'s checkpoint folder before a run starts, when the run saves
/// checkpoints (`checkpoint.every` > 0): creates it, checks that files can be
/// created there (not at the first save), locks it, and refuses a fresh run
/// (no --resume) into a folder that already holds checkpoints, which would move
/// its `latest` and mix two runs' steps; with `restart` those checkpoints are
/// removed instead. The errors (errc::invalid_argument, errc::io_failed) name
/// the folder and what to do; an empty lock when nothing is saved.
caf::expected<checkpoint_dir_lock> open_checkpoint_dir(const graph_spec& g, bool restart);

/// Where a run resumes from.
struct resume_point {
  std::filesystem::path folder; ///< the complete step folder
  std::int64_t step = 0;        ///< optimizer steps it holds
  std::filesystem::path dir;    ///< the checkpoint.dir it is in (the step folder's parent)
  /// The settings of the run that wrote it (checkpoint.json); 0 when it did not record them.
  std::int64_t every = 0;
  int keep = 0;
  std::int64_t steps = 0; ///< its train.steps (the learning-rate schedule's length); 0 when not recorded
};

/// Finds the checkpoint `dir` names (DIR/latest, or a step folder itself) and
/// reads its checkpoint.json, without a graph to check it against. The error
/// (errc::invalid_argument) says what is missing: no such folder, a `latest`
/// that names a folder that is gone (listing the complete ones there), a step
/// folder without checkpoint.json.
caf::expected<resume_point> find_checkpoint(const std::filesystem::path& dir);

/// find_checkpoint, then checks the checkpoint against `g` before anything
/// starts: it has a part for exactly the checkpointing actors of `g`; every
/// part is there, complete (its header's tensor bytes all present) and that
/// actor's at that step; its identity matches; and its role's
/// check_checkpoint_part accepts it (a stage's tensors, shapes and dtypes).
/// The error (errc::invalid_argument) names the file and what differs.
caf::expected<resume_point> open_resume(const std::filesystem::path& dir, const graph_spec& g);

/// Whether `train.init` names a weights file (FILE.safetensors with Hugging
/// Face's names) rather than a checkpoint folder.
bool init_is_weights_file(const graph_spec& g);

/// A warm start (`train.init`): the part of the checkpoint `g.train.init_path`
/// names that holds what layer holder `a` holds (checkpoint_identity: the model's
/// shape and the layer range), `a`'s own part first, else the first match in
/// actor-name order, so every replica of a position starts from the same weights.
/// The error (errc::invalid_argument) starts at train.init's position and lists
/// what the checkpoint's stage parts hold. A weights file is its own part for
/// every layer holder, once the role's check_init_file accepts it.
caf::expected<std::filesystem::path> find_init_part(const graph_spec& g, const actor_spec& a);

/// find_init_part for every layer holder of `g`, before anything starts; the
/// checkpoint's step with, per actor, the part it starts from.
struct init_plan {
  resume_point from;                                  ///< a weights file: the file, step 0
  bool weights_file = false;                          ///< init_is_weights_file
  std::map<std::string, std::filesystem::path> parts; ///< actor -> part file
};
caf::expected<init_plan> check_init(const graph_spec& g);

} // namespace troupe
