// The sharded-checkpoint write path alone, against dd's, on one file system:
// no training, one process, so the numbers are the path's own.
//   build/tests/bench/bench_checkpoint_write [MB] [REPS] [DIR]   (default 512 MB, 3, .)
// A synthetic rank file (8 units x master, exp_avg, exp_avg_sq; MB of f32 in
// all) is written REPS times by each of, in turn:
//   format 3   write_shard_file: HDF5 metadata, then the data with 16 MiB
//              pwrite calls at the offsets HDF5 allocated, CRC-32C per 4 MiB
//              block, one fsync (src/ckpt/shard_snapshot.cpp);
//   format 2   the path before it: each dataset chunked (4 MiB chunks) with
//              the Fletcher32 filter and written by H5Dwrite, then one fsync;
//   dd         write() of the same bytes in 16 MiB pieces and one fsync, as
//              `dd bs=16M conv=fsync` does.
// Prints every time, then the median MB/s of each and the ratio to dd.
// Not a test: never run by ctest (share/doc/performance.md has numbers).
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/crc32c.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/shard_snapshot.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;

namespace {

double seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fsync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
}

// The format-2 writer as it was: chunked, Fletcher32, H5Dwrite, then fsync.
void write_format2(const std::string& path, const ShardSnapshot& s) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  hid_t units = H5Gcreate2(file, "units", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  for (const auto& u : s.units) {
    hid_t g = H5Gcreate2(units, u.name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    for (const auto& a : u.arrays) {
      const hsize_t dims[1] = {static_cast<hsize_t>(a.n)};
      hid_t space = H5Screate_simple(1, dims, nullptr);
      hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
      const hsize_t chunk[1] = {std::min<hsize_t>(dims[0], hsize_t{1} << 20)};
      H5Pset_chunk(dcpl, 1, chunk);
      H5Pset_fletcher32(dcpl);
      hid_t set = H5Dcreate2(g, a.name.c_str(), H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      H5Dwrite(set, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data);
      H5Dclose(set);
      H5Pclose(dcpl);
      H5Sclose(space);
    }
    H5Gclose(g);
  }
  H5Gclose(units);
  H5Fclose(file);
  H5Pclose(fapl);
  fsync_file(path);
}

void write_dd(const std::string& path, const float* data, std::int64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const auto* p = reinterpret_cast<const char*>(data);
  constexpr std::int64_t piece = std::int64_t{16} << 20;
  for (std::int64_t at = 0; at < bytes; at += piece)
    if (::write(fd, p + at, static_cast<std::size_t>(std::min(piece, bytes - at))) < 0) std::perror("write");
  ::fsync(fd);
  ::close(fd);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t mb = argc > 1 ? std::atoll(argv[1]) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  const std::string dir = argc > 3 ? argv[3] : ".";
  constexpr int kUnits = 8;
  const std::int64_t per_array = mb * 1000000 / 4 / (3 * kUnits);
  std::vector<float> storage(static_cast<std::size_t>(per_array * 3 * kUnits));
  std::uint32_t x = 12345;  // incompressible, like trained weights
  for (auto& v : storage) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x) * 1e-9f;
  }
  ShardSnapshot s;
  s.step = 1;
  s.strategy = "full_shard";
  s.unit_names_json = "[]";
  for (int u = 0; u < kUnits; ++u) {
    ShardSnapshot::Unit unit;
    unit.name = "unit" + std::to_string(u);
    unit.shard_numel = per_array;
    unit.entries_json = "[]";
    for (int a = 0; a < 3; ++a) {
      const char* names[3] = {"master", "exp_avg", "exp_avg_sq"};
      unit.arrays.push_back({names[a], storage.data() + (u * 3 + a) * per_array, per_array});
    }
    s.units.push_back(unit);
  }
  const std::int64_t bytes = per_array * 3 * kUnits * 4;
  std::printf("bench_checkpoint_write: %.0f MB of f32 in %d datasets, %d rep(s), dir %s, crc32c %s\n", bytes / 1e6,
              3 * kUnits, reps, dir.c_str(), crc32c_implementation());
  const std::string f3 = dir + "/bench_format3.h5", f2 = dir + "/bench_format2.h5", fd = dir + "/bench_dd.bin";
  std::vector<double> t3, t2, tdd;
  for (int r = 0; r < reps; ++r) {
    tdd.push_back(seconds([&] { write_dd(fd, storage.data(), bytes); }));
    t3.push_back(seconds([&] { write_shard_file(f3, s, -1); }));
    t2.push_back(seconds([&] { write_format2(f2, s); }));
    std::printf("rep %d: dd %.2f s, format 3 %.2f s, format 2 %.2f s\n", r + 1, tdd.back(), t3.back(), t2.back());
    std::fflush(stdout);
    for (const auto& f : {f3, f2, fd}) std::filesystem::remove(f);
  }
  const double dd = bytes / median(tdd) / 1e6;
  std::printf("median MB/s: dd %.0f | format 3 %.0f (%.2f of dd) | format 2 (Fletcher32) %.0f (%.2f of dd)\n", dd,
              bytes / median(t3) / 1e6, bytes / median(t3) / 1e6 / dd, bytes / median(t2) / 1e6,
              bytes / median(t2) / 1e6 / dd);
  return 0;
}
