// ftrain-convert: consolidated HDF5 <-> Hugging Face safetensors
// (ckpt/convert_cli.hpp), and the offline merge of a sharded checkpoint
// (train/merge_checkpoint.hpp), which needs MPI and Kokkos and so is set up
// here:
//
//   [mpirun -np N] ftrain-convert sharded-to-h5 STEP_DIR OUT.h5 [--dtype f32|bf16]
//   [mpirun -np N] ftrain-convert sharded-to-safetensors STEP_DIR OUTDIR [--shard-size 5GB] [--dtype f32|bf16]
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/convert.hpp"
#include "ckpt/convert_cli.hpp"
#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"
#include "train/merge_checkpoint.hpp"

namespace {

constexpr const char* kMergeUsage =
    "usage:\n"
    "  [mpirun -np N] ftrain-convert sharded-to-h5 STEP_DIR OUT.h5 [--dtype f32|bf16]\n"
    "      a sharded checkpoint (checkpoint ... dir D: D/step_<N>) written by any number of\n"
    "      ranks -> the consolidated HDF5 state dict save_final writes (init hdf5 reads it)\n"
    "  [mpirun -np N] ftrain-convert sharded-to-safetensors STEP_DIR OUTDIR [--shard-size 5GB] [--dtype f32|bf16]\n"
    "      the same, then Hugging Face sharded safetensors in OUTDIR (as h5-to-safetensors)\n"
    "  The model is rebuilt from the checkpoint's deck (its plugin must be found, see\n"
    "  FTRAIN_PLUGIN_PATH); each of the N ranks holds 1/N of the state.\n";

bool is_merge_command(int argc, char** argv) {
  if (argc < 2) return false;
  const std::string c = argv[1];
  return c == "sharded-to-h5" || c == "sharded-to-safetensors";
}

// Returns the exit status: 0 done, 1 a UserError (reported once), 2 usage.
int merge(int argc, char** argv, ftrain::Communicator& world) {
  const std::string command = argv[1];
  std::vector<std::string> paths;
  std::string dtype_text, shard_size = "5GB";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--dtype" || a == "--shard-size") && i + 1 < argc) {
      (a == "--dtype" ? dtype_text : shard_size) = argv[++i];
    } else if (a.rfind("--", 0) == 0 || paths.size() == 2) {
      if (world.rank() == 0) std::cerr << "ftrain-convert: unexpected argument '" << a << "'\n" << kMergeUsage;
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.size() != 2 || (!dtype_text.empty() && dtype_text != "f32" && dtype_text != "bf16") ||
      (command == "sharded-to-h5" && shard_size != "5GB")) {
    if (world.rank() == 0) std::cerr << "ftrain-convert: bad arguments for " << command << "\n" << kMergeUsage;
    return 2;
  }
  const ftrain::DType stored = dtype_text == "bf16" ? ftrain::DType::bf16 : ftrain::DType::f32;
  std::string failure;
  try {
    const bool to_safetensors = command == "sharded-to-safetensors";
    const std::uint64_t shard_bytes = ftrain::ckpt::parse_byte_size(shard_size);
    // safetensors go through a consolidated file next to them, removed after.
    const std::string h5 = to_safetensors ? paths[1] + "/.ftrain-merge.h5" : paths[1];
    const auto done = ftrain::merge_sharded_to_h5(paths[0], h5, stored, world);
    if (world.rank() == 0) {
      std::printf("%s -> %s: %s, step %lld, written by %d rank(s), %lld parameters, merged on %d rank(s)\n",
                  paths[0].c_str(), h5.c_str(), done.model.c_str(), static_cast<long long>(done.step),
                  done.written_by, static_cast<long long>(done.parameters), world.size());
      if (to_safetensors) {
        const auto summary = ftrain::ckpt::h5_to_safetensors(h5, paths[1], shard_bytes, stored);
        std::filesystem::remove(h5);
        std::printf("%s: %lld tensors, %.1f MB in %lld file(s)\n", paths[1].c_str(),
                    static_cast<long long>(summary.tensors), static_cast<double>(summary.bytes) / 1e6,
                    static_cast<long long>(summary.files));
      }
    }
  } catch (const ftrain::UserError& e) {
    failure = e.what();
  } catch (const std::exception& e) {
    failure = std::string("internal error: ") + e.what();
  }
  // A failure on any rank is reported once, by the lowest failing rank.
  const int mine = failure.empty() ? world.size() : world.rank();
  int first = world.size();
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world.size()) return 0;
  if (world.rank() == first) std::cerr << "ftrain-convert: error: " << failure << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (!is_merge_command(argc, argv)) return ftrain::ckpt::convert_main(argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int kokkos_argc = 1;
  Kokkos::initialize(kokkos_argc, argv);
  int code = 0;
  {
    ftrain::MpiCommunicator world(MPI_COMM_WORLD);
    code = merge(argc, argv, world);
  }
  Kokkos::finalize();
  MPI_Finalize();
  return code;
}
