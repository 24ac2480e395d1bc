// ftrain-convert command line (see convert_cli.hpp).
#include "ckpt/convert_cli.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ckpt/convert.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

namespace {

constexpr const char* kUsage =
    "usage:\n"
    "  ftrain-convert h5-to-safetensors IN.h5 OUTDIR [--shard-size 5GB] [--dtype f32|bf16]\n"
    "                 [--tokenizer HF_DIR]\n"
    "      consolidated HDF5 (save_final) -> Hugging Face sharded safetensors:\n"
    "      OUTDIR/model-0000K-of-0000N.safetensors, model.safetensors.index.json,\n"
    "      and config.json (transformers' for a Llama, timm's for a ViT).\n"
    "      --shard-size: KB/MB/GB (10^3..) or KiB/MiB/GiB; --dtype: the stored tensors'\n"
    "      type (default: as stored in IN.h5); --tokenizer: copy the tokenizer files of\n"
    "      HF_DIR and take bos/eos/pad token ids from its config.json\n"
    "  ftrain-convert deck-model (HF_DIR | config.json)\n"
    "      prints the deck's `model ...` line for a Hugging Face Llama config.json\n"
    "      (LlamaConfig defaults for absent keys) or a timm ViT config.json\n"
    "  ftrain-convert safetensors-to-h5 IN OUT.h5 [--dtype f32|bf16]\n"
    "      a .safetensors file or a directory (with model.safetensors.index.json)\n"
    "      -> a consolidated HDF5 file for `init hdf5`. --dtype default: bf16 for\n"
    "      BF16 tensors, f32 otherwise\n"
    "  [mpirun -np N] ftrain-convert sharded-to-h5 STEP_DIR OUT.h5 [--dtype f32|bf16]\n"
    "  [mpirun -np N] ftrain-convert sharded-to-safetensors STEP_DIR OUTDIR [--shard-size 5GB] [--dtype f32|bf16]\n"
    "      a sharded checkpoint (step_<N>/) -> consolidated HDF5 or safetensors, no training\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::optional<DType> parse_dtype_option(const std::string& text) {
  if (text == "f32") return DType::f32;
  if (text == "bf16") return DType::bf16;
  throw UsageError("--dtype '" + text + "': expected f32 or bf16");
}

}  // namespace

int convert_main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    for (const auto& a : args)
      if (a == "--help" || a == "-h" || a == "help") {
        std::fputs(kUsage, stdout);
        return 0;
      }
    if (args.empty()) throw UsageError("missing command");
    const std::string command = args[0];
    if (command == "deck-model") {
      if (args.size() != 2) throw UsageError("deck-model takes one path: a model directory or its config.json");
      std::filesystem::path path = args[1];
      if (std::filesystem::is_directory(path)) path /= "config.json";
      std::ifstream in(path);
      if (!in) throw UserError(path.string() + ": cannot open");
      const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
      if (config.is_discarded()) throw UserError(path.string() + ": not valid JSON");
      std::printf("%s\n", deck_model_line(config, path.string()).c_str());
      return 0;
    }
    std::vector<std::string> positional;
    std::optional<DType> dtype;
    std::string shard_size = "5GB";
    std::string tokenizer_dir;
    for (std::size_t i = 1; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "--dtype" || a == "--shard-size" || a == "--tokenizer") {
        if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
        if (a == "--dtype") dtype = parse_dtype_option(args[++i]);
        else if (a == "--tokenizer") tokenizer_dir = args[++i];
        else shard_size = args[++i];
      } else if (a.rfind("--", 0) == 0) {
        throw UsageError("unknown option '" + a + "'");
      } else {
        positional.push_back(a);
      }
    }
    if (command != "h5-to-safetensors" && command != "safetensors-to-h5")
      throw UsageError("unknown command '" + command +
                       "' (expected h5-to-safetensors, safetensors-to-h5 or deck-model)");
    if (positional.size() != 2) throw UsageError(command + " takes exactly two paths, IN and OUT");
    ConvertSummary done;
    if (command == "h5-to-safetensors") {
      done = h5_to_safetensors(positional[0], positional[1], parse_byte_size(shard_size), dtype, tokenizer_dir);
    } else {
      for (std::size_t i = 1; i < args.size(); ++i)
        if (args[i] == "--shard-size" || args[i] == "--tokenizer")
          throw UsageError(args[i] + " applies to h5-to-safetensors only");
      done = safetensors_to_h5(positional[0], positional[1], dtype);
    }
    std::printf("%s -> %s: %lld tensors, %.1f MB in %lld file(s)\n", positional[0].c_str(), positional[1].c_str(),
                static_cast<long long>(done.tensors), static_cast<double>(done.bytes) / 1e6,
                static_cast<long long>(done.files));
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ftrain-convert: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "ftrain-convert: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ftrain::ckpt
