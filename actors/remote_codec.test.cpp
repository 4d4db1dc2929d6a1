// What goes on the wire for a tensor: a CPU tensor's own bytes, and for a
// device tensor a host copy taken once the work writing it is done; every kind
// of the data table round trips, and a damaged frame is refused, never a crash.
#include "actors/remote_codec.hpp"

#include <cstring>

#include <doctest/doctest.h>

#include <caf/all.hpp>

#include "runtime/actor/actor_system.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/tensor/testing_fake_device.hpp"
#include "tests/wire_fuzz.hpp"

using namespace troupe;

TEST_CASE("a device activation or gradient crosses processes as a host copy taken after its fence") {
  auto& fake_gpu = testing::fake_cuda_device();
  auto act = tensor_handle::empty({2, 3, 4}, dtype::bf16, device::cuda(0));
  for (int i = 0; i < 24; ++i)
    act.data<std::uint16_t>()[i] = static_cast<std::uint16_t>(7 * i);
  auto fence = std::make_shared<testing::counting_fence>();

  auto f = remote::encode(3, forward_atom{}, activation_msg{5, 1, 2, act, {}, fence, {}});
  CHECK(fence->waits == 1);
  CHECK(fake_gpu.copies == 1);
  REQUIRE(f.blobs.size() == 1);
  CHECK(f.blobs[0].device() == device::cpu());
  CHECK(f.blobs[0].nbytes() == act.nbytes());
  CHECK(std::memcmp(f.blobs[0].raw(), act.raw(), act.nbytes()) == 0);

  auto g = remote::encode(3, backward_atom{}, gradient_msg{5, 1, 0, act, {}, fence});
  CHECK(fence->waits == 2);
  REQUIRE(g.blobs.size() == 1);
  CHECK(g.blobs[0].device() == device::cpu());

  // A CPU tensor goes as it is: its own bytes, no copy, no wait.
  auto host = tensor_handle::zeros({2, 3, 4});
  auto h = remote::encode(3, eval_atom{}, activation_msg{5, 1, 2, host, {}, nullptr, {}});
  REQUIRE(h.blobs.size() == 1);
  CHECK(h.blobs[0].same_bytes(host));
  CHECK(fake_gpu.copies == 2);
}

TEST_CASE("a document mask crosses processes with its batch and with each activation") {
  auto docs = tensor_handle::empty({2, 4}, dtype::i32);
  for (int i = 0; i < 8; ++i)
    docs.data<std::int32_t>()[i] = i % 4 < 2 ? 0 : 2;
  auto tokens = tensor_handle::zeros({2, 4}, dtype::i32);
  auto b = remote::encode(1, forward_atom{}, batch_msg{0, 0, tokens, {}, route_t{{1, 0}}, docs});
  REQUIRE(b.blobs.size() == 2);
  CHECK(b.blobs[1].same_bytes(docs));
  auto a =
    remote::encode(1, forward_atom{}, activation_msg{0, 0, 1, tensor_handle::zeros({2, 4, 3}), {}, nullptr, docs});
  REQUIRE(a.blobs.size() == 2);
  CHECK(a.blobs[1].same_bytes(docs));
  // Without documents nothing more is sent.
  CHECK(remote::encode(1, forward_atom{}, batch_msg{0, 0, tokens, {}, route_t{{1, 0}}}).blobs.size() == 1);
}

TEST_CASE("a replica's pseudo-gradient crosses processes intact, and a forged one is refused") {
  outer_part_msg m;
  m.step = 11, m.fragment = 1, m.replica = 3, m.round = 1, m.piece = 2, m.format = 2, m.values = 5, m.cols = 5;
  m.data = {1, 2, 250, 4, 5};
  m.scales = {0.5f, -2.25f};
  auto f = remote::encode(7, outer_part_atom{}, m);
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  CHECK(
    !remote::deliver(std::move(f), [&](std::uint16_t dest) { return dest == 7 ? caf::actor{self} : caf::actor{}; }));
  bool got = false;
  self->receive([&](outer_part_atom, const outer_part_msg& x) {
    got = true;
    CHECK(x.step == 11);
    CHECK(x.fragment == 1);
    CHECK(x.replica == 3);
    CHECK(x.round == 1);
    CHECK(x.piece == 2);
    CHECK(x.format == 2);
    CHECK(x.values == 5);
    CHECK(x.cols == 5);
    CHECK(x.data == m.data);
    CHECK(x.scales == m.scales);
  });
  CHECK(got);
  // Scales that are not f32 values: malformed, never delivered.
  auto bad = remote::encode(7, outer_part_atom{}, m);
  bad.blobs[1] = tensor_handle::zeros({2}, dtype::u8);                       // sized right, so the dtype is what fails
  bad.meta[bad.meta.size() - 1 - 8 - 1] = static_cast<std::byte>(dtype::u8); // the scales' dtype byte
  auto err = remote::deliver(std::move(bad), [&](std::uint16_t) { return caf::actor{self}; });
  CHECK(is_error(err, errc::malformed_frame));
  CHECK(error_message(err).starts_with("a list of f32 sent as u8 [2] (in outer_part_msg, at byte"));
}

TEST_CASE("an f32 part (no scales) and an empty chunk cross processes too") {
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  for (std::size_t n : {std::size_t{0}, std::size_t{8}}) {
    outer_part_msg m;
    m.step = 4, m.fragment = 0, m.replica = 1, m.round = 0, m.piece = 3, m.format = 0;
    m.values = static_cast<std::int64_t>(n / 4), m.cols = 1024;
    m.data.assign(n, 7);
    CHECK(!remote::deliver(remote::encode(2, outer_part_atom{}, m),
                           [&](std::uint16_t dest) { return dest == 2 ? caf::actor{self} : caf::actor{}; }));
    self->receive([&](outer_part_atom, const outer_part_msg& x) {
      CHECK(x.data == m.data);
      CHECK(x.scales.empty());
      CHECK(x.piece == 3);
    });
  }
}

TEST_CASE("a core-attention task and its answer cross processes with every field, and a round's masks with a batch") {
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto local = [&](std::uint16_t dest) { return dest == 4 ? caf::actor{self} : caf::actor{}; };
  auto filled = [](std::initializer_list<std::int64_t> shape, float base) {
    auto t = tensor_handle::empty(shape);
    for (long i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = base + static_cast<float>(i);
    return t;
  };
  attention_key key{9, 3, 5, 1, 0, 2, 7, true};
  attention_task_msg task{key, 4, {}, {}, {}, filled({3, 8}, 0.5f)};
  CHECK(!remote::deliver(remote::encode(4, attention_atom{}, task), local));
  self->receive([&](attention_atom, const attention_task_msg& x) {
    CHECK(x.key.step == 9);
    CHECK(x.key.from == 3);
    CHECK(x.key.microbatch == 5);
    CHECK(x.key.nano == 1);
    CHECK(x.key.layer == 2);
    CHECK(x.key.shard == 7);
    CHECK(x.key.backward);
    CHECK(x.heads == 4);
    CHECK(!x.q.defined());
    REQUIRE(x.dout.defined());
    CHECK(x.dout.same_bytes(task.dout));
  });
  attention_result_msg answer{key, {}, filled({3, 8}, 1), filled({6, 8}, 2), filled({6, 8}, 3)};
  CHECK(!remote::deliver(remote::encode(4, attention_atom{}, answer), local));
  self->receive([&](attention_atom, const attention_result_msg& x) {
    CHECK(x.key.shard == 7);
    CHECK(!x.out.defined());
    CHECK(x.dq.same_bytes(answer.dq));
    CHECK(x.dk.same_bytes(answer.dk));
    CHECK(x.dv.same_bytes(answer.dv));
  });
  auto round = tensor_handle::zeros({2, 1, 4}, dtype::i32);
  batch_msg b{0, 0, tensor_handle::zeros({1, 4}, dtype::i32), {}, route_t{{4, 0}}, {}, round};
  CHECK(!remote::deliver(remote::encode(4, forward_atom{}, b), local));
  self->receive([&](forward_atom, const batch_msg& x) { CHECK(x.round_documents.same_bytes(round)); });
}

TEST_CASE("every data frame kind round trips, and each damaged copy is refused or read, never a crash") {
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  auto sink = sys.spawn([](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::drop);
    return {[](start_atom) {}};
  });
  auto local = [&](std::uint16_t dest) { return dest == 4 ? sink : caf::actor{}; };
  int kinds = 0;
  remote::data_table::for_each([&]<class Entry>(Entry) {
    ++kinds;
    CAPTURE(Entry::tag);
    auto good =
      std::apply([](const auto&... xs) { return remote::encode(4, xs...); }, testing::sample<typename Entry::values>());
    CHECK(good.kind == Entry::tag);
    std::uint16_t dest = 0;
    typename Entry::values again{};
    REQUIRE(!wire::read(good, dest, again));
    CHECK(dest == 4);
    auto re = std::apply([](const auto&... xs) { return remote::encode(4, xs...); }, again);
    CHECK(testing::bytes_of(re) == testing::bytes_of(good));
    CHECK(!remote::deliver(std::move(re), local));
    for (auto& d : testing::damage(good)) {
      CAPTURE(d.how);
      auto err = remote::deliver(std::move(d.f), local);
      if (d.must_fail)
        CHECK(is_error(err, errc::malformed_frame));
    }
  });
  CHECK(kinds == 18);
  auto stray = remote::encode(9, credit_atom{}, credit_msg{});
  CHECK(error_message(remote::deliver(std::move(stray), local)) == "no actor 9 on this node");
  auto unknown = remote::encode(4, credit_atom{}, credit_msg{});
  unknown.kind = 99;
  CHECK(error_message(remote::deliver(std::move(unknown), local)) == "unknown data frame kind 99");
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

TEST_CASE("a live replica's state crosses processes as one blob and comes back tensor for tensor") {
  troupe_config cfg{runtime_options{}};
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  safetensors_file f;
  auto weights = tensor_handle::empty({3, 4});
  for (long i = 0; i < weights.numel(); ++i)
    weights.data<float>()[i] = 0.25f * static_cast<float>(i);
  auto counts = tensor_handle::empty({5}, dtype::i32);
  for (int i = 0; i < 5; ++i)
    counts.data<std::int32_t>()[i] = 7 - i;
  f.tensors = {{"layer.weight", weights}, {"counts", counts}, {"scalar", tensor_handle::zeros({})}};
  f.metadata = {{"optimizer.steps", "12"}, {"outer.performed", "3"}};
  auto m = to_state_msg(12, 2, f);
  weights.data<float>()[0] = 99.0f; // the message holds a copy: the donor trains on
  auto local = [&](std::uint16_t dest) { return dest == 4 ? caf::actor{self} : caf::actor{}; };
  CHECK(!remote::deliver(remote::encode(4, state_atom{}, m), local));
  self->receive([&](state_atom, const state_msg& x) {
    CHECK(x.steps == 12);
    CHECK(x.replica == 2);
    auto back = state_file(x);
    REQUIRE(back.tensors.size() == 3);
    CHECK(back.tensors[0].name == "layer.weight");
    CHECK(back.tensors[0].value.shape() == shape_t{3, 4});
    CHECK(back.tensors[0].value.data<float>()[0] == 0.0f);
    CHECK(back.tensors[0].value.data<float>()[11] == 2.75f);
    CHECK(back.tensors[1].value.type() == dtype::i32);
    CHECK(back.tensors[1].value.data<std::int32_t>()[4] == 3);
    CHECK(back.tensors[2].value.rank() == 0);
    CHECK(back.metadata == f.metadata);
  });
  auto short_blob = m;
  short_blob.bytes = tensor_handle::empty({10}, dtype::u8);
  CHECK_THROWS_WITH_AS(state_file(short_blob), doctest::Contains("runs past the 10 bytes"), std::invalid_argument);
  auto bad_type = m;
  bad_type.types[1] = 42;
  CHECK_THROWS_WITH_AS(state_file(bad_type), doctest::Contains("dtype code 42"), std::invalid_argument);
}
