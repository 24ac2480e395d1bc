#include "train/weights.hpp"

#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "ckpt/consolidated.hpp"
#include "ckpt/peft_adapter.hpp"
#include "ckpt/safetensors_dir.hpp"
#include "base/error.hpp"

namespace ftrain {

std::string base_init_text(const RunConfig& c) {
  std::ostringstream t;
  if (c.init.kind == deck::InitKind::random) t << "init random std " << c.init.std << " seed " << c.seed;
  else t << "init " << c.init.kind << " " << c.init.path;
  return t.str();
}

std::string checksum_hex(std::uint64_t checksum) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(checksum));
  return hex;
}

void check_consolidated_init(const RunConfig& c, Model& model) {
  std::vector<FlatEntry> parameters;
  for (int u = 0; u < model.num_units(); ++u) {
    for (const auto& spec : model.unit(u).params()) {
      if (!spec.tied_to.empty()) continue;
      FlatEntry e;
      e.name = spec.name;
      e.shape = spec.tensor_split_dim >= 0 ? spec.full_shape : spec.shape;  // the file holds the full tensor
      parameters.push_back(e);
    }
  }
  try {
    ckpt::check_consolidated(c.init.path, parameters);
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.init.where.str() << ": " << e.what();
  }
}

namespace {

// What does not fit in one tensor of the file, or "" when it fits.
std::string tensor_mismatch(const RunConfig& c, const Model& model, const ckpt::SafetensorsSource& file,
                            const ParamSpec& spec) {
  if (!file.contains(spec.name))
    return c.init.path + " has no tensor '" + spec.name + "' (shape " + shape_string(spec.shape) + ")";
  const ckpt::SafetensorsTensorInfo* found = nullptr;
  try {
    found = &file.tensor(spec.name);  // opens the shard that holds it: its header only
  } catch (const UserError& e) {
    return e.what();
  }
  const std::string where = file.file_of(spec.name) + ": tensor '" + spec.name + "'";
  if (!ckpt::st_dtype_is_float(found->dtype))
    return where + " has dtype " + std::string(ckpt::st_dtype_name(found->dtype)) + ", not a floating-point type";
  // A tensor rank's slice (parallel tensor) reads its region of the full tensor.
  const Shape& expected = spec.tensor_split_dim >= 0 ? spec.full_shape : spec.shape;
  if (found->shape == expected) return "";
  std::string m = where + " has shape " + shape_string(found->shape) + ", the model expects " + shape_string(expected);
  // [vocab, hidden] rows that differ only in the vocabulary: the weights
  // were trained with another tokenizer, or the model line's vocab_size is wrong.
  const bool vocabulary_rows = model.data_kind() == DataKind::tokens && expected.size() == 2 &&
                               found->shape.size() == 2 && expected[0] == model.output_size() &&
                               found->shape[1] == expected[1];
  if (vocabulary_rows)
    m += " (a vocabulary of " + std::to_string(found->shape[0]) + ": set `vocab_size " +
         std::to_string(found->shape[0]) + "` on the model line (" + c.model.where.str() +
         "), or use the tokenizer these weights were trained with)";
  return m;
}

}  // namespace

void check_safetensors_init(const RunConfig& c, Model& model) {
  std::optional<ckpt::SafetensorsSource> source;
  try {
    source.emplace(c.init.path);
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.init.where.str() << ": " << e.what();
  }
  std::vector<std::string> mismatches;
  for (int u = 0; u < model.num_units(); ++u) {
    for (const auto& spec : model.unit(u).params()) {
      if (!spec.tied_to.empty()) continue;
      if (std::string m = tensor_mismatch(c, model, *source, spec); !m.empty()) mismatches.push_back(std::move(m));
    }
  }
  if (mismatches.empty()) return;
  std::string all = c.init.where.str() + ": " + c.init.path + ": " + std::to_string(mismatches.size()) +
                    " tensor(s) do not fit the model:";
  for (const auto& m : mismatches) all += "\n  " + m;
  throw UserError(all);
}

namespace {

// Each rank reads only its shard's slices (mmap: untouched pages cost no
// memory); with sync_module_states only the root of each FSDP group (rank 0,
// or with parallel tensor T each tensor rank's first) reads and scatters.
void init_from_safetensors(FsdpEngine& engine, const RunConfig& c, int rank, bool sync_from_root) {
  std::unique_ptr<ckpt::SafetensorsSource> file;
  if (!sync_from_root || engine.grid().fsdp_rank(rank) == 0)
    file = std::make_unique<ckpt::SafetensorsSource>(c.init.path);
  ParameterSource read = [&](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    file->read_into(e.name, first, count, dst);
  };
  if (sync_from_root) engine.init_from_root(read); else engine.init_from(read);
}

void init_random(FsdpEngine& engine, const RunConfig& c, int rank, bool sync_from_root, RunOutput& out) {
  const std::uint64_t seed = c.seed;
  const double perturb = c.init.test_perturb_by_rank;  // test only (deck.md: init)
  ParameterSource random = [seed, perturb, rank](const FlatEntry& e, std::int64_t first, std::int64_t count,
                                                 float* dst) {
    random_init_values(seed, e, first, count, dst);
    if (perturb > 0) perturb_init_by_rank(seed, rank, perturb, e, first, count, dst);
  };
  if (perturb > 0) {
    std::ostringstream note;
    note << "init: test_perturb_by_rank " << perturb
         << ": rank r adds r x that x normal(0, 1) to what it initialises (test only)\n";
    out.say(note.str());
  }
  if (sync_from_root) engine.init_from_root(random); else engine.init_from(random);
}

}  // namespace

void initialise_weights(FsdpEngine& engine, const RunConfig& c, Communicator& world, bool resuming,
                        RunOutput& out) {
  const int rank = world.rank();
  const bool sync_from_root = c.fsdp.sync_module_states && c.init.kind != deck::InitKind::hdf5 && !resuming;
  // Resuming overwrites every master shard from the checkpoint: reading the
  // initial weights first (minutes for a 70B safetensors set, on every
  // requeue) would be wasted. Under LoRA a checkpoint holds the adapters
  // only: the frozen base is initialised as the deck says, then compared
  // with the checkpoint's.
  if (resuming && !engine.lora()) {
    // nothing: the resume fills master, exp_avg and exp_avg_sq
  } else if (c.init.kind == deck::InitKind::safetensors) {
    init_from_safetensors(engine, c, rank, sync_from_root);
  } else if (c.init.kind == deck::InitKind::hdf5) {
    ckpt::load_consolidated(engine, c.init.path);  // parallel HDF5: every rank reads its own slices
  } else {
    init_random(engine, c, rank, sync_from_root, out);
  }
  if (sync_from_root) out.say("sync_module_states: rank 0 initialised the model and scattered the shards\n");
  if (!c.lora.adapter_path.empty() && !resuming) {
    // Each rank reads its own adapter slices; a refusal (config or tensors
    // that do not fit) is the same on every rank, decided from the files.
    ckpt::load_adapter(engine, c.lora.adapter_path);
    out.say("init adapter: LoRA adapters from " + c.lora.adapter_path + "\n");
  }
}

std::uint64_t state_frozen_base(FsdpEngine& engine, RunOutput& out) {
  const std::uint64_t checksum = engine.base_checksum();
  out.say("lora: frozen base checksum " + checksum_hex(checksum) + ", " +
          std::to_string(engine.trainable_parameters()) + " trainable adapter parameters\n");
  return checksum;
}

void finish_lora(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model,
                 std::uint64_t base_checksum, double lora_scale, RunOutput& out) {
  const std::uint64_t now = engine.base_checksum();
  if (now != base_checksum)
    FT_THROW() << "lora: the frozen base changed during training (checksum " << checksum_hex(base_checksum) << " -> "
               << checksum_hex(now) << "): a base weight received an update";
  out.say("lora: frozen base bit-identical after training (checksum " + checksum_hex(now) + ")\n");
  if (!c.lora.save_adapter_path.empty()) {
    const bool tokens = model.data_kind() == DataKind::tokens;
    ckpt::save_adapter(engine, world, c.lora.save_adapter_path, c.init.kind == deck::InitKind::random ? "" : c.init.path,
                       tokens ? "CAUSAL_LM" : "");
    out.say("save_adapter: PEFT adapter -> " + c.lora.save_adapter_path + "\n");
  }
  if (c.lora.merge) {
    ckpt::merge_adapter(engine);
    out.say("merge_adapter: W += " + std::to_string(lora_scale) +
            " * B A folded into the base weights\n");
  }
}

}  // namespace ftrain
