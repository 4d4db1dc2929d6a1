// Probing output paths: create what a writer would create, then take it back.
#include "runtime/graph/output_path.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

caf::error cannot(const fs::path& p, const std::string& why) {
  return make_error(errc::io_failed, fmt::format("{}: cannot write: {}", p.string(), why));
}

/// Creates the folders on the way to `dir`; a file standing in the way is ENOTDIR, named.
caf::error make_folders(const fs::path& dir, const fs::path& for_path) {
  if (dir.empty())
    return {};
  std::error_code ec;
  if (fs::is_directory(dir, ec))
    return {};
  for (auto up = dir; !up.empty(); up = up.parent_path()) {
    auto st = fs::status(up, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st))
        return cannot(for_path, fmt::format("{} ({} is a file)", std::strerror(ENOTDIR), up.string()));
      break;
    }
    if (up == up.parent_path())
      break;
  }
  fs::create_directories(dir, ec);
  if (ec)
    return cannot(for_path, fmt::format("{} (creating {})", ec.message(), dir.string()));
  return {};
}

} // namespace

caf::error check_output_path(const fs::path& path) {
  if (path.empty())
    return cannot(path, "no file name");
  for (unsigned char c : path.native()) // a newline or escape in a name is a typo, not a file anyone wants
    if (c < 0x20 || c == 0x7f) {
      std::string shown; // the name as it can be read back, \xNN for each control byte
      for (unsigned char d : path.native())
        shown += d < 0x20 || d == 0x7f ? fmt::format("\\x{:02x}", d) : std::string(1, static_cast<char>(d));
      return make_error(errc::io_failed, fmt::format("{}: cannot write: the name holds a control character "
                                                     "(byte 0x{:02x}); a file name is printable text",
                                                     shown, c));
    }
  if (auto err = make_folders(path.parent_path(), path))
    return err;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (fs::is_directory(st))
    return cannot(path, std::strerror(EISDIR));
  if (fs::exists(st)) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return cannot(path, std::strerror(errno));
    ::close(fd);
    return {};
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return cannot(path, std::strerror(errno));
  ::close(fd);
  ::unlink(path.c_str());
  return {};
}

caf::error check_output_folder(const fs::path& dir) {
  if (auto err = make_folders(dir, dir))
    return err;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return make_error(errc::io_failed, fmt::format("{}: cannot write into this folder: not a folder", dir.string()));
  auto probe = dir / fmt::format(".troupe-probe.{}", ::getpid());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_failed,
                      fmt::format("{}: cannot write into this folder: {}", dir.string(), std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

} // namespace troupe
