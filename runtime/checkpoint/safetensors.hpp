// Reading and writing tensors in the safetensors format (an 8-byte header
// length, a JSON header, then the raw bytes), atomically: a file is either
// the previous one or the complete new one, never a torn mix.
#pragma once

#include <filesystem>
#include <map>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "runtime/tensor/tensor_handle.hpp"

namespace troupe {

/// A tensor with its name in the file.
struct named_handle {
  std::string name;
  tensor_handle value;
};

/// Tensors and string metadata of one safetensors file.
struct safetensors_file {
  std::vector<named_handle> tensors; ///< in file order
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`, or an undefined handle.
  tensor_handle find(const std::string& name) const;
};

/// One tensor as a safetensors header describes it.
struct tensor_entry {
  std::string name;
  dtype type = dtype::f32;
  shape_t shape;
  std::uint64_t offset = 0; ///< where its bytes start in the data section
  std::uint64_t bytes = 0;
};

/// What a safetensors file holds, known from its header alone.
struct safetensors_header {
  std::vector<tensor_entry> tensors; ///< in header order
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`, or nullptr.
  const tensor_entry* find(std::string_view name) const;
};

/// Writes CPU tensors to `path` through a temporary file in the same folder,
/// flushed to disk and then renamed over `path`. On any failure (full disk,
/// unwritable folder) returns errc::io_failed naming the file and the system's
/// reason, removes the temporary file and leaves an existing `path` untouched.
caf::error write_safetensors(const std::filesystem::path& path, const std::vector<named_handle>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

/// Reads a whole file into CPU tensors (f32, bf16, f16, i32, u8). A truncated or
/// malformed file is errc::io_failed saying what is wrong and where; nothing is
/// allocated before the header's sizes are checked against the file.
caf::expected<safetensors_file> read_safetensors(const std::filesystem::path& path);

/// Reads and checks only the header of `path`: each tensor's dtype, shape and
/// byte range, and that the file holds all of their bytes (errc::io_failed
/// otherwise: a truncated file says how many bytes its header describes and
/// how many there are). A cheap check of a file before anything relies on it.
caf::expected<safetensors_header> read_safetensors_header(const std::filesystem::path& path);

/// The header a file with `f`'s tensors and metadata has.
safetensors_header header_of(const safetensors_file& f);

/// Writes `text` to `path` with the same temporary-file, flush and rename discipline.
caf::error write_file_atomically(const std::filesystem::path& path, const std::string& text);

} // namespace troupe
