// The wire form derived from inspect(): a field added to a message's inspect()
// travels with no codec change, sizes come from the same walk, and a damaged
// frame is an error that says what and where, never a crash.
#include "runtime/transport/wire.hpp"

#include <cstring>

#include <doctest/doctest.h>

#include "runtime/actor/errors.hpp"
#include "tests/wire_fuzz.hpp"

using namespace troupe;

namespace probe {

enum class colour : std::uint8_t { red, green, blue };

struct point {
  std::int32_t x = 0, y = 0;
};

/// A message as first written.
struct reading {
  std::int64_t step = 0;
  std::string name;
  std::vector<point> points;
  tensor_handle values;
};

/// The same message after a change that adds fields (a nested list, a list
/// of floats, an enum, a flag): only its struct and inspect() differ.
struct reading_grown {
  std::int64_t step = 0;
  std::string name;
  std::vector<point> points;
  tensor_handle values;
  std::vector<float> weights;
  std::vector<double> history;
  colour tint = colour::red;
  bool last = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, point& x) {
  return f(caf::meta::type_name("point"), x.x, x.y, caf::meta::load_callback([&] {
             return x.x >= 0 ? caf::error{} : make_error(errc::malformed_frame, "a point left of 0");
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reading& x) {
  return f(caf::meta::type_name("reading"), x.step, x.name, x.points, x.values);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reading_grown& x) {
  return f(caf::meta::type_name("reading_grown"), x.step, x.name, x.points, x.values, x.weights, x.history, x.tint,
           x.last);
}

using table = wire::table<wire::entry<7, reading>, wire::entry<8, reading_grown>>;

} // namespace probe

namespace {

template <class T>
std::string what(const caf::expected<T>& x) {
  return x ? std::string{"no error"} : error_message(x.error());
}

} // namespace

TEST_CASE("a field added to a message's inspect() crosses processes with no change to the codec") {
  probe::reading_grown m;
  m.step = 12, m.name = "r0s1", m.points = {{1, 2}, {3, 4}};
  m.values = tensor_handle::empty({2, 2});
  for (int i = 0; i < 4; ++i)
    m.values.data<float>()[i] = 0.25f * static_cast<float>(i);
  m.weights = {1.5f, -2.0f, 3.25f};
  m.history = {0.5, 0.25};
  m.tint = probe::colour::blue, m.last = true;
  auto f = wire::encode<probe::table>(m);
  CHECK(f.kind == 8);
  auto got = wire::decode<probe::table, probe::reading_grown>(f);
  REQUIRE(got);
  CHECK(got->step == 12);
  CHECK(got->name == "r0s1");
  REQUIRE(got->points.size() == 2);
  CHECK(got->points[1].y == 4);
  CHECK(got->values.same_bytes(f.blobs[0]));
  CHECK(got->values.data<float>()[3] == 0.75f);
  CHECK(got->weights == m.weights);
  CHECK(got->history == m.history);
  CHECK(got->tint == probe::colour::blue);
  CHECK(got->last);
  // The size walk is the same walk: the grown message is the old one plus its new fields.
  probe::reading old{m.step, m.name, m.points, m.values};
  auto grown = wire::size_of(m), before = wire::size_of(old);
  CHECK(grown.meta == before.meta + (1 + 2 + 8) + (4 + 2 * 8) + 1 + 1); // weights as a tensor, history inline
  CHECK(grown.blobs == before.blobs + 1);
  CHECK(f.meta.size() == grown.meta);
  CHECK(f.blobs.size() == grown.blobs);
}

TEST_CASE("a list of floats travels as one tensor payload, and small sizes come from the same description") {
  probe::reading_grown m;
  m.weights.assign(1 << 20, 0.5f); // 4 MiB: past meta's 1 MiB, so it must go as a blob
  auto f = wire::encode<probe::table>(m);
  CHECK(f.meta.size() < 64);
  REQUIRE(f.blobs.size() == 1);
  CHECK(f.blobs[0].nbytes() == m.weights.size() * sizeof(float));
  CHECK(wire::min_size<probe::point>() == 8);
  CHECK(wire::min_size<probe::reading>() == 8 + 4 + 4 + 1);
}

TEST_CASE("a damaged frame is an error that says what went wrong and where") {
  probe::reading m{3, "ab", {{1, 2}, {3, 4}}, {}};
  auto f = wire::encode<probe::table>(m);
  auto cut = f;
  cut.meta.resize(cut.meta.size() - 3); // into the second point's y: fewer bytes than two points take
  CHECK(what(wire::decode<probe::table, probe::reading>(cut)) ==
        "a count larger than the message (in reading, at byte 18)");
  cut.meta.resize(cut.meta.size() + 2); // only the tensor's flag missing
  CHECK(what(wire::decode<probe::table, probe::reading>(cut)) == "truncated message (in reading, at byte 34)");
  auto left = f;
  std::int32_t minus = -5;
  std::memcpy(left.meta.data() + 8 + 4 + 2 + 4, &minus, 4); // the first point's x
  CHECK(what(wire::decode<probe::table, probe::reading>(left)) ==
        "a point left of 0 (in reading > point[0], at byte 26)");
  auto forged = f;
  forged.meta[8 + 4 + 2] = std::byte{0xff}; // the point count's low byte: 255 points in 17 bytes
  CHECK(what(wire::decode<probe::table, probe::reading>(forged)) ==
        "a count larger than the message (in reading, at byte 18)");
  CHECK(what(wire::decode<probe::table, probe::reading_grown>(f)) == "expected frame kind 8, got 7");
  auto longer = f;
  longer.meta.push_back(std::byte{0});
  CHECK(what(wire::decode<probe::table, probe::reading>(longer)) == "1 unexpected trailing bytes (at byte 35)");
  auto extra = f;
  extra.blobs.push_back(tensor_handle::zeros({4}, dtype::u8));
  CHECK(what(wire::decode<probe::table, probe::reading>(extra)) == "1 tensor payloads for 0 tensors (at byte 35)");
}

TEST_CASE("a list of floats sent as another dtype, and a flag of 2, are refused") {
  probe::reading_grown m;
  m.weights = {1.0f, 2.0f};
  auto f = wire::encode<probe::table>(m);
  // weights' header: defined, dtype, rank, then one i64 dimension.
  auto at = f.meta.size() - (4 + 0) - 1 - 1 - 8 - 1 - 1;
  REQUIRE(std::to_integer<int>(f.meta[at]) == static_cast<int>(dtype::f32));
  f.meta[at] = std::byte{static_cast<std::uint8_t>(dtype::i32)};
  CHECK(what(wire::decode<probe::table, probe::reading_grown>(f)).starts_with("a list of f32 sent as i32 [2]"));
  auto flag = wire::encode<probe::table>(m);
  flag.meta.back() = std::byte{2};
  CHECK(what(wire::decode<probe::table, probe::reading_grown>(flag)).starts_with("a flag of 2 (expected 0 or 1)"));
}

TEST_CASE("every truncated or garbled copy of a frame is refused or read, never a crash") {
  auto m = testing::sample<probe::reading_grown>();
  auto good = wire::encode<probe::table>(m);
  auto again = wire::decode<probe::table, probe::reading_grown>(good);
  REQUIRE(again);
  CHECK(testing::bytes_of(wire::encode<probe::table>(*again)) == testing::bytes_of(good));
  int refused = 0;
  for (auto& d : testing::damage(good)) {
    CAPTURE(d.how);
    auto got = wire::decode<probe::table, probe::reading_grown>(d.f);
    if (d.must_fail)
      CHECK(!got);
    if (!got) {
      ++refused;
      CHECK(is_error(got.error(), errc::malformed_frame));
    }
  }
  CHECK(refused > 0);
}
