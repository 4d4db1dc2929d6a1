// The data_loader actor: microbatches from the graph's data source (a text
// corpus, a token file, JSON lines), sent when the first stage grants credit,
// with validation batches at each evaluation point, and its position in every checkpoint.
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <set>

#include <cstring>
#include <deque>

#include <caf/all.hpp>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"
#include "actors/builtin.hpp"
#include "actors/data/token_corpus.hpp"
#include "actors/data/tokenizer.hpp"
#include "actors/data_loader_routing.hpp"
#include "actors/skippipe_plan.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "actors/stage/pipeline_messages.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/routing/router.hpp"
#include "schedulers/routing/skippipe_routing.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

namespace {

struct loader_settings {
  std::string name;
  std::shared_ptr<const graph_spec> graph;           ///< its data source is opened at start
  document_source documents = document_source::none; ///< data.documents: batches carry masks when set
  int context = 0;
  double val_fraction = 0.1;
  std::uint64_t seed = 1;
  int batch = 1;
  int microbatches = 1;
  int replicas = 1; ///< data-parallel replicas: a step hands out replicas × microbatches
  /// data_parallel.route least_loaded: stages pick the next hop as they go, so
  /// the targets go with the tokens and stages after the first learn their hops from their senders.
  bool least_loaded = false;
  bool independent_replicas = false; ///< local-update training: each replica's step is its own (#13)
  bool stage_local_norm = false;     ///< NoLoCo's random routes: replicas share stages, reduce nothing (#13)
  int group_size = 1;                ///< local_update.replica_groups: replicas that sync every step together
  std::int64_t steps = 0;
  std::int64_t eval_every = 0;
  int eval_batches = 8;
  std::string routing = "chain";        ///< the routing policy
  sched::routing_params routing_params; ///< the stages it routes over
  std::filesystem::path checkpoint_dir; ///< empty: no checkpoints
  std::int64_t checkpoint_every = 0;
  std::map<std::string, std::string> identity; ///< checkpoint_identity of this loader
  std::filesystem::path resume_folder;         ///< empty: a fresh start
  step_t resume_step = 0;
  /// Read a round (one microbatch per replica) at a time: for attention servers,
  /// whose every stage plans the round's shards from its masks, and for a deal
  /// other than the corpus's order (#15).
  bool rounds = false;
  bool attention = false;      ///< batches carry their round's masks (batch_msg::round_documents)
  bool heaviest_first = false; ///< data.deal: heaviest_first
};

struct data_loader_state {
  std::optional<token_corpus> corpus;
  std::optional<sched::router_core> router;
  caf::actor runner;
  std::vector<caf::actor> actors;       ///< every actor of the graph, by index
  std::vector<std::uint16_t> actor_ids; ///< their trace ids, for counted mailbox depth
  std::int64_t sent = 0;                ///< training microbatches sent so far (a resumed run counts its earlier ones)
  std::uint64_t resume_position = 0;    ///< corpus position read from the checkpoint
  std::map<int, int> losses;            ///< replica -> times lost (stamped on a rejoin decision)
  bool done = false;
  std::uint16_t trace_id = 0;
  std::deque<token_batch> round; ///< the rest of the round being handed out (loader_settings::rounds)
  tensor_handle round_documents; ///< its masks, [replicas, batch, context]
  static inline const char* name = "data_loader";
};

using loader_actor = caf::stateful_actor<data_loader_state>;

template <class Atom, class Msg>
void send_to(loader_actor* self, int actor, Atom atom, Msg m) {
  auto& st = self->state;
  trace_recorder::global().message_sent(st.actor_ids.at(static_cast<std::size_t>(actor)));
  self->send(st.actors.at(static_cast<std::size_t>(actor)), atom, std::move(m));
}

/// Sends one microbatch along its route: the tokens to its first hop, the
/// targets to its last (one message when that is the same actor).
template <class Atom>
void deliver(loader_actor* self, Atom atom, batch_msg m, bool targets_with_tokens = false) {
  int head = m.route.front().actor, tail = m.route.back().actor;
  if (head != tail && !targets_with_tokens) {
    batch_msg targets{m.step, m.microbatch, {}, std::move(m.targets), m.route};
    send_to(self, tail, atom, std::move(targets));
  }
  send_to(self, head, atom, std::move(m));
}

/// The validation batches after `after_step`, the same ones along each evaluation
/// route: batch k of route v is microbatch v·eval_batches + k, so the loss stage
/// reports each route's pass on its own (SkipPipe's model with fewer layers, #14).
void send_eval(loader_actor* self, const loader_settings& cfg, step_t after_step) {
  const auto& routes = self->state.router->eval_routes();
  for (std::size_t v = 0; v < routes.size(); ++v)
    for (int k = 0; k < cfg.eval_batches; ++k) {
      token_batch b; // fresh handles: the stages hold them while we go on
      self->state.corpus->validation(k, cfg.batch * cfg.replicas, b); // the global batch, on replica 0's route
      deliver(
        self, eval_atom::value,
        batch_msg{after_step, static_cast<int>(v) * cfg.eval_batches + k, b.tokens, b.targets, routes[v], b.documents});
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
  // The tokenizer travels with the weights: `troupe sample` reads and writes the run's text with it.
  std::vector<named_handle> tensors;
  if (const auto& model = st.corpus->tokenizer_model(); !model.empty()) {
    auto bytes = tensor_handle::empty({static_cast<std::int64_t>(model.size())}, dtype::u8);
    std::copy(model.begin(), model.end(), static_cast<char*>(bytes.raw()));
    tensors.push_back({tokenizer_tensor, bytes});
  }
  auto file = write_checkpoint_part(cfg.checkpoint_dir, steps, cfg.name, tensors, std::move(md));
  if (!file)
    return file.error();
  self->send(st.runner, checkpoint_atom::value, checkpoint_msg{cfg.name, steps, *file});
  return {};
}

/// The corpus position and microbatches sent that a loader's checkpoint part
/// holds in its metadata.
struct loader_resume {
  std::uint64_t position = 0;
  std::uint64_t sent = 0;
};

/// Reads them from a part written after `step` steps of `microbatches` each
/// (all replicas' microbatches: the loader deals replicas × pipeline.microbatches a step);
/// what is wrong when they are missing or do not fit.
caf::expected<loader_resume> resume_state(const std::map<std::string, std::string>& metadata, step_t step,
                                          int microbatches) {
  auto number = [&](const char* key) -> std::optional<std::uint64_t> {
    auto i = metadata.find(key);
    if (i == metadata.end())
      return std::nullopt;
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(i->second.data(), i->second.data() + i->second.size(), v);
    return ec == std::errc{} && end == i->second.data() + i->second.size() ? std::optional{v} : std::nullopt;
  };
  auto position = number("position");
  auto sent = number("sent");
  auto want = static_cast<std::uint64_t>(step * microbatches);
  if (!position || !sent || *sent != want)
    return make_error(errc::invalid_argument,
                      fmt::format("expected 'position' and 'sent' = {} (step {} × {} microbatches) in the metadata",
                                  want, step, microbatches));
  return loader_resume{*position, *sent};
}

/// Reads the position to resume from; the corpus seeks there at start.
caf::error read_checkpoint(loader_actor* self, const loader_settings& cfg) {
  auto f = read_checkpoint_part(cfg.resume_folder, cfg.name, cfg.resume_step);
  if (!f)
    return f.error();
  auto state = resume_state(f->metadata, cfg.resume_step, cfg.microbatches * cfg.replicas);
  if (!state)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: {}", (cfg.resume_folder / checkpoint_part_name(cfg.name)).string(),
                                  error_message(state.error())));
  self->state.resume_position = state->position;
  self->state.sent = static_cast<std::int64_t>(state->sent);
  return {};
}

void report_done(loader_actor* self, const loader_settings& cfg) {
  self->state.done = true;
  run_summary sum;
  sum.actor = cfg.name;
  self->send(self->state.runner, done_atom::value, std::move(sum));
}

void fail(loader_actor* self, const loader_settings& cfg, std::string what) {
  self->state.done = true;
  self->send(self->state.runner, failed_atom::value, failure_msg{cfg.name, std::move(what)});
}

/// Causal attention pairs of one sequence: Σ L(L+1)/2 over its documents.
std::int64_t sequence_pairs(const std::int32_t* doc_start, int context) {
  std::int64_t pairs = 0;
  for (int i = 0; i < context; ++i)
    pairs += i - (doc_start ? doc_start[i] : 0) + 1;
  return pairs;
}

/// Reads the next round: one microbatch per replica, in replica order. With
/// heaviest_first its sequences are dealt again by attention pairs, the heaviest
/// to replica 0; every document mask of the round goes into round_documents.
void read_round(data_loader_state& st, const loader_settings& cfg) {
  const int R = cfg.replicas, B = cfg.batch, T = cfg.context;
  std::vector<token_batch> in(static_cast<std::size_t>(R));
  for (auto& b : in)
    st.corpus->next_train(B, b);
  const bool docs = in[0].documents.defined();
  if (cfg.heaviest_first) {
    struct row {
      std::int64_t pairs;
      int batch, index;
    };
    std::vector<row> rows;
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < B; ++i)
        rows.push_back({docs ? sequence_pairs(in[std::size_t(r)].documents.data<std::int32_t>() + i * T, T)
                             : sequence_pairs(nullptr, T),
                        r, i});
    std::stable_sort(rows.begin(), rows.end(), [](const row& a, const row& b) { return a.pairs > b.pairs; });
    std::vector<token_batch> out(in.size());
    auto copy_row = [&](const tensor_handle& from, int i, tensor_handle& to, int j) {
      std::memcpy(to.data<std::int32_t>() + j * T, from.data<std::int32_t>() + i * T,
                  sizeof(std::int32_t) * std::size_t(T));
    };
    for (int r = 0; r < R; ++r) {
      auto& o = out[std::size_t(r)];
      o.tokens = tensor_handle::empty({B, T}, dtype::i32);
      o.targets = tensor_handle::empty({B, T}, dtype::i32);
      if (docs)
        o.documents = tensor_handle::empty({B, T}, dtype::i32);
      for (int j = 0; j < B; ++j) {
        const auto& w = rows[std::size_t(r * B + j)];
        const auto& src = in[std::size_t(w.batch)];
        copy_row(src.tokens, w.index, o.tokens, j);
        copy_row(src.targets, w.index, o.targets, j);
        if (docs)
          copy_row(src.documents, w.index, o.documents, j);
      }
    }
    in = std::move(out);
  }
  st.round_documents = {};
  if (cfg.attention) { // without documents each sequence is one: every token's document starts at 0
    st.round_documents = tensor_handle::zeros({R, B, T}, dtype::i32);
    if (docs)
      for (int r = 0; r < R; ++r)
        std::memcpy(st.round_documents.data<std::int32_t>() + std::int64_t(r) * B * T,
                    in[std::size_t(r)].documents.data<std::int32_t>(), sizeof(std::int32_t) * std::size_t(B * T));
  }
  for (auto& b : in)
    st.round.push_back(std::move(b));
}

/// Makes and sends every microbatch the receivers' credits allow, with each
/// step's plans before its first microbatch, evaluation after the steps that
/// call for it, and this loader's checkpoint part when one is due.
void pump(loader_actor* self, const loader_settings& cfg) {
  auto& st = self->state;
  while (!st.done) {
    auto e = st.router->next();
    if (!e) {
      if (st.router->done()) // the last microbatches were a lost replica's
        report_done(self, cfg);
      return;
    }
    for (const auto& [actor, plan] : e->plans)
      send_to(self, actor, plan_atom::value, plan);
    scoped_span s(st.trace_id, span_kind::send, static_cast<std::int32_t>(e->step), e->microbatch);
    token_batch b;
    if (cfg.rounds) {
      if (st.round.empty())
        read_round(st, cfg);
      b = std::move(st.round.front());
      st.round.pop_front();
    } else {
      st.corpus->next_train(cfg.batch, b);
    }
    s.get().bytes = b.tokens.nbytes() + b.targets.nbytes();
    deliver(
      self, forward_atom::value,
      batch_msg{e->step, e->microbatch, b.tokens, b.targets, std::move(e->route), b.documents, st.round_documents},
      cfg.least_loaded);
    ++st.sent;
    bool step_end = e->step_end;
    if (step_end && eval_due(cfg, e->step))
      send_eval(self, cfg, e->step);
    if (step_end && checkpoint_due(e->step + 1, cfg.checkpoint_every, cfg.steps))
      if (auto err = write_checkpoint(self, cfg, e->step + 1)) {
        fail(self, cfg, fmt::format("checkpoint after step {} failed: {}", e->step + 1, error_message(err)));
        return;
      }
    if (st.router->done())
      report_done(self, cfg);
  }
}

/// A lost replica's node is back (#26): the loader picks the step it rejoins
/// at (the first, two steps past the one being dealt, after which no exchange
/// is under way), and the live replica it takes its state from (the lowest);
/// tells that replica's stages and sync actors and every live sync actor; and
/// deals the replica's microbatches again from that step. The decision goes to
/// the runner, which tells the launch.
void on_back(loader_actor* self, const loader_settings& cfg, int replica) {
  auto& st = self->state;
  const auto& g = *cfg.graph;
  rejoin_msg decision{replica, -1, -1, -1, st.losses[replica]};
  std::string why;
  const auto* method = sched::find_sync_method(g.local_update.algorithm);
  const bool ddp = g.elastic_ddp(); // its buckets are summed within each step: any later step will do
  if (!st.router || st.done || st.router->done())
    why = "the run's last step is being dealt";
  else if (!ddp && (!method || !method->rejoins))
    why = fmt::format("local_update.algorithm '{}' cannot take a replica back", g.local_update.algorithm);
  else if (st.router->in_run(replica))
    why = fmt::format("replica {} is in the run", replica);
  else {
    // Two past the step being dealt: that one's plans may be out, and the step after it is not yet.
    auto first = st.router->step() + 2;
    decision.steps = ddp ? (first < g.train.steps ? first : -1)
                         : sched::first_quiet_step(*method, g.local_update, first, g.train.steps);
    for (int r = 0; r < std::max(g.data_parallel.replicas, 1) && decision.donor < 0; ++r)
      if (r != replica && st.router->in_run(r))
        decision.donor = r;
    if (decision.steps < 0)
      why = "no step is left after which no exchange is under way";
  }
  if (!why.empty()) {
    decision.steps = -1;
    self->send(st.runner, rejoin_atom::value, decision, why);
    return;
  }
  st.router->add_replica(replica, decision.steps);
  auto index = [&](const actor_spec& a) { return g.index_of(a.name); };
  auto counterpart = [&](const actor_spec& a, int r) -> const actor_spec* { // replica r's stage with a's layers
    for (const auto& b : g.actors)
      if (b.role.holds_layers && b.replica == r && b.layers == a.layers)
        return &b;
    return nullptr;
  };
  const bool routed = g.elastic_least_loaded(); // every live stage routes to the joiner's again from its step
  for (const auto& a : g.actors) {
    if (a.role.holds_layers && a.replica == replica) // the donor's stage sends it its state
      if (const auto* d = counterpart(a, decision.donor))
        send_to(self, index(*d), rejoin_atom::value,
                rejoin_msg{replica, decision.steps, decision.donor, index(a), decision.losses});
    if (routed && a.role.holds_layers && a.replica != replica && a.replica != decision.donor &&
        st.router->in_run(a.replica))
      send_to(self, index(a), rejoin_atom::value,
              rejoin_msg{replica, decision.steps, decision.donor, -1, decision.losses});
    // Every live replica's sync actors (DDP: all-reduce peers) take it back.
    const auto* stage = a.type == (ddp ? every_step_sync_type(g) : "outer_sync") ? g.served_stage(a) : nullptr;
    if (!stage || stage->replica == replica || !st.router->in_run(stage->replica))
      continue;
    int to =
      -1; // the donor's sync actor sends the joiner's its state (a DDP peer keeps none; ZeRO's shards find the joiner's)
    if (stage->replica == decision.donor && !ddp)
      if (const auto* j = counterpart(*stage, replica))
        to = helper_of(g, "outer_sync", j->name);
    send_to(self, index(a), rejoin_atom::value,
            rejoin_msg{replica, decision.steps, decision.donor, to, decision.losses});
  }
  self->send(st.runner, rejoin_atom::value, decision, std::string{});
  pump(self, cfg);
}

caf::behavior data_loader(loader_actor* self, loader_settings cfg, caf::actor runner, std::uint16_t trace_id) {
  self->state.runner = std::move(runner);
  self->state.trace_id = trace_id;
  return {
    [=](connect_atom, const connect_msg& m) -> caf::result<caf::ok_atom> {
      for (const auto& p : m.directory) {
        self->state.actors.push_back(p.handle);
        self->state.actor_ids.push_back(trace_recorder::global().actor_id(p.name).value_or(0xffff));
      }
      if (!cfg.resume_folder.empty())
        if (auto err = read_checkpoint(self, cfg))
          return err;
      auto policy = make_loader_routing(cfg.routing, cfg.routing_params);
      if (!policy)
        return make_error(errc::invalid_argument, fmt::format("{}: {}", cfg.name, policy.error().message));
      sched::router_config rc;
      for (const auto& s : cfg.routing_params.stages)
        rc.stage_actors.push_back(s.actor);
      rc.microbatches = cfg.microbatches, rc.steps = cfg.steps, rc.first_step = cfg.resume_step;
      rc.replicas = cfg.replicas;
      if (cfg.least_loaded) {
        rc.targets_with_tokens = true;
        for (const auto& s : cfg.routing_params.stages)
          if (s.chunks.front().first != 0)
            rc.hops_from_messages.push_back(s.actor);
      }
      rc.independent_replicas = cfg.independent_replicas;
      rc.group_size = cfg.group_size;
      rc.replica_norms = cfg.graph->elastic_ddp();
      rc.redeal = (cfg.independent_replicas || rc.replica_norms) && cfg.graph->keeps_batch_on_loss();
      rc.stage_local_norm = cfg.stage_local_norm;
      if (cfg.stage_local_norm)
        rc.norm_pairs = tied_norm_pairs(*cfg.graph);
      rc.across_replicas = cfg.routing == skippipe_routing;
      rc.tokens_per_microbatch = static_cast<std::int64_t>(cfg.batch) * cfg.context;
      self->state.router.emplace(std::move(rc), std::move(*policy));
      return caf::ok_atom::value;
    },
    [=](replica_lost_atom, std::int32_t replica) { // elastic local-update training: go on without it
      auto& st = self->state;
      if (!st.router || st.done)
        return;
      ++st.losses[replica];
      try {
        st.router->drop_replica(replica);
      } catch (const std::exception& e) {
        fail(self, cfg, e.what());
        return;
      }
      if (st.corpus)
        pump(self, cfg); // a microbatch may have waited on the lost replica's credits
    },
    [=](replica_back_atom, std::int32_t replica) {
      try {
        on_back(self, cfg, replica);
      } catch (const std::exception& e) {
        fail(self, cfg, e.what());
      }
    },
    [=](start_atom) {
      auto& st = self->state;
      try {
        st.corpus.emplace(open_data_source(*cfg.graph), cfg.context, cfg.val_fraction, cfg.seed);
        st.corpus->set_documents(cfg.documents);
      } catch (const std::exception& e) {
        fail(self, cfg, fmt::format("{}: {}", cfg.graph->data.corpus_path.string(), e.what()));
        return;
      }
      st.corpus->seek(st.resume_position);
      // The loss before training (or at the resumed step): a baseline for the curve.
      send_eval(self, cfg, cfg.resume_step - 1);
      if (st.router->done())
        report_done(self, cfg);
      pump(self, cfg); // credits that came before the start
    },
    [=](credit_atom, const credit_msg& c) {
      auto& st = self->state;
      handler_scope busy(st.trace_id, "credit");
      st.router->grant(c.from, c.count);
      if (st.corpus)
        pump(self, cfg);
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
    std::map<std::string, std::string> id{{"corpus_bytes", ec ? "?" : std::to_string(bytes)},
                                          {"data.seed", std::to_string(g.data.seed)},
                                          {"data.batch", std::to_string(g.data.batch)},
                                          {"data.val_fraction", fmt::format("{}", g.data.val_fraction)},
                                          {"model.context", std::to_string(g.model.context)},
                                          {"pipeline.microbatches", std::to_string(g.pipeline.microbatches)}};
    if (g.data.documents != "none") // other masks, another run
      id["data.documents"] = g.data.documents;
    if (g.data.source != "text") // other tokens, another run
      id["data.source"] = g.data.source;
    for (const auto& [key, value] : g.data.options)
      id["data." + key] = value;
    if (g.data_parallel.replicas > 1) // a step hands out replicas × microbatches
      id["data_parallel.replicas"] = std::to_string(g.data_parallel.replicas);
    return id;
  };
  info.role.check_checkpoint_part = [](const graph_spec& g, const actor_spec&,
                                       const safetensors_header& part) -> std::optional<std::string> {
    // The part's "step" is checked against the checkpoint's before this is asked.
    auto step = part.metadata.count("step") ? std::atoll(part.metadata.at("step").c_str()) : 0;
    if (auto state = resume_state(part.metadata, step, g.pipeline.microbatches * std::max(1, g.data_parallel.replicas));
        !state)
      return error_message(state.error());
    return std::nullopt;
  };
  info.check = [](const actor_spec& a, const graph_spec& g, diagnostics& out) {
    bool written = !g.pipeline.routing_pos.file.empty() || !g.pipeline.routing_pos.origin.empty();
    if (g.skip_runs() && !check_skip_run(g, out))
      return;
    if (auto what = check_routes(g, a))
      out.push_back({written ? g.pipeline.routing_pos : a.pos, written ? "pipeline.routing" : "channels", *what});
    // Document masks reach CPU stages only (actors/stage/cuda/stage_model_cuda.cpp refuses them).
    if (g.data.documents != "none")
      for (const auto& s : g.actors)
        if (s.role.holds_layers && s.device.starts_with("cuda")) {
          out.push_back({g.where("data.documents"), "data.documents",
                         fmt::format("'{}' needs CPU stages, but '{}' runs on {} (CUDA stages do not take "
                                     "document masks yet)",
                                     g.data.documents, s.name, s.device)});
          break;
        }
  };
  return info;
}

caf::expected<caf::actor> spawn_data_loader(spawn_context& ctx) {
  const auto& g = ctx.graph;
  loader_settings cfg;
  cfg.name = ctx.spec.name;
  cfg.graph = std::make_shared<const graph_spec>(g);
  cfg.documents = parse_document_source(g.data.documents).value_or(document_source::none); // checked at load
  cfg.context = g.model.context;
  cfg.val_fraction = g.data.val_fraction;
  cfg.seed = g.data.seed;
  cfg.batch = g.data.batch;
  cfg.microbatches = g.pipeline.microbatches;
  cfg.replicas = std::max(g.data_parallel.replicas, 1);
  cfg.least_loaded = cfg.replicas > 1 && g.data_parallel.route == "least_loaded";
  cfg.stage_local_norm = method_routes_across(g);
  cfg.independent_replicas = g.local_update.present && !cfg.stage_local_norm;
  cfg.group_size = g.sync_group_size();
  cfg.steps = g.train.steps;
  cfg.eval_every = g.train.eval_every;
  cfg.eval_batches = g.train.eval_batches;
  if (!g.checkpoint.dir_path.empty())
    cfg.checkpoint_dir = g.checkpoint.dir_path, cfg.checkpoint_every = g.checkpoint.every;
  cfg.identity = checkpoint_identity(g, ctx.spec);
  cfg.resume_folder = g.checkpoint.resume_folder;
  cfg.resume_step = g.checkpoint.resume_step;
  if (auto d = skippipe_not_runnable(g)) // plannable (troupe plan paths), yet not runnable
    return make_error(errc::invalid_argument, to_string(*d));
  cfg.attention = g.attention.present;
  cfg.heaviest_first = g.data.deal == "heaviest_first";
  // A round is one microbatch of every replica, read together: attention servers
  // plan each round over all its masks (the router emits replica by replica, so
  // local-update replicas' rounds line up too), and heaviest_first deals it. A
  // local-update run without servers reads per microbatch: a replica that
  // leaves the run (local_update_kill) would leave its share of a round unread.
  cfg.rounds = cfg.attention || (cfg.heaviest_first && !g.local_update.present);
  cfg.routing = routing_of(g);
  cfg.routing_params = routing_params_of(g);
  if (auto what = check_routes(g, ctx.spec)) // checked at load too; here for graphs built in code
    return make_error(errc::invalid_argument, fmt::format("{}: {}", cfg.name, *what));
  // Named in the trace before it runs, as every actor of the graph is (see pipeline_stage.cpp).
  auto trace_id = trace_recorder::global().register_actor(cfg.name, "data_loader");
  return caf::actor{ctx.system.spawn(data_loader, std::move(cfg), ctx.runner, trace_id)};
}

} // namespace troupe
