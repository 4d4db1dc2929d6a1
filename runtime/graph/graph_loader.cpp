// The graph loader's driver: read and sanity-check the bytes, parse YAML,
// apply overrides, load plugins, expand, validate, and sort the diagnostics.
#include "runtime/graph/graph_loader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>

#include "runtime/graph/graph_parse.hpp"
#include "runtime/actor/plugin.hpp"
#include "runtime/actor/registry.hpp"

namespace troupe {

namespace {

constexpr std::size_t max_graph_bytes = 16u << 20;

/// The offset of the first byte that makes `s` not UTF-8 text, or npos.
std::size_t first_non_text_byte(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == 0)
      return i;
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : 0;
    if (n == 0 || i + n >= s.size())
      return i;
    for (std::size_t k = 1; k <= n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80)
        return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

bool diag_before(const diagnostic& a, const diagnostic& b) {
  bool ao = !a.pos.origin.empty(), bo = !b.pos.origin.empty();
  if (ao != bo)
    return bo; // file positions first, then command-line overrides
  if (a.pos.line != b.pos.line)
    return a.pos.line < b.pos.line;
  return a.pos.col < b.pos.col;
}

/// What to do about a plugin library that is not there: the examples' plugins
/// (BUILD/examples/libNAME.so) are targets of their own, which building only
/// `troupe` leaves out. Empty for other paths.
std::string build_hint(const std::filesystem::path& lib) {
  auto name = lib.filename().string();
  if (lib.parent_path().filename() != "examples" || !name.starts_with("lib") || !name.ends_with(".so") ||
      name.size() <= 6)
    return {};
  return fmt::format(" (an example plugin is a target of its own: `cmake --build {} --target {}`, or build all "
                     "targets)",
                     lib.parent_path().parent_path().lexically_normal().string(), name.substr(3, name.size() - 6));
}

void load_plugins(detail::parsed_graph& pg, const load_options& opts, detail::graph_reader& r) {
  for (std::size_t i = 0; i < pg.graph.plugins.size(); ++i) {
    const auto& p = pg.graph.plugins[i];
    auto path = detail::index_path("plugins", i);
    std::error_code ec;
    if (!std::filesystem::exists(p.resolved, ec)) {
      r.error(pg.plugin_nodes[i], path,
              fmt::format("cannot load plugin '{}': no such file{}", p.path, build_hint(p.resolved)));
      continue;
    }
    if (!opts.load_plugins) {
      if (!std::filesystem::is_regular_file(p.resolved, ec))
        r.error(pg.plugin_nodes[i], path, fmt::format("cannot load plugin '{}': not a file", p.path));
      continue;
    }
    if (auto err = load_plugin(p.resolved)) {
      std::string what = err.context().match_elements<std::string>() ? err.context().get_as<std::string>(0) : "";
      r.error(pg.plugin_nodes[i], path, fmt::format("cannot load plugin '{}': {}", p.path, what));
    }
  }
}

} // namespace

graph_vocabulary graph_vocabulary::builtin() {
  graph_vocabulary v;
  v.schedules = builtin_schedule_names();
  return v;
}

load_result load_graph_text(std::string_view text, const std::filesystem::path& file, const load_options& opts) {
  load_result res;
  auto name = file.string();
  auto fail = [&](std::string msg) {
    res.errors.push_back(diagnostic{source_pos{name, 0, 0, {}}, "", std::move(msg)});
    return res;
  };
  if (auto bad = first_non_text_byte(text); bad != std::string_view::npos)
    return fail(fmt::format("not a text file (byte 0x{:02x} at offset {}); a graph file is YAML text",
                            static_cast<unsigned char>(text[bad]), bad));
  detail::graph_reader r{name, res.errors};
  detail::parsed_graph pg;
  pg.graph.file = file;
  pg.base_dir = file.parent_path();
  try {
    auto documents = YAML::LoadAll(std::string{text});
    if (documents.size() > 1) { // yaml-cpp's Load would keep the first and drop the rest unseen
      auto m = documents[1].Mark();
      res.errors.push_back(
        diagnostic{source_pos{name, m.is_null() ? 0 : m.line + 1, m.is_null() ? 0 : m.column + 1, {}}, "",
                   fmt::format("the file holds {} YAML documents (a '---' line starts "
                               "another); a graph file is one document",
                               documents.size())});
      return res;
    }
    if (!documents.empty())
      pg.root.reset(documents.front());
  } catch (const YAML::DeepRecursion& e) {
    res.errors.push_back(diagnostic{source_pos{name, e.mark.line + 1, e.mark.column + 1, {}}, "",
                                    fmt::format("values nested too deep (the limit is {} levels)", e.depth())});
    return res;
  } catch (const YAML::ParserException& e) {
    res.errors.push_back(
      diagnostic{source_pos{name, e.mark.line + 1, e.mark.column + 1, {}}, "", "YAML syntax error: " + e.msg});
    return res;
  } catch (const YAML::Exception& e) {
    return fail("YAML error: " + e.msg);
  }
  if (!pg.root || pg.root.IsNull())
    return fail("the file is empty (a graph needs model, data and train sections; see examples/tiny-gpt.yaml)");
  if (!pg.root.IsMap()) {
    r.error(pg.root, "",
            fmt::format("expected a mapping of sections (model, data, train, ...), got {}", detail::describe(pg.root)));
    return res;
  }
  detail::check_tags(pg.root, "", r);
  if (!res.errors.empty())
    return res;
  try {
    detail::apply_overrides(pg.root, opts.overrides, r);
    detail::parse_sections(pg, r);
    load_plugins(pg, opts, r);
    auto vocab = opts.vocabulary ? opts.vocabulary() : make_vocabulary();
    detail::parse_data_source(pg, r);  // the kinds plugins registered count too
    detail::check_local_update(pg, r); // before expanders read the method's settings
    detail::expand(pg, vocab, r);
    detail::check_names(pg, vocab, r);
    detail::check_policy_options(pg, vocab, r);
    detail::check_routing_options(pg, vocab, r);
    detail::check_skip_planner(pg, vocab, r);
    detail::check_sim(pg, vocab, r);
    detail::validate(pg, vocab, opts, r);
    if (res.errors.empty())
      for (const auto& a : pg.graph.actors)
        if (auto t = vocab.actor_types.find(a.type); t != vocab.actor_types.end() && t->second.check)
          t->second.check(a, pg.graph, res.errors);
  } catch (const YAML::Exception& e) {
    fail("YAML error: " + e.msg);
  }
  std::stable_sort(res.errors.begin(), res.errors.end(), diag_before);
  if (res.errors.empty())
    res.graph = std::move(pg.graph);
  return res;
}

load_result load_graph(const std::filesystem::path& file, const load_options& opts) {
  std::error_code ec;
  auto fail = [&](std::string msg) {
    load_result res;
    res.errors.push_back(diagnostic{source_pos{file.string(), 0, 0, {}}, "", std::move(msg)});
    return res;
  };
  if (std::filesystem::is_directory(file, ec))
    return fail("is a folder, not a graph file");
  std::ifstream in{file, std::ios::binary};
  if (!in)
    return fail(fmt::format("cannot read the graph file: {}", std::strerror(errno)));
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_graph_bytes)
      return fail(
        fmt::format("the file is larger than {} MiB; a graph file is short YAML text", max_graph_bytes >> 20));
  }
  return load_graph_text(text, file, opts);
}

std::filesystem::path default_corpus_path() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("TROUPE_DATA"); d != nullptr && *d != '\0')
    return fs::path{d} / "kjv.txt";
  std::error_code ec;
  std::vector<fs::path> starts{fs::current_path(ec)};
  if (auto exe = fs::read_symlink("/proc/self/exe", ec); !ec)
    starts.push_back(exe.parent_path());
  fs::path root_guess;
  for (auto dir : starts)
    for (; !dir.empty(); dir = dir.parent_path()) {
      if (fs::is_regular_file(dir / "data" / "kjv.txt", ec))
        return dir / "data" / "kjv.txt";
      if (root_guess.empty() && fs::is_regular_file(dir / "deploy" / "setup.sh", ec))
        root_guess = dir;
      if (dir == dir.parent_path())
        break;
    }
  return (root_guess.empty() ? fs::path{"."} : root_guess) / "data" / "kjv.txt";
}

} // namespace troupe
