// Reading and writing tensors in the safetensors format (an 8-byte header
// length, a JSON header, then the raw bytes), atomically: a file is either
// the previous one or the complete new one, never a torn mix.
#pragma once

#include <filesystem>
#include <map>
#include <string>
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
  std::vector<named_handle> tensors;        ///< in file order
  std::map<std::string, std::string> metadata;

  /// The tensor called `name`, or an undefined handle.
  tensor_handle find(const std::string& name) const;
};

/// Writes CPU tensors to `path` through a temporary file in the same folder,
/// flushed to disk and then renamed over `path`. On any failure (full disk,
/// unwritable folder) returns errc::io_failed naming the file and the system's
/// reason, removes the temporary file and leaves an existing `path` untouched.
caf::error write_safetensors(const std::filesystem::path& path, const std::vector<named_handle>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

/// Reads a whole file into CPU tensors (f32, bf16, f16, i32, u8). A truncated or
/// malformed file is errc::io_failed saying what is wrong and where.
caf::expected<safetensors_file> read_safetensors(const std::filesystem::path& path);

/// Writes `text` to `path` with the same temporary-file, flush and rename discipline.
caf::error write_file_atomically(const std::filesystem::path& path, const std::string& text);

} // namespace troupe
