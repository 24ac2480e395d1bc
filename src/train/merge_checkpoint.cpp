#include "train/merge_checkpoint.hpp"

#include <filesystem>
#include <sstream>

#include "ckpt/consolidated.hpp"
#include "ckpt/hdf5_util.hpp"
#include "ckpt/sharded_checkpoint.hpp"
#include "base/error.hpp"
#include "deck/parser.hpp"
#include "fsdp/engine.hpp"
#include "plugin/loader.hpp"

namespace ftrain {

namespace {

// The `model ...` command of a resolved deck ("file:line: text" per line).
std::string model_command(const std::string& deck_text, const std::string& where) {
  std::istringstream lines(deck_text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto at = line.find(": model ");
    if (at != std::string::npos) return line.substr(at + 2);
  }
  FT_USER_ERROR() << where << ": the checkpoint's deck has no `model` command to rebuild the model from";
}

}  // namespace

MergeSummary merge_sharded_to_h5(const std::string& step_dir, const std::string& out_h5, DType stored,
                                 Communicator& world) {
  const ckpt::LoadedInfo info = ckpt::read_checkpoint_info(step_dir);
  const std::string rank0 = step_dir + "/rank_0.h5";
  std::string deck_text;
  {
    ckpt::h5::File file = ckpt::h5::File::open_read(rank0);
    deck_text = ckpt::h5::read_string(file.id(), "deck", rank0);
  }
  const std::string command = model_command(deck_text, rank0 + ":/deck");
  RunConfig config;
  try {
    config = parse_deck_string(command + "\nmax_steps 1\n", rank0 + ":/deck", {});
  } catch (const UserError& e) {
    FT_USER_ERROR() << "cannot rebuild the model from the checkpoint's deck (" << command << "): " << e.what();
  }
  ModelHandle model = PluginLoader().create_model(config.model.name, config.model.preset, config.model.overrides);
  FsdpOptions options;  // full_shard over `world`, f32: the state as it was trained
  FsdpEngine engine(*model, world, options);
  ckpt::load_sharded(engine, world, step_dir);
  const auto parent = std::filesystem::path(out_h5).parent_path();
  if (world.rank() == 0 && !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
  }
  world.barrier();
  ckpt::save_consolidated(engine, world, out_h5, config.model.name, model->config(), stored);
  MergeSummary summary;
  summary.model = config.model.name + " (" + (config.model.preset.empty() ? "default preset" : config.model.preset) + ")";
  summary.step = info.step;
  summary.written_by = info.world_size;
  for (int u = 0; u < model->num_units(); ++u)
    for (const auto& spec : model->unit(u).params())
      if (spec.tied_to.empty()) summary.parameters += shape_numel(spec.shape);
  return summary;
}

}  // namespace ftrain
