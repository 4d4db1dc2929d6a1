// safetensors files: a round trip, malformed input, and a full disk that keeps the old file.
#include "runtime/checkpoint/safetensors.hpp"

#include <fstream>
#include <sys/mount.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include "runtime/actor/errors.hpp"

using namespace troupe;

namespace {

std::filesystem::path temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("troupe_st_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d;
}

tensor_handle ramp(shape_t s, float start) {
  auto t = tensor_handle::empty(s);
  for (std::int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

} // namespace

TEST_CASE("tensors and metadata survive a write and a read") {
  auto dir = temp_dir("roundtrip");
  auto ids = tensor_handle::empty({3}, dtype::i32);
  for (int i = 0; i < 3; ++i)
    ids.data<std::int32_t>()[i] = 7 * i;
  REQUIRE_FALSE(write_safetensors(dir / "a.safetensors", {{"w", ramp({2, 3}, 1)}, {"ids", ids}, {"b", ramp({5}, -2)}},
                                  {{"step", "42"}}));
  auto f = read_safetensors(dir / "a.safetensors");
  REQUIRE(f);
  CHECK(f->metadata.at("step") == "42");
  REQUIRE(f->tensors.size() == 3);
  auto w = f->find("w");
  CHECK(w.shape() == shape_t{2, 3});
  CHECK(w.data<float>()[5] == 6.0f);
  CHECK(f->find("ids").data<std::int32_t>()[2] == 14);
  CHECK(f->find("b").data<float>()[0] == -2.0f);
  CHECK_FALSE(f->find("missing").defined());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a truncated or garbage file is an error that names the file") {
  auto dir = temp_dir("bad");
  REQUIRE_FALSE(write_safetensors(dir / "ok.safetensors", {{"w", ramp({64}, 0)}}));
  auto size = std::filesystem::file_size(dir / "ok.safetensors");
  std::filesystem::copy_file(dir / "ok.safetensors", dir / "cut.safetensors");
  std::filesystem::resize_file(dir / "cut.safetensors", size - 10);
  auto cut = read_safetensors(dir / "cut.safetensors");
  REQUIRE_FALSE(cut);
  CHECK(error_message(cut.error()).find("cut.safetensors") != std::string::npos);
  std::ofstream(dir / "junk.safetensors") << "this is not a tensor file at all";
  CHECK_FALSE(read_safetensors(dir / "junk.safetensors"));
  CHECK_FALSE(read_safetensors(dir / "absent.safetensors"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the header alone tells a complete file from a truncated one, and a huge shape allocates nothing") {
  auto dir = temp_dir("header");
  REQUIRE_FALSE(
    write_safetensors(dir / "ok.safetensors", {{"w", ramp({2, 64}, 0)}, {"b", ramp({3}, 0)}}, {{"step", "8"}}));
  auto h = read_safetensors_header(dir / "ok.safetensors");
  REQUIRE(h);
  REQUIRE(h->tensors.size() == 2);
  REQUIRE(h->find("w"));
  CHECK(h->find("w")->shape == shape_t{2, 64});
  CHECK(h->find("w")->type == dtype::f32);
  CHECK(h->metadata.at("step") == "8");
  auto size = std::filesystem::file_size(dir / "ok.safetensors");
  std::filesystem::copy_file(dir / "ok.safetensors", dir / "cut.safetensors");
  std::filesystem::resize_file(dir / "cut.safetensors", size - 100);
  auto cut = read_safetensors_header(dir / "cut.safetensors");
  REQUIRE_FALSE(cut);
  CHECK(error_message(cut.error())
          .find("cut.safetensors: truncated: its header describes 524 bytes of tensor data, "
                "the file holds 424") != std::string::npos);
  // A header that claims 2^60 elements is refused from the file's size, not by allocating them.
  std::string header =
    R"({"w":{"dtype":"F32","shape":[1073741824,1073741824],"data_offsets":[0,4611686018427387904]}})";
  std::uint64_t n = header.size();
  std::ofstream(dir / "huge.safetensors", std::ios::binary)
    << std::string(reinterpret_cast<const char*>(&n), sizeof n) << header << "tiny";
  auto huge = read_safetensors(dir / "huge.safetensors");
  REQUIRE_FALSE(huge);
  CHECK(error_message(huge.error()).find("truncated") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a full disk fails the write with a clear error and keeps the previous file") {
  auto dir = temp_dir("full");
  if (::geteuid() != 0 || ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=256k") != 0) {
    MESSAGE("skipped: mounting a small tmpfs needs root");
    std::filesystem::remove_all(dir);
    return;
  }
  auto path = dir / "ckpt.safetensors";
  REQUIRE_FALSE(write_safetensors(path, {{"w", ramp({1000}, 3)}})); // 4 kB: fits
  auto err = write_safetensors(path, {{"w", ramp({200000}, 0)}});   // 800 kB: does not
  REQUIRE(err);
  CHECK(error_message(err).find("No space left on device") != std::string::npos);
  CHECK(error_message(err).find("previous file is kept") != std::string::npos);
  auto kept = read_safetensors(path);
  REQUIRE(kept);
  CHECK(kept->find("w").numel() == 1000);
  CHECK(kept->find("w").data<float>()[0] == 3.0f);
  for (const auto& e : std::filesystem::directory_iterator(dir))
    CHECK_MESSAGE(e.path() == path, "left behind: ", e.path()); // no temporary file remains
  ::umount(dir.c_str());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a folder that does not exist is an error, not a crash") {
  auto err = write_safetensors("/nonexistent/dir/x.safetensors", {{"w", ramp({4}, 0)}});
  REQUIRE(err);
  CHECK(error_message(err).find("/nonexistent/dir/x.safetensors") != std::string::npos);
}

TEST_CASE("a malformed header says what is wrong in words, without the JSON library's error ids") {
  auto dir = temp_dir("words");
  auto write = [&](const std::string& name, const std::string& header) {
    std::uint64_t n = header.size();
    std::ofstream(dir / name, std::ios::binary)
      << std::string(reinterpret_cast<const char*>(&n), sizeof n) << header << "data";
    return read_safetensors_header(dir / name);
  };
  auto no_dtype = write("no_dtype.safetensors", R"({"w":{"shape":[1],"data_offsets":[0,4]}})");
  REQUIRE_FALSE(no_dtype);
  CHECK(error_message(no_dtype.error())
          .find("no_dtype.safetensors: malformed header: entry 'w': the field \"dtype\" "
                "is missing") != std::string::npos);
  auto not_json = write("not_json.safetensors", "{\"w\": oops}");
  REQUIRE_FALSE(not_json);
  CHECK(error_message(not_json.error()).find("malformed header: syntax error at line 1, column") != std::string::npos);
  for (const auto& e : {no_dtype.error(), not_json.error()})
    CHECK(error_message(e).find("json.exception") == std::string::npos);
  std::filesystem::remove_all(dir);
}
