// The data_loader actor: byte-level microbatches from the corpus, sent when the
// first stage grants credit, with validation batches at each evaluation point,
// and its corpus position in every checkpoint.
#include <charconv>
#include <optional>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/byte_corpus.hpp"
#include "runtime/messages.hpp"
#include "actors/pipeline_messages.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/trace.hpp"

namespace troupe {

namespace {

struct loader_settings {
  std::string name;
  std::filesystem::path corpus;
  int context = 0;
  double val_fraction = 0.1;
  std::uint64_t seed = 1;
  int batch = 1;
  int microbatches = 1;
  std::int64_t steps = 0;
  std::int64_t eval_every = 0;
  int eval_batches = 8;
  std::string first_stage; ///< rank 0: gets tokens
  std::string loss_stage;  ///< last rank: gets targets (may be the same actor)
  std::filesystem::path checkpoint_dir;  ///< empty: no checkpoints
  std::int64_t checkpoint_every = 0;
  std::map<std::string, std::string> identity;  ///< checkpoint_identity of this loader
  std::filesystem::path resume_folder;   ///< empty: a fresh start
  step_t resume_step = 0;
};

struct data_loader_state {
  std::optional<byte_corpus> corpus;
  caf::actor runner, first, loss;
  std::uint16_t first_id = 0xffff, loss_id = 0xffff; ///< trace ids, for counted mailbox depth
  std::int64_t sent = 0; ///< training microbatches sent so far
  std::uint64_t resume_position = 0; ///< corpus position read from the checkpoint
  bool done = false;
  std::uint16_t trace_id = 0;
  static inline const char* name = "data_loader";
};

using loader_actor = caf::stateful_actor<data_loader_state>;

/// Sends one microbatch to the first stage and, if it is another actor, the loss stage.
template <class Atom>
void deliver(loader_actor* self, Atom atom, batch_msg m) {
  auto& st = self->state;
  auto& rec = trace_recorder::global();
  if (st.loss != st.first) {
    rec.message_sent(st.loss_id);
    self->send(st.loss, atom, m);
  }
  rec.message_sent(st.first_id);
  self->send(st.first, atom, std::move(m));
}

void send_eval(loader_actor* self, const loader_settings& cfg, step_t after_step) {
  for (int k = 0; k < cfg.eval_batches; ++k) {
    token_batch b; // fresh handles: the stages hold them while we go on
    self->state.corpus->validation(k, cfg.batch, b);
    deliver(self, eval_atom::value, batch_msg{after_step, k, b.tokens, b.targets, {}});
  }
}

bool eval_due(const loader_settings& cfg, step_t step) {
  return step + 1 == cfg.steps || (cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0);
}

/// Writes the loader's part of the checkpoint after `steps` steps: the corpus
/// position once every microbatch of those steps is handed out. The epoch's
/// shuffle is a function of (seed, epoch), so the position is the whole state.
caf::error write_checkpoint(loader_actor* self, const loader_settings& cfg, step_t steps) {
  auto& st = self->state;
  auto md = cfg.identity;
  md["position"] = std::to_string(st.corpus->position());
  md["epoch"] = std::to_string(st.corpus->position() / st.corpus->train_windows());
  md["sent"] = std::to_string(st.sent);
  auto file = write_checkpoint_part(cfg.checkpoint_dir, steps, cfg.name, {}, std::move(md));
  if (!file)
    return file.error();
  self->send(st.runner, checkpoint_atom::value, checkpoint_msg{cfg.name, steps, *file});
  return {};
}

/// Reads the position to resume from; the corpus seeks there at start.
caf::error read_checkpoint(loader_actor* self, const loader_settings& cfg) {
  auto f = read_checkpoint_part(cfg.resume_folder, cfg.name, cfg.resume_step);
  if (!f)
    return f.error();
  auto file = (cfg.resume_folder / checkpoint_part_name(cfg.name)).string();
  auto number = [&](const char* key) -> std::optional<std::uint64_t> {
    auto i = f->metadata.find(key);
    if (i == f->metadata.end())
      return std::nullopt;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(i->second.data(), i->second.data() + i->second.size(), v);
    return ec == std::errc{} && end == i->second.data() + i->second.size() ? std::optional{v} : std::nullopt;
  };
  auto position = number("position");
  auto sent = number("sent");
  auto want = static_cast<std::uint64_t>(cfg.resume_step * cfg.microbatches);
  if (!position || !sent || *sent != want)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: expected 'position' and 'sent' = {} (step {} × {} microbatches) in the "
                                  "metadata",
                                  file, want, cfg.resume_step, cfg.microbatches));
  self->state.resume_position = *position;
  self->state.sent = static_cast<std::int64_t>(*sent);
  return {};
}

void report_done(loader_actor* self, const loader_settings& cfg) {
  self->state.done = true;
  run_summary sum;
  sum.actor = cfg.name;
  self->send(self->state.runner, done_atom::value, std::move(sum));
}

caf::behavior data_loader(loader_actor* self, loader_settings cfg, caf::actor runner) {
  self->state.runner = std::move(runner);
  self->state.trace_id = trace_recorder::global().register_actor(cfg.name, "data_loader");
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      for (const auto& p : m.directory) {
        auto tid = trace_recorder::global().actor_id(p.name).value_or(0xffff);
        if (p.name == cfg.first_stage)
          self->state.first = p.handle, self->state.first_id = tid;
        if (p.name == cfg.loss_stage)
          self->state.loss = p.handle, self->state.loss_id = tid;
      }
      if (!cfg.resume_folder.empty())
        if (auto err = read_checkpoint(self, cfg))
          return err;
      return caf::ok_atom::value;
    },
    [=](start_atom) {
      auto& st = self->state;
      try {
        st.corpus.emplace(cfg.corpus, cfg.context, cfg.val_fraction, cfg.seed);
      } catch (const std::exception& e) {
        self->send(st.runner, failed_atom::value, failure_msg{cfg.name, e.what()});
        return;
      }
      if (!st.first || !st.loss) {
        self->send(st.runner, failed_atom::value,
                   failure_msg{cfg.name, fmt::format("{}: no pipeline stage to feed (expected '{}' and '{}')",
                                                     cfg.name, cfg.first_stage, cfg.loss_stage)});
        return;
      }
      st.corpus->seek(st.resume_position);
      // The loss before training (or at the resumed step): a baseline for the curve.
      send_eval(self, cfg, cfg.resume_step - 1);
      if (st.sent == cfg.steps * cfg.microbatches)
        report_done(self, cfg);
    },
    [=](credit_atom, const credit_msg& c) {
      auto& st = self->state;
      for (int i = 0; i < c.count && !st.done; ++i) {
        scoped_span s(st.trace_id, span_kind::send, static_cast<std::int32_t>(st.sent / cfg.microbatches),
                      static_cast<std::int32_t>(st.sent % cfg.microbatches));
        token_batch b;
        st.corpus->next_train(cfg.batch, b);
        step_t step = st.sent / cfg.microbatches;
        auto mb = static_cast<std::int32_t>(st.sent % cfg.microbatches);
        s.get().bytes = b.tokens.nbytes() + b.targets.nbytes();
        deliver(self, forward_atom::value, batch_msg{step, mb, b.tokens, b.targets, {}});
        ++st.sent;
        if (mb + 1 == cfg.microbatches && eval_due(cfg, step))
          send_eval(self, cfg, step);
        if (mb + 1 == cfg.microbatches && checkpoint_due(step + 1, cfg.checkpoint_every, cfg.steps))
          if (auto err = write_checkpoint(self, cfg, step + 1)) {
            st.done = true;
            self->send(st.runner, failed_atom::value,
                       failure_msg{cfg.name, fmt::format("checkpoint after step {} failed: {}", step + 1,
                                                         error_message(err))});
            return;
          }
        if (st.sent == cfg.steps * cfg.microbatches)
          report_done(self, cfg);
      }
    },
  };
}

} // namespace

actor_type_info data_loader_info() {
  actor_type_info info;
  info.role.placement = actor_placement::with_first_stage;
  info.role.checkpoint_identity = [](const graph_spec& g, const actor_spec&) {
    std::error_code ec;
    auto bytes = std::filesystem::file_size(g.data.corpus_path, ec);
    return std::map<std::string, std::string>{
        {"corpus_bytes", ec ? "?" : std::to_string(bytes)},
        {"data.seed", std::to_string(g.data.seed)},
        {"data.batch", std::to_string(g.data.batch)},
        {"data.val_fraction", fmt::format("{}", g.data.val_fraction)},
        {"model.context", std::to_string(g.model.context)},
        {"pipeline.microbatches", std::to_string(g.pipeline.microbatches)}};
  };
  return info;
}

caf::expected<caf::actor> spawn_data_loader(spawn_context& ctx) {
  const auto& g = ctx.graph;
  loader_settings cfg;
  cfg.name = ctx.spec.name;
  cfg.corpus = g.data.corpus_path;
  cfg.context = g.model.context;
  cfg.val_fraction = g.data.val_fraction;
  cfg.seed = g.data.seed;
  cfg.batch = g.data.batch;
  cfg.microbatches = g.pipeline.microbatches;
  cfg.steps = g.train.steps;
  cfg.eval_every = g.train.eval_every;
  cfg.eval_batches = g.train.eval_batches;
  if (!g.checkpoint.dir_path.empty())
    cfg.checkpoint_dir = g.checkpoint.dir_path, cfg.checkpoint_every = g.checkpoint.every;
  cfg.identity = checkpoint_identity(g, ctx.spec);
  cfg.resume_folder = g.checkpoint.resume_folder;
  cfg.resume_step = g.checkpoint.resume_step;
  int last_rank = -1;
  for (const auto& a : g.actors) {
    if (!a.role.holds_layers)
      continue;
    if (a.rank == 0)
      cfg.first_stage = a.name;
    if (a.rank > last_rank)
      last_rank = a.rank, cfg.loss_stage = a.name;
  }
  return caf::actor{ctx.system.spawn(data_loader, std::move(cfg), ctx.runner)};
}

} // namespace troupe
