// One binary form for every message that crosses processes, derived from the
// message's CAF inspect(): encode, decode and size all walk the same field list.
// A reader checks every length against what is left and answers an error value.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/actor.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/meta/annotation.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/save_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/tensor/tensor_handle.hpp"
#include "runtime/transport/transport.hpp"

// What a field of each type becomes (in `meta` unless said otherwise):
//   bool                       u8, 0 or 1
//   integers, f32, f64         their bytes, little-endian
//   enums                      their underlying integer
//   std::string                u32 length, the bytes
//   tensor_handle              u8 defined; then u8 dtype, u8 rank, i64 per dimension; the bytes as a blob
//   std::vector<f32, i32, u8>  as a rank-1 tensor: the numbers as a blob, never through meta's 1 MiB
//   std::vector<other number>  u32 count, the numbers' bytes in one copy
//   std::vector<T>, tuples     u32 count (vectors), then each element
//   caf atom constants         nothing: the frame's kind names the verb
//   anything with inspect()    its fields in order; a caf::meta::load_callback
//                              in it runs on reading and may refuse the value
// Processes of one build talk to each other: there is no version field.
//
// Not caf::binary_serializer: it skips tensor_handle (an allowed-unsafe type),
// makes one virtual call per number (a list of floats element by element),
// writes integers big-endian with variable-length counts that the hand-built
// malformed-frame tests and the old frames did not use, and bounds no count
// by the bytes left before it allocates.

namespace troupe::wire {

static_assert(std::endian::native == std::endian::little, "the wire form is the host's bytes, little-endian");

namespace detail {

template <class T>
inline constexpr bool always_false = false;
template <class T>
inline constexpr bool is_vector = false;
template <class T, class A>
inline constexpr bool is_vector<std::vector<T, A>> = true;
template <class T>
inline constexpr bool is_tuple = false;
template <class... Ts>
inline constexpr bool is_tuple<std::tuple<Ts...>> = true;
template <class T>
inline constexpr bool is_atom = false;
template <caf::atom_value V>
inline constexpr bool is_atom<caf::atom_constant<V>> = true;
template <class T>
inline constexpr bool is_type_name = std::is_same_v<T, caf::meta::type_name_t>;

/// A number copied as its bytes (bool is a checked flag instead).
template <class T>
inline constexpr bool is_number =
  std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, long double>;

/// Lists of these travel as tensors of this dtype.
template <class T>
inline constexpr bool is_tensor_list =
  std::is_same_v<T, float> || std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::uint8_t>;
template <class T>
constexpr dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return dtype::f32;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return dtype::i32;
  else
    return dtype::u8;
}

/// A message's fence (activation_msg::ready): its device tensors are copied
/// to the host once it has passed.
template <class T>
concept has_fence = requires(const T& x) {
  { x.ready.get() } -> std::convertible_to<const device_fence*>;
};

/// Where a writer puts bytes: into a frame whose meta is already sized (by
/// size_out over the same values), or only counts them.
struct frame_out {
  net::frame& f;
  std::byte* at; ///< the next byte of f.meta to write
  [[gnu::always_inline]] void bytes(const void* p, std::size_t n) {
    if (n != 0)
      std::memcpy(at, p, n);
    at += n;
  }
  /// Appends the tensor header and the blob (a host copy of a device tensor, after `ready`).
  void tensor(const tensor_handle& t, const device_fence* ready);
  /// A list of `n` numbers of type `t` as a rank-1 tensor (one copy into a pooled blob).
  void list(const void* p, std::size_t n, dtype t);

private:
  void header(const tensor_handle& t);
};

struct size_out {
  std::size_t meta = 0;  ///< bytes of meta
  std::size_t blobs = 0; ///< tensor payloads
  void bytes(const void*, std::size_t n) { meta += n; }
  void tensor(const tensor_handle& t, const device_fence*) {
    meta += 1 + (t.defined() ? 2 + 8 * static_cast<std::size_t>(t.rank()) : 0);
    blobs += t.defined() ? 1 : 0;
  }
  void list(const void*, std::size_t, dtype) { meta += 1 + 2 + 8, blobs += 1; }
};

} // namespace detail

/// Writes values (an inspector that reads their state): to a frame, or to a count.
template <class Out>
class basic_writer {
public:
  using result_type = void;
  static constexpr bool reads_state = true;
  static constexpr bool writes_state = false;

  explicit basic_writer(Out& out) : out_(out) {}

  template <class... Ts>
  void operator()(Ts&&... xs) {
    (put(xs), ...);
  }

private:
  template <class T>
  void put(const T& x) {
    if constexpr (caf::meta::is_save_callback<T>::value)
      static_assert(detail::always_false<T>, "save_callback has no use on the wire");
    else if constexpr (caf::meta::is_annotation<T>::value || detail::is_atom<T>)
      return;
    else if constexpr (std::is_same_v<T, bool>)
      put(static_cast<std::uint8_t>(x ? 1 : 0));
    else if constexpr (std::is_enum_v<T>)
      put(static_cast<std::underlying_type_t<T>>(x));
    else if constexpr (detail::is_number<T>)
      out_.bytes(&x, sizeof x);
    else if constexpr (std::is_same_v<T, std::string>) {
      put(static_cast<std::uint32_t>(x.size()));
      out_.bytes(x.data(), x.size());
    } else if constexpr (std::is_same_v<T, tensor_handle>)
      out_.tensor(x, ready_);
    else if constexpr (detail::is_vector<T>)
      put_list(x);
    else if constexpr (detail::is_tuple<T>)
      std::apply([this](const auto&... ys) { (put(ys), ...); }, x);
    else if constexpr (std::is_same_v<T, caf::actor> || std::is_same_v<T, caf::strong_actor_ptr>)
      static_assert(detail::always_false<T>, "an actor handle means nothing in another process");
    else if constexpr (detail::has_fence<T>) {
      auto outer = std::exchange(ready_, x.ready.get());
      inspect(*this, const_cast<T&>(x));
      ready_ = outer;
    } else
      inspect(*this, const_cast<T&>(x)); // a type with no inspect() and no wire form stops here
  }

  template <class T, class A>
  void put_list(const std::vector<T, A>& v) {
    if constexpr (detail::is_tensor_list<T>)
      out_.list(v.data(), v.size(), detail::dtype_of<T>());
    else {
      put(static_cast<std::uint32_t>(v.size()));
      if constexpr (detail::is_number<T>)
        out_.bytes(v.data(), v.size() * sizeof(T));
      else
        for (const auto& x : v)
          put(static_cast<const T&>(x));
    }
  }

  Out& out_;
  const device_fence* ready_ = nullptr;
};

/// Meta bytes and tensor payloads that `xs` take on the wire.
template <class... Ts>
detail::size_out size_of(const Ts&... xs) {
  detail::size_out s;
  basic_writer<detail::size_out>{s}(xs...);
  return s;
}

/// The fewest meta bytes a T takes: T{}'s, whose lists and strings are empty
/// and whose tensors are undefined (as in every message). A reader bounds a
/// list's count by the bytes left over this.
template <class T>
std::size_t min_size() {
  static const std::size_t n = size_of(T{}).meta;
  return n;
}

/// A frame of kind `kind` holding `xs`: sized by one walk over them, written by
/// a second into meta allocated once.
template <class... Ts>
net::frame write(std::uint16_t kind, const Ts&... xs) {
  net::frame f;
  f.kind = kind;
  auto size = size_of(xs...);
  f.meta.resize(size.meta);
  f.blobs.reserve(size.blobs);
  detail::frame_out out{f, f.meta.data()};
  basic_writer<detail::frame_out>{out}(xs...);
  return f;
}

/// Whether a reader failed on a value (true, as a caf::error would be); the
/// error itself waits in the reader. Cheaper than a caf::error per value,
/// whose constructor and destructor are calls into CAF's library.
struct status {
  bool failed = false;
  explicit operator bool() const noexcept { return failed; }
};

/// Reads values from a frame (an inspector that writes their state). The first
/// failure stops it; error() then says what and where.
class reader {
public:
  using result_type = status;
  static constexpr bool reads_state = false;
  static constexpr bool writes_state = true;

  explicit reader(const net::frame& f) : f_(f), p_(f.meta.data()), left_(f.meta.size()) {}

  template <class... Ts>
  status operator()(Ts&&... xs) {
    auto depth = depth_;
    if (!(get(xs) && ...))
      return {true};
    depth_ = depth;
    return {};
  }

  /// Fails unless every byte and every tensor payload was read.
  bool finish();
  /// What went wrong and where: "truncated message (in spans_msg > span[3], at byte 120)".
  caf::error error() const;

private:
  template <class T>
  bool get(T& x) {
    using V = std::remove_const_t<T>;
    if constexpr (detail::is_type_name<V>) {
      if (depth_ < path_.size()) // deeper than that, the outer types say enough
        path_[depth_] = {x.value, index_};
      ++depth_;
      index_ = no_index;
      return true;
    } else if constexpr (caf::meta::is_load_callback<V>::value)
      return check(x.fun());
    else if constexpr (caf::meta::is_annotation<V>::value || detail::is_atom<V>)
      return true;
    else if constexpr (std::is_same_v<V, bool>)
      return get_flag(x);
    else if constexpr (std::is_enum_v<V>) {
      std::underlying_type_t<V> u{};
      if (!get(u))
        return false;
      x = static_cast<V>(u);
      return true;
    } else if constexpr (detail::is_number<V>)
      return take(&x, sizeof x);
    else if constexpr (std::is_same_v<V, std::string>)
      return get_string(x);
    else if constexpr (std::is_same_v<V, tensor_handle>)
      return get_tensor(x);
    else if constexpr (detail::is_vector<V>)
      return get_list(x);
    else if constexpr (detail::is_tuple<V>)
      return std::apply([this](auto&... ys) { return (get(ys) && ...); }, x);
    else if constexpr (std::is_same_v<V, caf::actor> || std::is_same_v<V, caf::strong_actor_ptr>)
      static_assert(detail::always_false<V>, "an actor handle means nothing in another process");
    else
      return !inspect(*this, x);
  }

  template <class T, class A>
  bool get_list(std::vector<T, A>& v) {
    if constexpr (detail::is_tensor_list<T>) {
      tensor_handle t;
      if (!get_list_tensor(t, detail::dtype_of<T>()))
        return false;
      v.assign(t.data<T>(), t.data<T>() + t.numel());
      return true;
    } else {
      std::uint32_t n = 0;
      if (!get(n))
        return false;
      std::size_t each = detail::is_number<T> ? sizeof(T) : std::max<std::size_t>(1, min_size<T>());
      if (n > left_ / each) // before allocating: a forged count cannot make it reserve more than the frame holds
        return fail("a count larger than the message");
      v.resize(n);
      if constexpr (detail::is_number<T>)
        return take(v.data(), n * sizeof(T));
      for (std::uint32_t i = 0; i < n; ++i) {
        index_ = i;
        if (!get(v[i]))
          return false;
      }
      index_ = no_index;
      return true;
    }
  }

  [[gnu::always_inline]] bool take(void* out, std::size_t n) {
    if (n > left_)
      return fail("truncated message");
    if (n != 0) // an empty list's data() may be null
      std::memcpy(out, p_, n);
    p_ += n, left_ -= n;
    return true;
  }
  bool get_flag(bool& x);
  bool get_string(std::string& s);
  bool get_tensor(tensor_handle& t);
  /// A list sent as a rank-1 tensor of dtype `want`.
  bool get_list_tensor(tensor_handle& t, dtype want);
  /// A load_callback's verdict.
  bool check(const caf::error& e);
  /// Records `what` and where it happened; returns false.
  bool fail(std::string what);

  static constexpr std::size_t no_index = static_cast<std::size_t>(-1);
  struct place {
    const char* type;
    std::size_t index; ///< its position in a list, or no_index
  };
  const net::frame& f_;
  const std::byte* p_;
  std::size_t left_;
  std::size_t next_blob_ = 0;
  std::size_t index_ = no_index; ///< the list position of the value being read
  std::array<place, 8> path_{};  ///< the types being read, outermost first (no allocation per frame)
  std::size_t depth_ = 0;
  std::string what_, where_;
};

/// Reads `xs` from the whole of `f`'s meta and blobs; an error (what and where) otherwise.
template <class... Ts>
caf::error read(const net::frame& f, Ts&... xs) {
  reader r{f};
  if (r(xs...) || !r.finish())
    return r.error();
  return {};
}

/// One frame kind of a protocol: its tag and the values it carries (for the
/// data plane a verb atom first, so that the atom picks the kind).
template <auto Tag, class... Ts>
struct entry {
  static constexpr std::uint16_t tag = static_cast<std::uint16_t>(Tag);
  using values = std::tuple<Ts...>;
};

/// A protocol's frame kinds: (tag, types) pairs, each tag and each list of types once.
template <class... Entries>
struct table {
  static_assert(
    [] {
      constexpr std::uint16_t tags[] = {Entries::tag...};
      for (std::size_t i = 0; i < sizeof...(Entries); ++i)
        for (std::size_t j = 0; j < i; ++j)
          if (tags[i] == tags[j])
            return false;
      return true;
    }(),
    "two frame kinds with one tag");

  /// The tag of the entry that carries exactly `Ts...`.
  template <class... Ts>
  static constexpr std::uint16_t tag_of() {
    using want = std::tuple<Ts...>;
    static_assert((std::is_same_v<typename Entries::values, want> + ...) == 1,
                  "no frame kind (or more than one) carries these types: add one to the protocol's table");
    std::uint16_t tag = 0;
    ((std::is_same_v<typename Entries::values, want> ? (tag = Entries::tag, true) : false) || ...);
    return tag;
  }

  /// Calls `f(Entry{})` for the entry tagged `tag`; false when there is none.
  template <class F>
  static bool visit(std::uint16_t tag, F&& f) {
    return ((Entries::tag == tag ? (f(Entries{}), true) : false) || ...);
  }

  /// Calls `f(Entry{})` for every entry, in order.
  template <class F>
  static void for_each(F&& f) {
    (f(Entries{}), ...);
  }
};

/// "expected frame kind 105, got 100".
caf::error wrong_kind(std::uint16_t want, std::uint16_t got);

/// The frame of `Table`'s kind for `m`.
template <class Table, class T>
net::frame encode(const T& m) {
  return write(Table::template tag_of<T>(), m);
}

/// `f` as `Table`'s message T: an error when it is another kind or malformed.
template <class Table, class T>
caf::expected<T> decode(const net::frame& f) {
  constexpr auto tag = Table::template tag_of<T>();
  if (f.kind != tag)
    return wrong_kind(tag, f.kind);
  T m{};
  if (auto err = read(f, m))
    return err;
  return m;
}

} // namespace troupe::wire
