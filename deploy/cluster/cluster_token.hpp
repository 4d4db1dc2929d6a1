// The shared secret of a multi-process run: read from a file, standard input
// or $TROUPE_TOKEN, or made fresh for one launch.
#pragma once

#include <string>

#include <caf/expected.hpp>

namespace troupe::cluster {

/// The token in `path` (surrounding whitespace dropped). An error when the file
/// cannot be read, is empty, or others than its owner may read it.
caf::expected<std::string> read_token_file(const std::string& path);
/// The first line of standard input (how the ssh launcher hands it over).
caf::expected<std::string> read_token_stdin();
/// 32 random bytes as hex, from the system's entropy source.
std::string fresh_token();

} // namespace troupe::cluster
