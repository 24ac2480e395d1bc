#include "train/resume.hpp"

#include <cstdio>
#include <sstream>

#include "ckpt/sharded_checkpoint.hpp"
#include "base/error.hpp"
#include "optim/lr_schedule.hpp"
#include "train/run_settings.hpp"
#include "train/weights.hpp"

namespace ftrain {

namespace {

void check_seed(const RunConfig& c, const std::string& directory, std::uint64_t seed) {
  if (seed != c.seed)
    FT_USER_ERROR() << c.resume.where.str() << ": checkpoint " << directory << " was written with seed " << seed
                    << ", the deck says seed " << c.seed << " (data order depends on it)";
}

// The adapters only fit the base they were trained on. The checksum hashes
// the base as stored: a checkpoint whose base was stored in another dtype
// (an f32 base resumed under bf16, or the reverse) is compared by how the
// base was initialised instead, and the run says so.
void check_lora_base(const RunConfig& c, const ckpt::LoadedInfo& loaded, std::uint64_t base,
                     const std::string& base_dtype, RunOutput& out) {
  if (base == loaded.base_checksum) return;
  if (loaded.base_dtype != base_dtype && loaded.base_init == base_init_text(c)) {
    out.say("resume: LoRA checkpoint " + loaded.directory + " was trained on the same base (" + loaded.base_init +
            ") stored in " + loaded.base_dtype + ", this run stores it in " + base_dtype +
            ": checksums of different dtypes do not compare, so the base was checked by its init line only\n");
    return;
  }
  FT_USER_ERROR() << c.resume.where.str() << ": LoRA checkpoint " << loaded.directory
                  << " was trained on a base model (" << loaded.base_init << ", checksum "
                  << checksum_hex(loaded.base_checksum) << ") that differs from the one this deck loads ("
                  << base_init_text(c) << ", checksum " << checksum_hex(base)
                  << (loaded.base_dtype != base_dtype ? " of its " + base_dtype + " storage (the checkpoint's: " +
                                                            loaded.base_dtype + ")"
                                                      : std::string())
                  << "); the adapters only fit their base: restore it or start afresh";
}

// Training time and global batch of the run that wrote it (rank 0 reads its
// manifest; every rank saves elapsed_s in its next checkpoint). Returns the
// precision it was written under (rank 0's, "" elsewhere).
std::string read_prior_run(Communicator& world, const std::string& directory, ResumePoint& point) {
  double prior[4] = {0, 0, 0, 0};
  std::string written_precision;
  if (world.rank() == 0) {
    const auto info = ckpt::read_checkpoint_info(directory);
    written_precision = info.precision;
    if (const auto it = info.scalars.find("elapsed_s"); it != info.scalars.end()) prior[0] = it->second;
    if (const auto it = info.scalars.find("global_batch"); it != info.scalars.end()) prior[1] = it->second;
    prior[2] = info.world_size;
    prior[3] = static_cast<double>(info.max_steps);
  }
  point.prior_elapsed = world.all_reduce_max(prior[0]);
  point.prior_global_batch = static_cast<std::int64_t>(world.all_reduce_max(prior[1]));
  point.prior_world = static_cast<int>(world.all_reduce_max(prior[2]));
  point.prior_max_steps = static_cast<std::int64_t>(world.all_reduce_max(prior[3]));
  return written_precision;
}

std::string lr_text(double lr) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3e", lr);  // as the step line prints it
  return text;
}

}  // namespace

std::string max_steps_note(const RunConfig& c, const ResumePoint& point) {
  const std::int64_t before = point.prior_max_steps, now = c.max_steps;
  if (before <= 0 || before == now || point.step >= now) return "";  // the last: nothing left to train
  const optim::Schedule schedule = schedule_of(c);
  std::ostringstream m;
  m << "resume: max_steps changes from " << before << " (the run that wrote " << point.directory << ") to " << now;
  const double old_lr = optim::learning_rate(schedule, c.optimizer.lr, point.step, before);
  const double new_lr = optim::learning_rate(schedule, c.optimizer.lr, point.step, now);
  const std::int64_t old_warmup = optim::warmup_steps(schedule, before), new_warmup = optim::warmup_steps(schedule, now);
  if (schedule.kind == optim::ScheduleKind::constant && old_warmup == new_warmup) {
    m << ": the constant schedule does not depend on it; the run trains to step " << now << "\n";
    return m.str();
  }
  m << ": the " << c.schedule.kind << " schedule is recomputed over " << now << " steps, so the learning rate at step "
    << point.step + 1 << " is " << lr_text(new_lr) << " where the old run's schedule had " << lr_text(old_lr);
  if (old_warmup != new_warmup) m << ", warmup is " << new_warmup << " steps instead of " << old_warmup;
  if (schedule.kind != optim::ScheduleKind::constant)
    m << ", and it decays to min_lr " << c.schedule.min_lr << " at step " << now << " instead of " << before;
  m << "; to continue the old curve, resume with max_steps " << before << "\n";
  return m.str();
}

namespace {

std::string resumed_message(const RunConfig& c, const ckpt::LoadedInfo& loaded, const ResumePoint& point,
                            const std::string& written_precision, int shard_group, std::int64_t global_batch,
                            int world) {
  std::ostringstream m;
  m << "resumed from " << point.directory << " at step " << loaded.step << " (written by " << loaded.world_size
    << " rank(s), " << loaded.strategy << ", shard group " << loaded.shard_group_size
    << (loaded.tensor_parallel > 1 ? ", parallel tensor " + std::to_string(loaded.tensor_parallel) : "") << ")"
    << (loaded.resharded ? "; resharded to shard group " + std::to_string(shard_group) : "");
  if (loaded.tensor_parallel != c.parallel.tensor)
    m << "; from parallel tensor " << loaded.tensor_parallel << " to " << c.parallel.tensor
      << ": each element read from the old tensor rank that held it";
  m << "\n";
  if (!loaded.fp8_note.empty()) m << "resume: " << loaded.fp8_note << "\n";
  if (!written_precision.empty() && written_precision != deck::word(c.precision))
    m << "resume: the checkpoint was written under precision " << written_precision << ", this run uses "
      << c.precision << ": the master weights and the optimizer state stay f32 and are loaded unchanged; from step "
      << point.step + 1 << " the forward and backward passes compute in " << c.precision
      << ", so the loss curve may shift slightly at the resume\n";
  if (point.prior_global_batch > 0 && point.prior_global_batch != global_batch)
    m << "resume: the global batch changes from " << point.prior_global_batch << " samples per step ("
      << point.prior_world << " rank(s)) to " << global_batch << " (" << world << " rank(s) x micro "
      << c.batch.micro_batch << " x accumulate " << c.batch.grad_accum << "): step " << point.step + 1
      << " starts at another sample than the old run's would have, so some samples repeat or are skipped; keep "
         "micro x accumulate x ranks equal to continue the same data order\n";
  m << max_steps_note(c, point);
  return m.str();
}

}  // namespace

ResumePoint plan_resume(const RunConfig& c, bool is_root, ckpt::ResumePlan& plan) {
  ResumePoint point;
  const bool automatic = c.resume.automatic;
  if (automatic && c.checkpoint.dir.empty())
    FT_USER_ERROR() << c.resume.where.str() << ": resume auto needs a `checkpoint ... dir PATH` to look in";
  if (!is_root) return point;
  try {
    plan = automatic ? ckpt::plan_resume_auto(c.checkpoint.dir) : ckpt::plan_resume_path(c.resume.from);
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.resume.where.str() << ": " << e.what();
  }
  while (!plan.candidates.empty()) {
    const std::string& found = plan.candidates.front();
    ckpt::LoadedInfo info;
    try {
      info = ckpt::read_checkpoint_info(found);
    } catch (const UserError& e) {
      if (!plan.fall_back) FT_USER_ERROR() << c.resume.where.str() << ": " << e.what();
      plan.skip_first(e.what());
      continue;
    }
    check_seed(c, found, info.seed);
    point.step = info.step;
    point.prior_max_steps = info.max_steps;
    point.directory = found;
    break;
  }
  if (plan.candidates.empty() && plan.found_any) {
    std::string why;
    for (const auto& note : plan.notes) why += "\n  " + note;
    FT_USER_ERROR() << c.resume.where.str() << ": resume auto: " << c.checkpoint.dir
                    << " holds checkpoints but none on the lineage of `latest` is intact:" << why
                    << "\nremove the directory to start afresh, or resume a checkpoint explicitly";
  }
  return point;
}

ResumePoint resume_training(FsdpEngine& engine, Communicator& world, const RunConfig& c, ckpt::ResumePlan& plan,
                            std::int64_t global_batch, RunOutput& out) {
  ResumePoint point;
  if (plan.candidates.empty()) {
    for (const auto& note : plan.notes) out.say("resume " + c.resume.from + ": " + note + "\n");
    out.say("resume " + c.resume.from + ": no complete checkpoint found; starting from step 0\n");
    return point;
  }
  const auto loaded = ckpt::load_resume(engine, world, plan);
  if (loaded.lora)
    check_lora_base(c, loaded, engine.base_checksum(), std::string(dtype_name(engine.frozen_base_dtype())), out);
  check_seed(c, loaded.directory, loaded.seed);
  point.directory = loaded.directory;
  point.step = loaded.step;
  const std::string written_precision = read_prior_run(world, loaded.directory, point);
  for (const auto& note : plan.notes) out.say("resume " + c.resume.from + ": " + note + "\n");
  out.say(resumed_message(c, loaded, point, written_precision, engine.shard_comm().size(), global_batch,
                          world.size()));
  return point;
}

}  // namespace ftrain
