// The actor types every troupe build provides, registered by one explicit call.
#pragma once

#include <caf/expected.hpp>

#include "runtime/registry.hpp"

namespace troupe {

caf::expected<caf::actor> spawn_data_loader(spawn_context& ctx);
caf::expected<caf::actor> spawn_pipeline_stage(spawn_context& ctx);

/// Registers data_loader and pipeline_stage (idempotent).
void register_builtin_actors();

} // namespace troupe
