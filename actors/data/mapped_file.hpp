// A file mapped read-only into memory: data sources read token files and JSON
// lines through it, so a 10 GB file costs address space, not memory, and a check
// that walks it skips the holes of a sparse file and drops the pages it has read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>

namespace troupe {

/// A read-only mapping of a whole regular file (empty files map to an empty span).
class mapped_file {
public:
  /// Throws std::runtime_error naming the file when it cannot be opened or mapped.
  explicit mapped_file(const std::filesystem::path& path);
  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  std::span<const std::uint8_t> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

  /// Calls `visit(offset, bytes)` on the parts of [begin, size()) that hold data,
  /// in order, in pieces of at most 64 MiB; a sparse file's holes (which read as
  /// zero bytes) are skipped. Each piece's pages are dropped from this process
  /// once visited, so a walk over a large file stays small. Stops when `visit` returns false.
  void for_each_data(std::size_t begin,
                     const std::function<bool(std::size_t offset, std::span<const std::uint8_t> piece)>& visit) const;

private:
  std::filesystem::path path_;
  int fd_ = -1;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

} // namespace troupe
