// The troupe command: dispatches to the subcommands in deploy/commands.hpp.
#include <cstdio>
#include <system_error>

#include "deploy/cli/commands.hpp"

int main(int argc, char** argv) {
  // The flags are bounded (runtime/graph/limits.hpp), but the machine may still refuse
  // threads ($TROUPE_THREADS, a tight ulimit): say so instead of aborting.
  try {
    return troupe::cli::dispatch(argc, argv);
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "troupe: the system refused a resource: %s\n", e.what());
    return troupe::cli::runtime_failure;
  }
}
