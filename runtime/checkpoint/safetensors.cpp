// The safetensors format and atomic file replacement.
#include "runtime/checkpoint/safetensors.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace {

const char* st_dtype(dtype t) {
  switch (t) {
  case dtype::f32:
    return "F32";
  case dtype::bf16:
    return "BF16";
  case dtype::f16:
    return "F16";
  case dtype::i32:
    return "I32";
  case dtype::u8:
    return "U8";
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
caf::error replace_file(const std::filesystem::path& path,
                        const std::vector<std::pair<const void*, std::size_t>>& chunks) {
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
    header[t.name] = {
      {"dtype", st_dtype(t.value.type())}, {"shape", shape}, {"data_offsets", {offset, offset + t.value.nbytes()}}};
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

namespace {

/// An open file, closed when it goes.
struct open_file {
  int fd = -1;
  ~open_file() {
    if (fd >= 0)
      ::close(fd);
  }
  bool read_all(void* dst, std::size_t size) const {
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
  }
};

/// Bytes of `dims` elements of `t`; nullopt for a negative dimension or an overflow.
std::optional<std::uint64_t> byte_size(const std::vector<std::int64_t>& dims, dtype t) {
  std::uint64_t n = size_of(t);
  for (auto d : dims) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d)))
      return std::nullopt;
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

/// Reads and checks the header of the open `f`, leaving the file at the data.
/// `data_start` is set to the data section's offset in the file.
caf::expected<safetensors_header> read_header(const open_file& f, const std::filesystem::path& path,
                                              std::uint64_t& data_start) {
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    return io_error(path, fmt::format("cannot read: {}", std::strerror(errno)));
  auto file_size = static_cast<std::uint64_t>(st.st_size);
  std::uint64_t n = 0;
  if (file_size < sizeof n || !f.read_all(&n, sizeof n))
    return io_error(path, fmt::format("truncated or not a safetensors file ({} bytes: no header length)", file_size));
  if (n > file_size - sizeof n)
    return io_error(path, fmt::format("truncated or not a safetensors file (a header of {} bytes, but {} follow "
                                      "its length)",
                                      n, file_size - sizeof n));
  std::string text(n, '\0');
  if (!f.read_all(text.data(), n))
    return io_error(path, "truncated header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return io_error(path, fmt::format("malformed header: {}", plain_json_error(e.what())));
  }
  safetensors_header out;
  std::uint64_t data_size = file_size - sizeof n - n, data_end = 0;
  data_start = sizeof n + n;
  std::string entry = "__metadata__"; // the entry being read, for the error
  try {
    for (auto& [name, v] : header.items()) {
      entry = name;
      if (name == "__metadata__") {
        for (auto& [k, s] : v.items())
          out.metadata[k] = s.get<std::string>();
        continue;
      }
      auto t = from_st_dtype(v.at("dtype").get<std::string>());
      if (!t)
        return io_error(path, fmt::format("tensor '{}': unsupported dtype {}", name, v.at("dtype").dump()));
      auto dims = v.at("shape").get<std::vector<std::int64_t>>();
      auto bytes = byte_size(dims, *t);
      if (dims.size() > shape_t::max_rank || !bytes)
        return io_error(path, fmt::format("tensor '{}': bad shape {}", name, v.at("shape").dump()));
      auto offs = v.at("data_offsets").get<std::vector<std::uint64_t>>();
      if (offs.size() != 2 || offs[1] < offs[0] || offs[1] - offs[0] != *bytes)
        return io_error(path, fmt::format("tensor '{}': data offsets {} do not match its shape {} ({} bytes)", name,
                                          v.at("data_offsets").dump(), v.at("shape").dump(), *bytes));
      out.tensors.push_back({name, *t, shape_t(dims), offs[0], *bytes});
      data_end = std::max(data_end, offs[1]);
    }
  } catch (const std::exception& e) {
    return io_error(path, fmt::format("malformed header: entry '{}': {}", entry, plain_json_error(e.what())));
  }
  if (data_end > data_size)
    return io_error(path, fmt::format("truncated: its header describes {} bytes of tensor data, the file holds {} "
                                      "(a copy or a disk that lost its end)",
                                      data_end, data_size));
  return out;
}

} // namespace

const tensor_entry* safetensors_header::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

safetensors_header header_of(const safetensors_file& f) {
  safetensors_header h;
  std::uint64_t offset = 0;
  for (const auto& t : f.tensors) {
    h.tensors.push_back({t.name, t.value.type(), t.value.shape(), offset, t.value.nbytes()});
    offset += t.value.nbytes();
  }
  h.metadata = f.metadata;
  return h;
}

caf::expected<safetensors_header> read_safetensors_header(const std::filesystem::path& path) {
  open_file f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0)
    return io_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::uint64_t data_start = 0;
  return read_header(f, path, data_start);
}

caf::expected<safetensors_file> read_safetensors(const std::filesystem::path& path) {
  open_file f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0)
    return io_error(path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::uint64_t data_start = 0;
  auto header = read_header(f, path, data_start);
  if (!header)
    return header.error();
  // Sizes are checked against the file before anything is allocated.
  std::sort(header->tensors.begin(), header->tensors.end(),
            [](const tensor_entry& a, const tensor_entry& b) { return a.offset < b.offset; });
  safetensors_file out;
  out.metadata = std::move(header->metadata);
  std::uint64_t at = 0;
  for (const auto& e : header->tensors) {
    auto t = tensor_handle::empty(e.shape, e.type);
    if (e.offset != at && ::lseek(f.fd, static_cast<off_t>(data_start + e.offset), SEEK_SET) < 0)
      return io_error(path, "seek failed");
    if (!f.read_all(t.raw(), t.nbytes()))
      return io_error(path, fmt::format("truncated data for tensor '{}'", e.name));
    at = e.offset + e.bytes;
    out.tensors.push_back({e.name, std::move(t)});
  }
  return out;
}

} // namespace troupe
