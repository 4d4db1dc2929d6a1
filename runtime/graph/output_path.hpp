// Whether an output file can be written, asked before a command starts its
// work: a trace, summary or table that cannot be written should fail the
// command at once (exit 2), not after a run of minutes or hours.
#pragma once

#include <filesystem>

#include <caf/error.hpp>

namespace troupe {

/// Whether the file `path` can be written: the folders on the way are created
/// (as every writer of an output does), an existing `path` must be a file that
/// opens for writing (it is not changed), a new one is created and removed
/// again. Otherwise errc::io_failed, "PATH: cannot write: REASON" with the
/// operating system's reason.
caf::error check_output_path(const std::filesystem::path& path);

/// Whether files can be created in the folder `dir` (created when missing): a
/// probe file is created there and removed again. Otherwise errc::io_failed,
/// "DIR: cannot write into this folder: REASON".
caf::error check_output_folder(const std::filesystem::path& dir);

} // namespace troupe
