// The slurm launcher: inside an allocation, one `srun` starts one task per node;
// each node reads its index from SLURM_PROCID and the token from the
// environment srun exports to it.
#include <cstdlib>

#include <fmt/format.h>

#include "deploy/cluster/launcher_process.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::detail {

caf::expected<std::unique_ptr<launched_nodes>> launch_slurm(const launch_request& r) {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job || !*job)
    return make_error(errc::invalid_argument, "the slurm launcher runs inside a SLURM allocation (salloc/sbatch): "
                                              "SLURM_JOB_ID is not set");
  if (const char* have = std::getenv("SLURM_JOB_NUM_NODES"); have && std::atoi(have) < r.nodes)
    return make_error(errc::invalid_argument,
                      fmt::format("slurm launcher: the run needs {} nodes but allocation {} has {} "
                                  "(SLURM_JOB_NUM_NODES); ask salloc/sbatch for -N {}",
                                  r.nodes, job, have, r.nodes));
  auto n = std::to_string(r.nodes);
  child_spec spec;
  spec.argv = {"srun",         "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1", "--kill-on-bad-exit=1",
               "--export=ALL", // even when the job was submitted with --export=NONE: the token travels this way
               "--label"};
  auto node = node_command(r, std::nullopt);
  spec.argv.insert(spec.argv.end(), node.begin(), node.end());
  spec.env = {"TROUPE_TOKEN=" + r.token};
  spec.workdir = r.workdir;
  spec.death_signal = SIGTERM; // srun forwards it to the tasks and ends the step
  spec.node = -1;
  spec.srun_labels = true;
  auto set = std::make_unique<process_set>("slurm", r);
  if (auto err = set->start(spec))
    return err;
  set->start_reader();
  return std::unique_ptr<launched_nodes>{std::move(set)};
}

} // namespace troupe::detail
