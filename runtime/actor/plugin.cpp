// dlopen-based plugin loading (see plugin.hpp).
#include "runtime/actor/plugin.hpp"

#include <dlfcn.h>

#include <mutex>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

std::mutex plugins_mtx;
std::vector<std::filesystem::path>& plugin_list() {
  static std::vector<std::filesystem::path> list;
  return list;
}

/// dlerror's text without the leading "PATH: " it usually repeats.
std::string dl_message(const std::filesystem::path& path) {
  const char* e = dlerror();
  std::string msg = e != nullptr ? e : "unknown error";
  auto prefix = path.string() + ": ";
  if (msg.starts_with(prefix))
    msg.erase(0, prefix.size());
  return msg;
}

} // namespace

caf::error load_plugin(const std::filesystem::path& path) {
  std::lock_guard guard{plugins_mtx};
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return make_error(errc::plugin_load_failed, "no such file");
  auto canonical = std::filesystem::canonical(path, ec);
  if (ec)
    canonical = path;
  auto& list = plugin_list();
  for (const auto& p : list)
    if (p == canonical)
      return caf::none;
  // RTLD_GLOBAL so types a plugin defines are shared with later plugins.
  void* lib = dlopen(canonical.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr)
    return make_error(errc::plugin_load_failed, dl_message(canonical));
  dlerror();
  auto* entry = reinterpret_cast<void (*)()>(dlsym(lib, plugin_entry_symbol));
  if (entry == nullptr) {
    auto msg = fmt::format("it does not export `extern \"C\" void {}()`", plugin_entry_symbol);
    dlclose(lib);
    return make_error(errc::plugin_load_failed, std::move(msg));
  }
  entry();
  list.push_back(canonical);
  return caf::none;
}

std::vector<std::filesystem::path> loaded_plugins() {
  std::lock_guard guard{plugins_mtx};
  return plugin_list();
}

} // namespace troupe
