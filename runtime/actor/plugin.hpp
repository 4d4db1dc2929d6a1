// Plugins: shared libraries named in a graph's `plugins:` that register more
// actor types (and policies) into the process-wide registries.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <caf/error.hpp>

namespace troupe {

/// The symbol every plugin exports: `extern "C" void troupe_register_plugin()`.
/// It calls register_actor_type(...) (runtime/actor/registry.hpp) for each type.
inline constexpr const char* plugin_entry_symbol = "troupe_register_plugin";

/// Loads the library at `path` and calls its entry point once. Loading the
/// same file again is a no-op. On failure returns errc::plugin_load_failed
/// with dlerror's text, with `path` itself removed from the front of it.
/// Libraries stay loaded for the life of the process (registries point into them).
caf::error load_plugin(const std::filesystem::path& path);

/// The canonical paths of the plugins loaded so far, in load order.
std::vector<std::filesystem::path> loaded_plugins();

} // namespace troupe
