// A run's checkpoints: sharded ones during training, blocking or (`async
// on`) written in the background (ckpt/checkpoint_writer.hpp; every call is
// collective), each refused, having saved nothing, when the state is not
// finite; and the consolidated file `save_final` writes at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "ckpt/checkpoint_writer.hpp"
#include "comm/communicator.hpp"
#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "plugin/model.hpp"
#include "train/run_output.hpp"

namespace ftrain {

class Checkpointing {
 public:
  // Writes nothing when the deck has no `checkpoint ... dir`.
  Checkpointing(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model, RunOutput& out);

  bool enabled() const { return writer_.has_value(); }
  // What the next save records besides the step: its lineage parent (the
  // checkpoint resumed), the training time before this run and when this
  // run's training began, the frozen LoRA base's checksum, the global batch.
  void set_parent(const std::string& directory) { parent_ = directory; }
  void set_timing(std::chrono::steady_clock::time_point start, double prior_elapsed) {
    start_ = start;
    prior_elapsed_ = prior_elapsed;
  }
  void set_base_checksum(std::uint64_t checksum) { base_checksum_ = checksum; }
  void set_global_batch(std::int64_t global_batch) { global_batch_ = global_batch; }

  // Each says what its call did and returns its error (every rank got the
  // same one: the run then stops cleanly with it); "" when none or disabled.
  // poll commits a background save once every rank has written its file;
  // finish waits for the save in flight and commits it.
  std::string poll(std::int64_t steps_done);
  std::string finish();
  bool in_flight() const { return writer_ && writer_->in_flight(); }
  const std::string& last_committed() const { return writer_->last_committed(); }

  // Saves step `done`. Returns why it refused, having saved nothing, when a
  // master weight or the loss is not finite (committing would make that
  // state `latest`, and `keep` would prune the last good checkpoint for it),
  // or why the save failed; "" once saved (or, asynchronously, started).
  // `last`: nothing follows.
  std::string save(std::int64_t done, double loss, double lr, double grad_norm, bool last);

 private:
  std::string report(const ckpt::CheckpointWriter::Outcome& outcome);

  FsdpEngine& engine_;
  const RunConfig& config_;
  const Model& model_;
  RunOutput& out_;
  std::optional<ckpt::CheckpointWriter> writer_;
  std::string parent_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  double prior_elapsed_ = 0;
  std::uint64_t base_checksum_ = 0;
  std::int64_t global_batch_ = 0;
};

// `save_final PATH`: the consolidated state dict, after training. Collective.
void save_final_weights(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model,
                        RunOutput& out);

}  // namespace ftrain
