// The troupe command: dispatches to the subcommands in deploy/commands.hpp.
#include "deploy/commands.hpp"

int main(int argc, char** argv) {
  return troupe::cli::dispatch(argc, argv);
}
