#include "train/checkpointing.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "ckpt/consolidated.hpp"
#include "train/divergence_advice.hpp"
#include "train/weights.hpp"
#include "train/run_settings.hpp"

namespace ftrain {

namespace {

std::string joined_deck(const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  return text;
}

}  // namespace

Checkpointing::Checkpointing(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model,
                             RunOutput& out)
    : engine_(engine), config_(c), model_(model), out_(out) {
  if (!c.checkpoint.dir.empty())
    writer_.emplace(engine, world,
                    ckpt::CheckpointWriter::Options{c.checkpoint.dir, static_cast<int>(c.checkpoint.keep),
                                                    c.checkpoint.async});
}

std::string Checkpointing::report(const ckpt::CheckpointWriter::Outcome& outcome) {
  for (const auto& line : outcome.lines) out_.say(line);
  return outcome.error;
}

std::string Checkpointing::poll(std::int64_t steps_done) { return writer_ ? report(writer_->poll(steps_done)) : ""; }

std::string Checkpointing::finish() { return writer_ ? report(writer_->finish()) : ""; }

std::string Checkpointing::save(std::int64_t done, double loss, double lr, double grad_norm, bool last) {
  const RunConfig& c = config_;
  const std::string poisoned = engine_.first_non_finite(FsdpEngine::ShardState::master);
  if (!poisoned.empty()) {
    const std::string pending = finish();  // an earlier, finite save in flight
    return "step " + std::to_string(done) + ": a master weight is not finite (first: " + poisoned +
           "); no checkpoint was written or pruned. " + divergence_advice(c, done) +
           (pending.empty() ? "" : " Also: " + pending);
  }
  if (!std::isfinite(loss)) {  // finite gradients, yet the loss sum overflowed (divergence is the norm's flag)
    const std::string pending = finish();
    return "step " + std::to_string(done) + ": the loss is " + std::to_string(loss) +
           "; no checkpoint was written or pruned. " + divergence_advice(c, done) +
           (pending.empty() ? "" : " Also: " + pending);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ckpt::SaveInfo info;
  info.step = done;
  info.tensor_parallel = engine_.grid().tensor_size();
  info.seed = c.seed;
  info.strategy = std::string(deck::word(c.fsdp.strategy));
  info.base_checksum = base_checksum_;
  info.base_init = base_init_text(c);
  info.deck_text = joined_deck(c.resolved_lines);
  info.scalars = {{"loss", loss},
                  {"lr", lr},
                  {"grad_norm", grad_norm},
                  {"elapsed_s", prior_elapsed_ + std::chrono::duration<double>(t0 - start_).count()},
                  {"global_batch", static_cast<double>(global_batch_)}};
  info.consolidated = c.checkpoint.consolidated;
  info.model_name = c.model.name;
  info.model_config = model_.config();
  info.parent_directory = parent_;
  const std::string error = report(writer_->save(std::move(info), last));
  if (!writer_->last_committed().empty()) parent_ = writer_->last_committed();
  return error;
}

void save_final_weights(FsdpEngine& engine, Communicator& world, const RunConfig& c, const Model& model,
                        RunOutput& out) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto parent = std::filesystem::path(c.save_final.path).parent_path();
  std::error_code ec;
  if (world.rank() == 0 && !parent.empty()) std::filesystem::create_directories(parent, ec);
  world.barrier();
  ckpt::save_consolidated(engine, world, c.save_final.path, c.model.name, model.config(),
                          saved_dtype(c));
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%.2f s)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  out.say("save_final: consolidated state dict -> " + c.save_final.path + buf);
}

}  // namespace ftrain
