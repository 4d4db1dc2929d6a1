// Mapping a data file read-only, and walking its data extents (SEEK_DATA/SEEK_HOLE).
#include "actors/data/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace troupe {

mapped_file::mapped_file(const std::filesystem::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0)
    throw std::runtime_error(fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw std::runtime_error(fmt::format("{}: not a regular file", path.string()));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ == 0)
    return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    auto err = errno;
    ::close(fd_);
    throw std::runtime_error(fmt::format("{}: cannot map {} bytes: {}", path.string(), size_, std::strerror(err)));
  }
  data_ = static_cast<const std::uint8_t*>(p);
}

mapped_file::~mapped_file() {
  if (data_)
    ::munmap(const_cast<std::uint8_t*>(data_), size_);
  if (fd_ >= 0)
    ::close(fd_);
}

void mapped_file::for_each_data(std::size_t begin,
                                const std::function<bool(std::size_t, std::span<const std::uint8_t>)>& visit) const {
  constexpr std::size_t piece = std::size_t{64} << 20;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t at = begin; at < size_;) {
    // The next data at or after `at`, and the hole after it; a file system
    // without SEEK_DATA reports the whole file as data.
    auto data = ::lseek(fd_, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0)
      return; // ENXIO: only a hole is left (it reads as zeros)
    auto hole = ::lseek(fd_, data, SEEK_HOLE);
    auto end = hole < 0 ? size_ : std::min(size_, static_cast<std::size_t>(hole));
    for (auto from = static_cast<std::size_t>(data); from < end; from += piece) {
      auto n = std::min(piece, end - from);
      bool more = visit(from, {data_ + from, n});
      auto first = from / page * page; // the pages this piece touched, dropped again
      ::madvise(const_cast<std::uint8_t*>(data_) + first, from + n - first, MADV_DONTNEED);
      if (!more)
        return;
    }
    at = end;
  }
}

} // namespace troupe
