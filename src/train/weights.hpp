// The model's weights at the start and end of a run: the deck's `init`
// (random, a safetensors file or directory, a consolidated HDF5 file),
// checked against the model's parameters before any collective, then read
// into the engine's shards; LoRA adapters loaded, the frozen base's checksum
// stated, and at the end proved unchanged, exported and merged.
#pragma once

#include <cstdint>
#include <string>

#include "comm/communicator.hpp"
#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/run_output.hpp"

namespace ftrain {

// How the base weights were initialised, recorded in LoRA checkpoints next
// to their checksum (a resume that finds another base names both).
std::string base_init_text(const RunConfig& c);

// A checksum as the log prints it: 16 hex digits.
std::string checksum_hex(std::uint64_t checksum);

// `init hdf5 PATH`: every parameter's name and shape is in the file
// (UserError naming the init line).
void check_consolidated_init(const RunConfig& c, Model& model);

// `init safetensors PATH`: every parameter's name, shape and dtype is in
// the file or directory (only the index and each shard's JSON header are
// read, never tensor data), so `--check` finds a bad file and a run stops
// before any collective. One UserError naming the init line and every
// tensor that does not fit, each with the file that holds it (a vocabulary
// mismatch says which vocab_size the weights have).
void check_safetensors_init(const RunConfig& c, Model& model);

// Fills the engine's master shards as the deck's `init` says, unless a
// resume will overwrite them (a LoRA resume still initialises its frozen
// base), then loads `lora ... adapter PATH` on a fresh start. Collective.
void initialise_weights(FsdpEngine& engine, const RunConfig& c, Communicator& world, bool resuming,
                        RunOutput& out);

// LoRA: the frozen base's checksum after loading, stated in the log; the
// end of the run checks it against this.
std::uint64_t state_frozen_base(FsdpEngine& engine, RunOutput& out);

// LoRA at the end of training: the base must be bit-identical (frozen: no
// gradient, no optimizer state); then the deck's save_adapter and
// merge_adapter (which folds lora_scale * B A into the base). Collective.
void finish_lora(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model,
                 std::uint64_t base_checksum, double lora_scale, RunOutput& out);

}  // namespace ftrain
