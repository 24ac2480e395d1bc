// The FP8 state in a sharded checkpoint does not depend on the device it
// lived on (issue 20): the rank file written from FP8 states on a "GPU" has
// the same datasets (names, HDF5 types, shapes) and values as the one written
// from the same states on the host, for a blocking save and for an
// asynchronous one (copy into a host buffer); and either file loads into
// states on either device.
//
// No GPU here: the "device" is a stand-in allocator registered for
// Device::cuda whose memory holds the BITWISE NOT of every value (only its
// copy_from_host / copy_to_host translate). Code that reads or writes device
// memory as if it were host memory (the loader's old direct read into
// data_as<float>(), a writer without staging) gets wrong values and fails.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "ckpt/fp8_state.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/shard_snapshot.hpp"
#include "fp8/recipe.hpp"
#include "runtime/allocator.hpp"

using namespace ftrain;
using namespace ftrain::ckpt;
namespace fs = std::filesystem;

namespace {

void invert(void* dst, const void* src, std::size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  for (std::size_t i = 0; i < bytes; ++i) d[i] = static_cast<unsigned char>(~s[i]);
}

class InvertingDeviceAllocator final : public DeviceAllocator {
 public:
  Device device() const override { return Device::cuda; }
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, ((bytes + 63) / 64 + 1) * 64);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0xff, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memmove(dst, src, bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override { invert(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override { invert(dst, src, bytes); }
  AllocatorStats stats() const override { return {}; }
};

constexpr std::int64_t kHistory = 5;
const std::vector<std::string> kLayers = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"};

struct States {
  std::vector<fp8::LinearState> states;
  std::vector<Fp8StateRef> refs() {
    std::vector<Fp8StateRef> r;
    for (std::size_t i = 0; i < states.size(); ++i) r.push_back({kLayers[i], &states[i]});
    return r;
  }
};

// Host states with distinct values everywhere.
States host_states() {
  States s;
  for (std::size_t l = 0; l < kLayers.size(); ++l) {
    fp8::LinearState st = fp8::LinearState::create(kHistory, Device::host);
    float* h = st.amax_history.data_as<float>();
    for (std::int64_t i = 0; i < st.amax_history.numel(); ++i) h[i] = 0.25f * static_cast<float>(i + 1) + static_cast<float>(l);
    for (int c = 0; c < 3; ++c) st.scale.data_as<float>()[c] = 448.0f / (1.5f + static_cast<float>(c + 3 * l));
    s.states.push_back(st);
  }
  return s;
}

States on(Device device, const States& from) {
  States s;
  for (const auto& st : from.states) s.states.push_back(st.to(device));
  return s;
}

void write_file(const std::string& path, std::vector<Fp8StateRef> refs, bool asynchronous) {
  ShardSnapshot s;
  s.step = 3;
  s.world_size = 1;
  s.shard_group_size = 1;
  s.strategy = "full_shard";
  s.fp8_amax_history_len = kHistory;
  s.num_units = 1;
  s.unit_names_json = "[\"layers.0\"]";
  ShardSnapshot::Unit u;
  u.name = "layers.0";
  u.entries_json = "[]";
  std::vector<const Tensor*> tensors;
  for (const Fp8StateArray& a : fp8_state_arrays(refs)) {
    u.arrays.push_back({a.name, nullptr, a.tensor->numel()});
    tensors.push_back(a.tensor);
    s.bytes += a.tensor->numel() * static_cast<std::int64_t>(sizeof(float));
  }
  s.units.push_back(u);
  SnapshotBuffer buffer;
  fill_snapshot_arrays(s, tensors, asynchronous ? &buffer : nullptr);
  write_shard_file(path, s, -1);
}

// (name, type class, type size, dims) of every FP8 dataset in units/layers.0
// (the group also holds the unit's "entries" string).
using Dataset = std::tuple<std::string, int, std::size_t, std::vector<hsize_t>>;
std::vector<Dataset> datasets(const std::string& path) {
  std::vector<Dataset> out;
  h5::File f = h5::File::open_read(path);
  h5::Group g = h5::Group::open(f.id(), "units/layers.0", path);
  H5G_info_t info{};
  H5Gget_info(g.id(), &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256];
    H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    if (std::string(name).find(".fp8.") == std::string::npos) continue;
    const hid_t d = H5Dopen2(g.id(), name, H5P_DEFAULT);
    const hid_t t = H5Dget_type(d), space = H5Dget_space(d);
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    out.emplace_back(name, static_cast<int>(H5Tget_class(t)), H5Tget_size(t), dims);
    H5Sclose(space);
    H5Tclose(t);
    H5Dclose(d);
  }
  return out;
}

std::vector<float> host_values(const Tensor& t) { return to_float_vector(to_device(t, Device::host)); }

class Fp8StateDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = register_allocator(Device::cuda, &device_);
    dir_ = fs::temp_directory_path() / ("ftrain_fp8_state_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    register_allocator(Device::cuda, previous_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  InvertingDeviceAllocator device_;
  DeviceAllocator* previous_ = nullptr;
  fs::path dir_;
};

}  // namespace

TEST_F(Fp8StateDeviceTest, DeviceStateWritesTheHostsDatasetsAndValues) {
  States host = host_states();
  States device = on(Device::cuda, host);
  ASSERT_EQ(device.states[0].scale.device(), Device::cuda);
  float raw;
  std::memcpy(&raw, device.states[0].scale.data(), sizeof raw);
  ASSERT_NE(raw, host.states[0].scale.data_as<float>()[0]) << "the stand-in device memory must not read as host memory";

  for (bool asynchronous : {false, true}) {
    SCOPED_TRACE(asynchronous ? "asynchronous save (host buffer)" : "blocking save");
    const std::string host_file = path("host.h5"), device_file = path("device.h5");
    write_file(host_file, host.refs(), asynchronous);
    write_file(device_file, device.refs(), asynchronous);
    const auto host_sets = datasets(host_file), device_sets = datasets(device_file);
    // amax_history and scale per layer, each with its CRC-32C block sums.
    ASSERT_EQ(host_sets.size(), 4 * kLayers.size());
    EXPECT_EQ(host_sets, device_sets) << "dataset names, types or shapes depend on the device";
    for (const auto& [name, type_class, size, dims] : host_sets) {
      if (name.find(".crc32c") != std::string::npos) continue;
      EXPECT_EQ(type_class, static_cast<int>(H5T_FLOAT)) << name;
      EXPECT_EQ(size, 4u) << name << " is f32";
      const bool history = name.find("amax_history") != std::string::npos;
      EXPECT_EQ(dims, std::vector<hsize_t>{static_cast<hsize_t>(history ? kHistory * 3 : 3)}) << name;
    }
    // Same values, the state's own.
    h5::File hf = h5::File::open_read(host_file), df = h5::File::open_read(device_file);
    h5::Group hg = h5::Group::open(hf.id(), "units/layers.0", host_file);
    h5::Group dg = h5::Group::open(df.id(), "units/layers.0", device_file);
    for (const Fp8StateArray& a : fp8_state_arrays(host.refs())) {
      std::vector<float> from_host(static_cast<std::size_t>(a.tensor->numel())), from_device(from_host.size());
      h5::read_f32_range(hg.id(), a.name.c_str(), 0, a.tensor->numel(), from_host.data(), host_file);
      h5::read_f32_range(dg.id(), a.name.c_str(), 0, a.tensor->numel(), from_device.data(), device_file);
      EXPECT_EQ(from_host, to_float_vector(*a.tensor)) << a.name;
      EXPECT_EQ(from_device, from_host) << a.name;
    }
  }
}

TEST_F(Fp8StateDeviceTest, EitherFileLoadsIntoStatesOnEitherDevice) {
  States host = host_states();
  const std::string host_file = path("host.h5"), device_file = path("device.h5");
  write_file(host_file, host.refs(), false);
  States device_written = on(Device::cuda, host);
  write_file(device_file, device_written.refs(), false);
  for (const std::string& file : {host_file, device_file}) {
    for (Device target : {Device::host, Device::cuda}) {
      SCOPED_TRACE(file + " into " + device_name(target));
      States fresh;
      for (std::size_t l = 0; l < kLayers.size(); ++l) fresh.states.push_back(fp8::LinearState::create(kHistory, target));
      h5::File f = h5::File::open_read(file);
      h5::Group g = h5::Group::open(f.id(), "units/layers.0", file);
      read_fp8_state_arrays(g.id(), fresh.refs(), file);
      for (std::size_t l = 0; l < kLayers.size(); ++l) {
        EXPECT_EQ(host_values(fresh.states[l].amax_history), to_float_vector(host.states[l].amax_history)) << l;
        EXPECT_EQ(host_values(fresh.states[l].scale), to_float_vector(host.states[l].scale)) << l;
      }
    }
  }
}
