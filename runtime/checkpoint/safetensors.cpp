// The safetensors format and atomic file replacement.
#include "runtime/checkpoint/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

const char* st_dtype(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
    case dtype::i32: return "I32";
    case dtype::u8: return "U8";
  }
  return "?";
}

std::optional<dtype> from_st_dtype(const std::string& s) {
  for (auto t : {dtype::f32, dtype::bf16, dtype::f16, dtype::i32, dtype::u8})
    if (s == st_dtype(t))
      return t;
  return std::nullopt;
}

caf::error io_error(const std::filesystem::path& p, const std::string& what) {
  return make_error(errc::io_failed, fmt::format("{}: {}", p.string(), what));
}

/// Writes every chunk to a temporary file, fsyncs it, renames it over `path`
/// and fsyncs the folder, so a crash leaves either the old or the new file.
caf::error replace_file(const std::filesystem::path& path, const std::vector<std::pair<const void*, std::size_t>>& chunks) {
  auto tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return io_error(path, fmt::format("cannot create a temporary file: {}", std::strerror(errno)));
  // Say that an older file is kept only where there is one (a new checkpoint part has none).
  std::error_code ec;
  const char* kept = std::filesystem::exists(path, ec) ? "; the previous file is kept" : "";
  auto fail = [&](const char* what) {
    auto err = io_error(path, fmt::format("{}: {}{}", what, std::strerror(errno), kept));
    ::close(fd);
    ::unlink(tmp.c_str());
    return err;
  };
  for (auto [data, size] : chunks) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      auto n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return fail("writing failed");
      p += n, size -= static_cast<std::size_t>(n);
    }
  }
  if (::fsync(fd) != 0)
    return fail("flushing to disk failed");
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return io_error(path, fmt::format("closing failed: {}{}", std::strerror(errno), kept));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    auto err = io_error(path, fmt::format("cannot move the new file into place: {}", std::strerror(errno)));
    ::unlink(tmp.c_str());
    return err;
  }
  auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  return {};
}

} // namespace

tensor_handle safetensors_file::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name)
      return t.value;
  return {};
}

caf::error write_safetensors(const std::filesystem::path& path, const std::vector<named_handle>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  std::vector<std::pair<const void*, std::size_t>> chunks;
  for (const auto& t : tensors) {
    if (!t.value.defined() || !t.value.device().is_cpu())
      return make_error(errc::invalid_argument,
                        fmt::format("{}: tensor '{}' is not a CPU tensor", path.string(), t.name));
    std::vector<std::int64_t> shape(t.value.shape().begin(), t.value.shape().end());
    header[t.name] = {{"dtype", st_dtype(t.value.type())},
                      {"shape", shape},
                      {"data_offsets", {offset, offset + t.value.nbytes()}}};
    offset += t.value.nbytes();
  }
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  auto text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // keep the data 8-byte aligned
  std::uint64_t n = text.size();               // little-endian on every machine troupe targets
  chunks.emplace_back(&n, sizeof n);
  chunks.emplace_back(text.data(), text.size());
  for (const auto& t : tensors)
    chunks.emplace_back(t.value.raw(), t.value.nbytes());
  return replace_file(path, chunks);
}

caf::error write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  return replace_file(path, {{text.data(), text.size()}});
}

caf::expected<safetensors_file> read_safetensors(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return io_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  auto read_all = [&](void* dst, std::size_t size) {
    auto* p = static_cast<char*>(dst);
    while (size > 0) {
      auto n = ::read(fd, p, size);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return false;
      p += n, size -= static_cast<std::size_t>(n);
    }
    return true;
  };
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  std::uint64_t n = 0;
  auto file_size = std::filesystem::file_size(path);
  if (!read_all(&n, sizeof n) || n > file_size - sizeof n)
    return io_error(path, "truncated or not a safetensors file (bad header length)");
  std::string text(n, '\0');
  if (!read_all(text.data(), n))
    return io_error(path, "truncated header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return io_error(path, fmt::format("malformed header: {}", e.what()));
  }
  safetensors_file out;
  std::vector<std::pair<std::size_t, named_handle>> placed;
  std::size_t data_size = file_size - sizeof n - n;
  try {
    for (auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        for (auto& [k, s] : v.items())
          out.metadata[k] = s.get<std::string>();
        continue;
      }
      auto t = from_st_dtype(v.at("dtype").get<std::string>());
      if (!t)
        return io_error(path, fmt::format("tensor '{}': unsupported dtype {}", name, v.at("dtype").dump()));
      auto dims = v.at("shape").get<std::vector<std::int64_t>>();
      if (dims.size() > shape_t::max_rank || std::any_of(dims.begin(), dims.end(), [](auto d) { return d < 0; }))
        return io_error(path, fmt::format("tensor '{}': bad shape {}", name, v.at("shape").dump()));
      auto offs = v.at("data_offsets").get<std::vector<std::size_t>>();
      auto handle = tensor_handle::empty(shape_t(dims), *t);
      if (offs.size() != 2 || offs[1] < offs[0] || offs[1] > data_size || offs[1] - offs[0] != handle.nbytes())
        return io_error(path, fmt::format("tensor '{}': data offsets do not match its shape or the file", name));
      placed.emplace_back(offs[0], named_handle{name, handle});
    }
  } catch (const std::exception& e) {
    return io_error(path, fmt::format("malformed header: {}", e.what()));
  }
  std::sort(placed.begin(), placed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::size_t at = 0;
  for (auto& [off, t] : placed) {
    if (off != at && ::lseek(fd, static_cast<off_t>(sizeof n + n + off), SEEK_SET) < 0)
      return io_error(path, "seek failed");
    if (!read_all(t.value.raw(), t.value.nbytes()))
      return io_error(path, fmt::format("truncated data for tensor '{}'", t.name));
    at = off + t.value.nbytes();
    out.tensors.push_back(std::move(t));
  }
  return out;
}

} // namespace troupe
