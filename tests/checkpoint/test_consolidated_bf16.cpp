// save_consolidated with bf16 storage, under mpirun (np 1 and 2): every
// dataset is uint16 bfloat16 bits with the ftrain_dtype attribute and equals
// the f32 file's value rounded to nearest even; `init hdf5` reads it (each
// rank loads the rounded values into its shards), and the ftrain-convert path
// (h5 -> safetensors) reads it too.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "ckpt/consolidated.hpp"
#include "ckpt/convert.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "comm/mpi_communicator.hpp"
#include "base/dtype.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

using namespace ftrain;
namespace fs = std::filesystem;

namespace {

std::vector<std::vector<float>> gather_masters(FsdpEngine& engine) {
  std::vector<std::vector<float>> out;
  for (const auto& flat : engine.units()) {
    Tensor full = Tensor::empty({flat->padded_numel()}, DType::f32);
    engine.shard_comm().all_gather(flat->master, full).wait();
    out.push_back(to_float_vector(full));
  }
  return out;
}

}  // namespace

TEST(ConsolidatedBf16, StoresRoundedBitsThatInitHdf5AndConvertRead) {
  MpiCommunicator world(MPI_COMM_WORLD);
  // One directory for all ranks: rank 0's pid names it.
  long id = static_cast<long>(::getpid());
  MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  const fs::path dir = fs::temp_directory_path() / ("ftrain_bf16_" + std::to_string(id));
  if (world.rank() == 0) fs::create_directories(dir);
  world.barrier();

  auto model = PluginLoader().create_model("llama", "tiny",
                                           {{"hidden_size", "24"}, {"intermediate_size", "40"},
                                            {"num_hidden_layers", "2"}, {"vocab_size", "37"}});
  FsdpOptions options;
  FsdpEngine engine(*model, world, options);
  engine.init_random(5);
  const std::string f32_path = (dir / "f32.h5").string(), bf16_path = (dir / "bf16.h5").string();
  ckpt::save_consolidated(engine, world, f32_path, "llama", model->config());
  ckpt::save_consolidated(engine, world, bf16_path, "llama", model->config(), DType::bf16);

  // Every dataset: uint16 + attribute, the rounded f32 value.
  std::vector<FlatEntry> parameters;
  for (const auto& flat : engine.units())
    for (const auto& e : flat->entries()) parameters.push_back(e);
  ckpt::check_consolidated(bf16_path, parameters);
  {
    ckpt::h5::File f32 = ckpt::h5::File::open_read(f32_path), b16 = ckpt::h5::File::open_read(bf16_path);
    for (const auto& e : parameters) {
      ckpt::h5::Handle a(H5Dopen2(f32.id(), e.name.c_str(), H5P_DEFAULT), H5Dclose);
      ckpt::h5::Handle b(H5Dopen2(b16.id(), e.name.c_str(), H5P_DEFAULT), H5Dclose);
      ASSERT_FALSE(ckpt::consolidated_dataset_is_bf16(a.id(), f32_path, e.name));
      ASSERT_TRUE(ckpt::consolidated_dataset_is_bf16(b.id(), bf16_path, e.name)) << e.name;
      std::vector<float> values(static_cast<std::size_t>(e.numel));
      std::vector<std::uint16_t> bits(values.size());
      ASSERT_GE(H5Dread(a.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
      ASSERT_GE(H5Dread(b.id(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, bits.data()), 0);
      for (std::size_t i = 0; i < values.size(); ++i)
        ASSERT_EQ(bits[i], to_bf16(values[i]).bits) << e.name << "[" << i << "]";
    }
  }

  // init hdf5 from the bf16 file = the rounded masters.
  FsdpEngine loaded(*model, world, options);
  ckpt::load_consolidated(loaded, bf16_path);
  const auto want = gather_masters(engine), got = gather_masters(loaded);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t u = 0; u < want.size(); ++u) {
    const auto& flat = *engine.units()[u];
    for (std::int64_t i = 0; i < flat.numel(); ++i)
      ASSERT_EQ(got[u][static_cast<std::size_t>(i)], round_to_bf16(want[u][static_cast<std::size_t>(i)]))
          << flat.unit_name() << " element " << i;
  }

  // ftrain-convert keeps the bits (bf16 -> BF16 safetensors, exact).
  if (world.rank() == 0) {
    ckpt::h5_to_safetensors(bf16_path, (dir / "st").string(), 1ull << 30, std::nullopt);
    ckpt::SafetensorsSource st((dir / "st").string());
    for (const auto& e : parameters) EXPECT_EQ(st.tensor(e.name).dtype, ckpt::StDType::BF16) << e.name;
    EXPECT_NE(std::ifstream((dir / "st/config.json").string()).peek(), EOF);
  }
  world.barrier();
  if (world.rank() == 0) fs::remove_all(dir);
}
