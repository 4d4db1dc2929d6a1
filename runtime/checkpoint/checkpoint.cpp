// Checkpoint folders: writing and reading one actor's part, completing a step
// (checkpoint.json, then `latest`), pruning, and checking a folder to resume from.
#include "runtime/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"

namespace troupe {

namespace fs = std::filesystem;

namespace {

constexpr const char* manifest_name = "checkpoint.json";
constexpr const char* began_key = "write_began_unix_ns";

std::int64_t unix_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// The step of a folder called `step-000016`, or nullopt.
std::optional<std::int64_t> folder_step(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step-") != 0)
    return std::nullopt;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), v);
  if (ec != std::errc{} || end != name.data() + name.size())
    return std::nullopt;
  return v;
}

/// A step folder's checkpoint.json.
struct manifest {
  std::int64_t step = 0;
  std::map<std::string, std::string> parts; ///< actor -> file
  std::int64_t every = 0;                   ///< 0: not recorded
  int keep = 0;
  std::int64_t steps = 0; ///< the run's train.steps; 0: not recorded
};

/// The step folder's manifest, or an error naming it.
caf::expected<manifest> read_manifest(const fs::path& folder) {
  auto path = folder / manifest_name;
  std::ifstream in(path);
  if (!in)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: not a complete checkpoint (no {}: the run stopped while writing it, or "
                                  "this is not a checkpoint folder)",
                                  folder.string(), manifest_name));
  try {
    auto j = nlohmann::json::parse(in);
    return manifest{j.at("step").get<std::int64_t>(), j.at("parts").get<std::map<std::string, std::string>>(),
                    j.value("every", std::int64_t{0}), j.value("keep", 0), j.value("steps", std::int64_t{0})};
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument,
                      fmt::format("{}: malformed: {}", path.string(), plain_json_error(e.what())));
  }
}

/// The complete step folders in `dir` (holding checkpoint.json), by name.
std::vector<std::string> complete_checkpoints(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (auto name = e.path().filename().string(); folder_step(name) && fs::exists(e.path() / manifest_name, ec))
      out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

std::string checkpoint_folder_name(std::int64_t step) {
  return fmt::format("step-{:06}", step);
}

std::string checkpoint_part_name(const std::string& actor) {
  return actor + ".safetensors";
}

std::vector<std::string> checkpoint_actors(const graph_spec& g) {
  std::vector<std::string> out;
  for (const auto& a : g.actors)
    if (a.role.checkpoint_identity)
      out.push_back(a.name);
  return out;
}

std::map<std::string, std::string> checkpoint_identity(const graph_spec& g, const actor_spec& a) {
  std::map<std::string, std::string> id;
  if (a.role.checkpoint_identity)
    id = a.role.checkpoint_identity(g, a);
  id["type"] = a.type;
  return id;
}

caf::expected<std::string> write_checkpoint_part(const fs::path& dir, std::int64_t step, const std::string& actor,
                                                 const std::vector<named_handle>& tensors,
                                                 std::map<std::string, std::string> metadata) {
  metadata["actor"] = actor;
  metadata["step"] = std::to_string(step);
  metadata[began_key] = std::to_string(unix_ns(std::chrono::system_clock::now()));
  auto folder = dir / checkpoint_folder_name(step);
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec)
    return make_error(errc::io_failed,
                      fmt::format("{}: cannot create the checkpoint folder: {}", folder.string(), ec.message()));
  // A folder being written again (a resumed run replaying steps) is no longer
  // complete: drop its manifest before any part changes.
  if (fs::remove(folder / manifest_name, ec); ec)
    return make_error(errc::io_failed, fmt::format("{}: cannot mark the checkpoint incomplete: {}",
                                                   (folder / manifest_name).string(), ec.message()));
  auto name = checkpoint_part_name(actor);
  // On failure only this part's temporary file goes: the other parts may be
  // writing into the folder right now. The runner discards the incomplete
  // folder once every actor has stopped (checkpoint_tracker::discard_incomplete).
  if (auto err = write_safetensors(folder / name, tensors, metadata))
    return err;
  return name;
}

caf::expected<safetensors_file> read_checkpoint_part(const fs::path& folder, const std::string& actor,
                                                     std::int64_t step) {
  auto path = folder / checkpoint_part_name(actor);
  auto f = read_safetensors(path);
  if (!f)
    return f.error();
  auto get = [&](const char* k) { return f->metadata.count(k) ? f->metadata.at(k) : std::string{"(none)"}; };
  if (get("actor") != actor || get("step") != std::to_string(step))
    return make_error(errc::io_failed, fmt::format("{}: holds actor '{}' at step {}, expected '{}' at step {}",
                                                   path.string(), get("actor"), get("step"), actor, step));
  return f;
}

part_checkpointing part_checkpointing::of(const graph_spec& g, const actor_spec& a) {
  return {g.checkpoint.dir_path,      g.checkpoint.every,       g.train.steps,
          g.checkpoint.resume_folder, g.checkpoint.resume_step, checkpoint_identity(g, a)};
}

bool part_checkpointing::due(std::int64_t steps_done) const {
  return !dir.empty() && checkpoint_due(steps_done, every, steps);
}

std::string part_checkpointing::write(const std::string& actor, std::int64_t steps_done,
                                      const std::vector<named_handle>& tensors,
                                      std::map<std::string, std::string> metadata) const {
  auto md = identity;
  md.merge(metadata);
  auto file = write_checkpoint_part(dir, steps_done, actor, tensors, std::move(md));
  if (!file)
    throw std::runtime_error(
      fmt::format("checkpoint after step {} failed: {}", steps_done, error_message(file.error())));
  return *file;
}

caf::expected<std::optional<safetensors_file>> part_checkpointing::read(const std::string& actor) const {
  if (resume_folder.empty())
    return std::optional<safetensors_file>{};
  auto f = read_checkpoint_part(resume_folder, actor, resume_step);
  if (!f)
    return f.error();
  return std::optional<safetensors_file>{std::move(*f)};
}

std::string part_checkpointing::resume_file(const std::string& actor) const {
  return (resume_folder / checkpoint_part_name(actor)).string();
}

checkpoint_tracker::checkpoint_tracker(fs::path dir, std::vector<std::string> actors, int keep, std::int64_t every,
                                       std::int64_t steps)
    : dir_(std::move(dir)), actors_(actors.begin(), actors.end()), keep_(std::max(1, keep)), every_(every),
      steps_(steps) {}

bool checkpoint_tracker::on_report(const std::string& actor, std::int64_t step, const std::string& file) {
  if (!actors_.count(actor) || step <= last_)
    return false;
  auto now = std::chrono::system_clock::now();
  auto& p = pending_[step];
  p.files[actor] = file;
  p.last_arrival = now;
  if (auto h = read_safetensors_header(dir_ / checkpoint_folder_name(step) / file); h && h->metadata.count(began_key)) {
    auto began = std::stoll(h->metadata.at(began_key));
    p.slowest_ms = std::max(p.slowest_ms, static_cast<double>(unix_ns(now) - began) / 1e6);
  }
  return p.files.size() == actors_.size();
}

caf::expected<checkpoint_commit> checkpoint_tracker::commit(std::int64_t step) {
  auto it = pending_.find(step);
  if (it == pending_.end() || it->second.files.size() != actors_.size())
    return make_error(errc::invalid_argument, fmt::format("checkpoint step {} is not complete", step));
  checkpoint_commit c{step, dir_ / checkpoint_folder_name(step), 0, it->second.slowest_ms};
  nlohmann::json manifest{{"step", step}, {"parts", it->second.files}, {"keep", keep_}};
  if (every_ > 0)
    manifest["every"] = every_;
  if (steps_ > 0) // the learning-rate schedule's length: a resume with other steps changes it
    manifest["steps"] = steps_;
  for (const auto& [actor, file] : it->second.files) {
    std::error_code ec;
    c.bytes += fs::file_size(c.folder / file, ec);
  }
  if (auto err = write_file_atomically(c.folder / manifest_name, manifest.dump(1) + "\n"))
    return err;
  if (auto err = write_file_atomically(dir_ / "latest", checkpoint_folder_name(step) + "\n"))
    return err;
  last_ = step;
  pending_.erase(pending_.begin(), std::next(it));
  if (auto err = prune(step))
    return err;
  return c;
}

caf::error checkpoint_tracker::prune(std::int64_t upto) const {
  std::vector<std::pair<std::int64_t, fs::path>> complete;
  std::error_code ec;
  std::vector<fs::path> remove;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    auto s = folder_step(e.path().filename().string());
    if (!s || *s > upto || !e.is_directory(ec))
      continue;
    if (fs::exists(e.path() / manifest_name))
      complete.emplace_back(*s, e.path());
    else if (*s < upto)
      remove.push_back(e.path());
  }
  if (ec)
    return make_error(errc::io_failed, fmt::format("{}: cannot list: {}", dir_.string(), ec.message()));
  std::sort(complete.rbegin(), complete.rend());
  for (std::size_t i = static_cast<std::size_t>(keep_); i < complete.size(); ++i)
    remove.push_back(complete[i].second);
  for (const auto& p : remove)
    if (fs::remove_all(p, ec); ec)
      return make_error(errc::io_failed,
                        fmt::format("{}: cannot remove an old checkpoint: {}", p.string(), ec.message()));
  return {};
}

void checkpoint_tracker::discard_incomplete() const {
  std::error_code ec;
  std::vector<fs::path> remove;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    auto s = folder_step(e.path().filename().string());
    if (s && *s > last_ && e.is_directory(ec) && !fs::exists(e.path() / manifest_name, ec))
      remove.push_back(e.path());
  }
  for (const auto& p : remove)
    fs::remove_all(p, ec);
}

checkpoint_dir_lock::checkpoint_dir_lock(checkpoint_dir_lock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}

checkpoint_dir_lock& checkpoint_dir_lock::operator=(checkpoint_dir_lock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

checkpoint_dir_lock::~checkpoint_dir_lock() {
  if (fd_ >= 0)
    ::close(fd_); // releases the flock
}

caf::expected<checkpoint_dir_lock> checkpoint_dir_lock::acquire(const fs::path& dir) {
  auto path = dir / "lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return make_error(errc::io_failed,
                      fmt::format("{}: cannot create the lock file: {}", path.string(), std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int why = errno;
    std::string holder(256, '\0');
    auto n = ::pread(fd, holder.data(), holder.size(), 0);
    holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0'))
      holder.pop_back();
    ::close(fd);
    if (why != EWOULDBLOCK)
      return make_error(errc::io_failed, fmt::format("{}: cannot lock: {}", path.string(), std::strerror(why)));
    return make_error(errc::invalid_argument,
                      fmt::format("{}: another run is writing checkpoints here ({}); wait for it to end, or give "
                                  "this run another checkpoint.dir",
                                  dir.string(), holder.empty() ? "holder unknown" : holder));
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  auto who = fmt::format("pid {} on host {}\n", ::getpid(), host);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    int why = errno;
    ::close(fd);
    return make_error(errc::io_failed,
                      fmt::format("{}: cannot write the lock file: {}", path.string(), std::strerror(why)));
  }
  checkpoint_dir_lock l;
  l.fd_ = fd;
  return l;
}

caf::expected<checkpoint_dir_lock> open_checkpoint_dir(const graph_spec& g, bool restart) {
  const auto& c = g.checkpoint;
  if (c.every <= 0 || c.dir_path.empty())
    return checkpoint_dir_lock{};
  if (auto err = check_output_folder(c.dir_path))
    return make_error(errc::invalid_argument, fmt::format("checkpoint.dir: {}", error_message(err)));
  auto lock = checkpoint_dir_lock::acquire(c.dir_path);
  if (!lock)
    return lock.error();
  std::error_code ec;
  std::vector<fs::path> earlier;
  for (const auto& e : fs::directory_iterator(c.dir_path, ec))
    if (auto name = e.path().filename().string(); name == "latest" || folder_step(name))
      earlier.push_back(e.path());
  std::sort(earlier.begin(), earlier.end());
  if (earlier.empty() || !c.resume_folder.empty())
    return lock;
  if (!restart) {
    std::string latest;
    if (std::ifstream in{c.dir_path / "latest"}; in && std::getline(in, latest))
      latest = fmt::format(", 'latest' names {}", latest);
    auto steps =
      std::count_if(earlier.begin(), earlier.end(), [](const fs::path& p) { return p.filename() != "latest"; });
    return make_error(errc::invalid_argument,
                      fmt::format("{}: holds an earlier run's checkpoints ({} step folder{}{}); a fresh run here would "
                                  "mix its steps with them: --resume {} to continue that run, --restart to remove "
                                  "them and start over, or another checkpoint.dir",
                                  c.dir_path.string(), steps, steps == 1 ? "" : "s", latest, c.dir_path.string()));
  }
  for (const auto& p : earlier)
    if (fs::remove_all(p, ec); ec)
      return make_error(errc::io_failed,
                        fmt::format("{}: cannot remove an earlier run's checkpoint: {}", p.string(), ec.message()));
  return lock;
}

caf::expected<resume_point> find_checkpoint(const fs::path& dir) {
  auto bad = [](std::string what) { return make_error(errc::invalid_argument, std::move(what)); };
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return bad(fmt::format("{}: no such checkpoint folder", dir.string()));
  resume_point rp{dir, 0, dir, 0, 0};
  if (std::ifstream latest{dir / "latest"}) {
    std::string name;
    std::getline(latest, name);
    if (!folder_step(name))
      return bad(fmt::format("{}: expected a folder name like step-000016, got '{}'", (dir / "latest").string(), name));
    rp.folder = dir / name;
    rp.dir = dir;
    if (!fs::is_directory(rp.folder, ec)) {
      auto there = complete_checkpoints(dir);
      return bad(fmt::format("{}: names {}, which does not exist in {} ({}); --resume {} to continue from one "
                             "that does",
                             (dir / "latest").string(), name, dir.string(),
                             there.empty() ? "it holds no complete checkpoint"
                                           : fmt::format("complete checkpoints there: {}", fmt::join(there, ", ")),
                             (dir / (there.empty() ? "step-NNNNNN" : there.back())).string()));
    }
  } else if (auto name = fs::absolute(dir).lexically_normal();
             !fs::exists(dir / manifest_name) &&
             !folder_step((name.has_filename() ? name : name.parent_path()).filename().string())) {
    return bad(fmt::format("{}: no checkpoint here (expected a 'latest' file naming a step folder, or a step "
                           "folder holding {})",
                           dir.string(), manifest_name));
  } else {
    auto folder = fs::absolute(dir).lexically_normal();
    rp.dir = (folder.has_filename() ? folder : folder.parent_path()).parent_path();
  }
  auto m = read_manifest(rp.folder);
  if (!m)
    return m.error();
  rp.step = m->step;
  rp.every = m->every;
  rp.keep = m->keep;
  rp.steps = m->steps;
  return rp;
}

namespace {

/// "tensor 'W' holds NaN at element 17", or nothing when every float of `f` is finite.
std::optional<std::string> first_non_finite(const safetensors_file& f) {
  for (const auto& t : f.tensors) {
    auto n = t.value.numel();
    auto say = [&](std::int64_t i, bool nan) {
      return fmt::format("tensor '{}' holds {} at element {} (the file was damaged, or the run that wrote it "
                         "diverged)",
                         t.name, nan ? "NaN" : "Inf", i);
    };
    if (t.value.type() == dtype::f32) {
      const float* v = t.value.data<float>();
      for (std::int64_t i = 0; i < n; ++i)
        if (!std::isfinite(v[i]))
          return say(i, std::isnan(v[i]));
    } else if (t.value.type() == dtype::bf16 || t.value.type() == dtype::f16) {
      // Exponent all ones: Inf (mantissa 0) or NaN.
      std::uint16_t exp = t.value.type() == dtype::bf16 ? 0x7f80 : 0x7c00;
      const auto* v = static_cast<const std::uint16_t*>(t.value.raw());
      for (std::int64_t i = 0; i < n; ++i)
        if ((v[i] & exp) == exp)
          return say(i, (v[i] & static_cast<std::uint16_t>(~exp & 0x7fff)) != 0);
    }
  }
  return std::nullopt;
}

} // namespace

caf::expected<resume_point> open_resume(const fs::path& dir, const graph_spec& g) {
  auto bad = [](std::string what) { return make_error(errc::invalid_argument, std::move(what)); };
  auto rp = find_checkpoint(dir);
  if (!rp)
    return rp;
  auto m = read_manifest(rp->folder);
  if (!m)
    return m.error();
  const auto& parts = m->parts;
  auto wanted = checkpoint_actors(g);
  std::vector<std::string> held;
  for (const auto& [actor, file] : parts)
    held.push_back(actor);
  if (!std::is_permutation(wanted.begin(), wanted.end(), held.begin(), held.end()))
    return bad(fmt::format("{}: the checkpoint has parts for {} but the graph's checkpointing actors are {}",
                           rp->folder.string(), fmt::join(held, ", "), fmt::join(wanted, ", ")));
  std::error_code ec;
  for (const auto& a : g.actors) {
    if (!parts.count(a.name))
      continue;
    auto path = rp->folder / parts.at(a.name);
    if (!fs::is_regular_file(path, ec))
      return bad(fmt::format("{}: missing (the checkpoint lists it as the part of '{}')", path.string(), a.name));
    // The header alone: complete, whose, and what it holds; the actors read the tensors.
    auto header = read_safetensors_header(path);
    if (!header)
      return bad(error_message(header.error()));
    const auto& md = header->metadata;
    auto get = [&](const std::string& k) { return md.count(k) ? md.at(k) : std::string{"missing"}; };
    if (get("actor") != a.name || get("step") != std::to_string(rp->step))
      return bad(fmt::format("{}: holds actor '{}' at step {}, expected '{}' at step {}", path.string(), get("actor"),
                             get("step"), a.name, rp->step));
    for (const auto& [k, want] : checkpoint_identity(g, a))
      if (auto have = get(k); have != want)
        return bad(fmt::format("{}: {} is {} in the checkpoint but {} in the graph", path.string(), k, have, want));
    if (a.role.check_checkpoint_part)
      if (auto why = a.role.check_checkpoint_part(g, a, *header))
        return bad(fmt::format("{}: {}", path.string(), *why));
    // The values too: NaN weights would start a run that fails steps later, blaming the learning rate.
    auto file = read_safetensors(path);
    if (!file)
      return bad(error_message(file.error()));
    if (auto why = first_non_finite(*file))
      return bad(fmt::format("{}: {}", path.string(), *why));
  }
  if (g.train.steps < rp->step)
    return bad(fmt::format("{}: the checkpoint is after step {} but train.steps is {}", rp->folder.string(), rp->step,
                           g.train.steps));
  return rp;
}

namespace {

caf::error init_error(const graph_spec& g, const std::string& what) {
  return make_error(errc::invalid_argument, fmt::format("{}: train.init: {}", to_string(g.train.init_pos), what));
}

/// The step folder train.init names, with its manifest.
caf::expected<std::pair<resume_point, manifest>> open_init(const graph_spec& g) {
  if (g.train.init_path.extension() == ".safetensors") // a weights file that is not there (init_is_weights_file)
    return init_error(g, fmt::format("{}: no such weights file", g.train.init_path.string()));
  auto rp = find_checkpoint(g.train.init_path);
  if (!rp)
    return init_error(g, error_message(rp.error()));
  auto m = read_manifest(rp->folder);
  if (!m)
    return init_error(g, error_message(m.error()));
  return std::pair{*rp, *m};
}

} // namespace

bool init_is_weights_file(const graph_spec& g) {
  std::error_code ec;
  return !g.train.init_path.empty() && std::filesystem::is_regular_file(g.train.init_path, ec);
}

caf::expected<std::filesystem::path> find_init_part(const graph_spec& g, const actor_spec& a) {
  if (init_is_weights_file(g)) {
    if (!a.role.check_init_file)
      return init_error(g, fmt::format("'{}' ({}) cannot start from a weights file", a.name, a.type));
    if (auto why = a.role.check_init_file(g, a, g.train.init_path))
      return init_error(g, fmt::format("{} (for '{}')", *why, a.name));
    return g.train.init_path;
  }
  auto opened = open_init(g);
  if (!opened)
    return opened.error();
  const auto& [rp, m] = *opened;
  auto want = checkpoint_identity(g, a);
  std::vector<std::string> order{a.name}, seen;
  for (const auto& [actor, file] : m.parts)
    if (actor != a.name)
      order.push_back(actor);
  for (const auto& actor : order) {
    auto it = m.parts.find(actor);
    if (it == m.parts.end())
      continue;
    auto path = rp.folder / it->second;
    auto header = read_safetensors_header(path);
    if (!header)
      return init_error(g, error_message(header.error()));
    const auto& md = header->metadata;
    auto get = [&](const std::string& k) { return md.count(k) ? md.at(k) : std::string{}; };
    if (!md.count("layers"))
      continue; // not a stage's part (the loader's, an optimizer shard's)
    if (std::all_of(want.begin(), want.end(), [&](const auto& kv) { return get(kv.first) == kv.second; }))
      return path;
    seen.push_back(fmt::format("{} layers {} (d_model {}, {} layers in all)", actor, get("layers"),
                               get("model.d_model"), get("model.layers")));
  }
  return init_error(g, fmt::format("{} holds no stage with layers {} of this model (d_model {}, {} layers in all); "
                                   "its stages: {}. A warm start needs the same model cut into the same stages",
                                   rp.folder.string(), want["layers"], want["model.d_model"], want["model.layers"],
                                   seen.empty() ? std::string{"none"} : fmt::format("{}", fmt::join(seen, "; "))));
}

caf::expected<init_plan> check_init(const graph_spec& g) {
  init_plan plan;
  if (init_is_weights_file(g)) {
    plan.from.folder = g.train.init_path, plan.weights_file = true;
  } else {
    auto opened = open_init(g);
    if (!opened)
      return opened.error();
    plan.from = opened->first;
  }
  for (const auto& a : g.actors) {
    if (!a.role.holds_layers)
      continue;
    auto part = find_init_part(g, a);
    if (!part)
      return part.error();
    plan.parts[a.name] = *part;
  }
  return plan;
}

} // namespace troupe
