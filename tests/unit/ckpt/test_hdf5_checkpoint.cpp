// HDF5 checkpoint building blocks: f32 datasets round-trip and read back any
// element range (what resharding does); a flipped bit fails the CRC-32C
// block check (format 3) or, in files of formats 1-2, the Fletcher32 check
// of a chunk, with an error naming the file; a truncated file is
// refused; manifests are verified and `find_latest_complete` skips what a
// killed save leaves behind. The MPI save/resume paths are tested end to end
// in tests/checkpoint.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/crc32c.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "base/error.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;
namespace fs = std::filesystem;

namespace {

class Hdf5CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ftrain_h5_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with one 1-D dataset "values" of n floats 0, 1, 2, ...
  void write_values(const std::string& file, std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
    h5::File f = h5::File::create(file);
    h5::write_f32(f.id(), "values", v.data(), n, file);
    h5::write_attr_i64(f.id(), "count", n, file);
    h5::write_string(f.id(), "text", "hello checkpoint", file);
    f.close();
  }

  // Byte offset of element 0 of the contiguous dataset "values" in the file.
  static haddr_t data_address(const std::string& file) {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, "values", H5P_DEFAULT);
    const haddr_t address = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    return address;
  }

  fs::path dir_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST_F(Hdf5CheckpointTest, RangesRoundTrip) {
  const std::string file = path("a.h5");
  const std::int64_t n = (1 << 20) + 1000;  // two checksum blocks
  write_values(file, n);
  h5::File f = h5::File::open_read(file);
  EXPECT_EQ(h5::read_attr_i64(f.id(), "count", file), n);
  EXPECT_EQ(h5::read_string(f.id(), "text", file), "hello checkpoint");
  for (auto [first, count] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {0, 1}, {0, n}, {(1 << 20) - 3, 10}, {n - 1, 1}, {12345, 777}}) {
    std::vector<float> got(static_cast<std::size_t>(count), -1.0f);
    h5::read_f32_range(f.id(), "values", first, count, got.data(), file);
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], static_cast<float>(first + i));
  }
  std::vector<float> one(2);
  EXPECT_NE(error_of([&] { h5::read_f32_range(f.id(), "values", n - 1, 2, one.data(), file); }).find("elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] { h5::read_attr_i64(f.id(), "nope", file); }).find("'nope' is missing"), std::string::npos);
}

TEST_F(Hdf5CheckpointTest, FlippedBitIsRefusedNamingTheFile) {
  const std::string file = path("flip.h5");
  write_values(file, 5000);
  const haddr_t address = data_address(file);
  ASSERT_NE(address, HADDR_UNDEF);
  {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(address + 4 * 1234 + 2));
    char byte = 0;
    io.read(&byte, 1);
    byte ^= 0x10;
    io.seekp(static_cast<std::streamoff>(address + 4 * 1234 + 2));
    io.write(&byte, 1);
  }
  h5::File f = h5::File::open_read(file);
  std::vector<float> got(5000);
  const std::string message = error_of([&] { h5::read_f32_range(f.id(), "values", 0, 5000, got.data(), file); });
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("checksum"), std::string::npos) << message;
}

TEST_F(Hdf5CheckpointTest, TruncatedOrForeignFileIsRefused) {
  const std::string file = path("cut.h5");
  write_values(file, 5000);
  fs::resize_file(file, fs::file_size(file) / 2);
  std::string message = error_of([&] {
    h5::File f = h5::File::open_read(file);
    std::vector<float> got(5000);
    h5::read_f32_range(f.id(), "values", 0, 5000, got.data(), file);
  });
  EXPECT_NE(message.find(file), std::string::npos) << message;
  std::ofstream(path("text.h5")) << "not hdf5";
  message = error_of([&] { h5::File::open_read(path("text.h5")); });
  EXPECT_NE(message.find("text.h5 is not a readable HDF5 file"), std::string::npos) << message;
}

// Writing values first..first+count-1 through the flat-range selection must
// land exactly on the row-major elements [first, first + count), whatever the
// rank of the shape and wherever the range starts and ends.
TEST_F(Hdf5CheckpointTest, FlatRangeSelectionIsRowMajor) {
  const std::string file = path("sel.h5");
  const std::vector<std::vector<hsize_t>> shapes = {{10}, {4, 7}, {3, 4, 5}, {2, 3, 2, 4}, {1, 6}, {5, 1}};
  h5::File f = h5::File::create(file);
  int tried = 0;
  for (const auto& dims : shapes) {
    std::int64_t n = 1;
    for (auto d : dims) n *= static_cast<std::int64_t>(d);
    for (std::int64_t first = 0; first < n; first += 1 + n / 9) {
      for (std::int64_t count = 0; first + count <= n; count += 1 + n / 7) {
        const std::string name = "d" + std::to_string(tried++);
        h5::Handle full(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
        h5::Handle set(H5Dcreate2(f.id(), name.c_str(), H5T_NATIVE_FLOAT, full.id(), H5P_DEFAULT, H5P_DEFAULT,
                                  H5P_DEFAULT),
                       H5Dclose);
        std::vector<float> zeros(static_cast<std::size_t>(n), 0.0f);
        ASSERT_GE(H5Dwrite(set.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, zeros.data()), 0);
        std::vector<float> values(static_cast<std::size_t>(std::max<std::int64_t>(1, count)));
        for (std::int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = static_cast<float>(first + i + 1);
        h5::Handle space = h5::flat_range_selection(dims, first, count);
        ASSERT_EQ(H5Sget_select_npoints(space.id()), count);
        const hsize_t mem_dims[1] = {static_cast<hsize_t>(std::max<std::int64_t>(1, count))};
        h5::Handle memory(H5Screate_simple(1, mem_dims, nullptr), H5Sclose);
        if (count == 0) H5Sselect_none(memory.id());
        ASSERT_GE(H5Dwrite(set.id(), H5T_NATIVE_FLOAT, memory.id(), space.id(), H5P_DEFAULT, values.data()), 0);
        std::vector<float> back(static_cast<std::size_t>(n), -1.0f);
        ASSERT_GE(H5Dread(set.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), 0);
        for (std::int64_t i = 0; i < n; ++i) {
          const float expected = (i >= first && i < first + count) ? static_cast<float>(i + 1) : 0.0f;
          ASSERT_EQ(back[static_cast<std::size_t>(i)], expected)
              << "shape rank " << dims.size() << " first " << first << " count " << count << " element " << i;
        }
      }
    }
  }
  EXPECT_GT(tried, 100);
}

// A step directory as save_sharded commits it (files + manifest).
void make_step(const std::string& dir, std::int64_t step, bool with_manifest) {
  const std::string step_dir = step_directory(dir, step);
  fs::create_directories(step_dir);
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < 2; ++r) {
    const std::string name = "rank_" + std::to_string(r) + ".h5";
    std::ofstream(step_dir + "/" + name) << std::string(100 + r, 'x');
    files.push_back({{"name", name}, {"bytes", 100 + r}});
  }
  if (!with_manifest) return;
  nlohmann::json m{{"format_version", kShardedFormatVersion}, {"step", step}, {"world_size", 2},
                   {"shard_group_size", 2}, {"files", files}, {"complete", true}};
  std::ofstream(step_dir + "/manifest.json") << m.dump();
}

TEST_F(Hdf5CheckpointTest, ManifestAndLatest) {
  const std::string dir = path("ck");
  make_step(dir, 5, true);
  make_step(dir, 10, true);
  make_step(dir, 15, false);  // killed before its commit
  fs::create_directories(dir + "/step_20.tmp");
  EXPECT_NO_THROW(verify_step_directory(dir + "/step_10"));
  EXPECT_NE(error_of([&] { verify_step_directory(dir + "/step_15"); }).find("manifest.json is missing"),
            std::string::npos);
  EXPECT_EQ(find_latest_complete(dir).value(), dir + "/step_10");

  // A save that died between its commit and the pointer update: the newer
  // complete checkpoint is still found.
  std::ofstream(dir + "/latest") << "step_5\n";
  EXPECT_EQ(find_latest_complete(dir).value(), dir + "/step_10");

  std::ofstream(dir + "/latest") << "step_10\n";
  fs::resize_file(dir + "/step_10/rank_1.h5", 50);
  std::string why;
  EXPECT_EQ(find_latest_complete(dir, &why).value(), dir + "/step_5");
  EXPECT_NE(why.find("step_10/rank_1.h5 is 50 bytes, the manifest says 101"), std::string::npos) << why;

  fs::remove(dir + "/step_10/rank_0.h5");
  EXPECT_NE(error_of([&] { verify_step_directory(dir + "/step_10"); }).find("rank_0.h5 is missing"),
            std::string::npos);
  EXPECT_FALSE(find_latest_complete(path("empty")).has_value());
}

}  // namespace

TEST(Crc32c, MatchesTheStandardCheckValueAndChains) {
  const std::string text = "123456789";
  EXPECT_EQ(crc32c(text.data(), text.size()), 0xE3069283u) << crc32c_implementation();
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<unsigned char> bytes(1000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
  const std::uint32_t whole = crc32c(bytes.data(), bytes.size());
  for (std::size_t cut : {0, 1, 7, 8, 9, 500, 999})
    EXPECT_EQ(crc32c(bytes.data() + cut, bytes.size() - cut, crc32c(bytes.data(), cut)), whole) << cut;
}

// A flipped bit in the second checksum block: reads that touch only the
// first block succeed, a read touching the second fails naming the range.
TEST_F(Hdf5CheckpointTest, ChecksumBlocksAreCheckedWhereRead) {
  const std::string file = path("blocks.h5");
  const std::int64_t n = h5::kChecksumBlockElements + 5000;
  write_values(file, n);
  const haddr_t address = data_address(file);
  {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(address + 4 * (h5::kChecksumBlockElements + 10));
    io.seekg(at);
    char byte = 0;
    io.read(&byte, 1);
    byte ^= 0x01;
    io.seekp(at);
    io.write(&byte, 1);
  }
  h5::File f = h5::File::open_read(file);
  std::vector<float> got(1000);
  EXPECT_EQ(error_of([&] { h5::read_f32_range(f.id(), "values", 100, 1000, got.data(), file); }), "");
  EXPECT_EQ(got[0], 100.0f);
  const std::string message =
      error_of([&] { h5::read_f32_range(f.id(), "values", h5::kChecksumBlockElements - 10, 20, got.data(), file); });
  EXPECT_NE(message.find("checksum mismatch in elements [1048576, 1053576)"), std::string::npos) << message;
}

// Checkpoints of formats 1 and 2 hold chunked Fletcher32 datasets: they are
// still read (and HDF5 checks them).
TEST_F(Hdf5CheckpointTest, Fletcher32ChunksOfOlderFormatsAreRead) {
  const std::string file = path("v2.h5");
  const hsize_t n = 3000;
  std::vector<float> v(n);
  for (hsize_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f;
  {
    h5::File f = h5::File::create(file);
    h5::Handle space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    h5::Handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    const hsize_t chunk = 1024;
    H5Pset_chunk(dcpl.id(), 1, &chunk);
    H5Pset_fletcher32(dcpl.id());
    h5::Handle set(H5Dcreate2(f.id(), "values", H5T_IEEE_F32LE, space.id(), H5P_DEFAULT, dcpl.id(), H5P_DEFAULT),
                   H5Dclose);
    ASSERT_GE(H5Dwrite(set.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
  }
  h5::File f = h5::File::open_read(file);
  std::vector<float> got(100);
  h5::read_f32_range(f.id(), "values", 2000, 100, got.data(), file);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(got[static_cast<std::size_t>(i)], v[2000 + static_cast<std::size_t>(i)]);
}

// Two writes of the same content, more than a second apart, give the same
// bytes: no modification times are stored (asynchronous and blocking saves
// are compared byte for byte).
TEST_F(Hdf5CheckpointTest, SameContentSameBytes) {
  write_values(path("one.h5"), 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  write_values(path("two.h5"), 5000);
  auto bytes = [&](const char* name) {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(bytes("one.h5") == bytes("two.h5"));
}
