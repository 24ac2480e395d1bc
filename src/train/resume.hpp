// Resuming a run: which checkpoint (rank 0 plans it before any collective,
// walking `resume auto`'s lineage back past damaged checkpoints), then, once
// the engine exists, loading it on every rank and saying what changed since
// the run that wrote it (precision, global batch, max_steps, the shard group).
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/lineage.hpp"
#include "comm/communicator.hpp"
#include "deck/config.hpp"
#include "fsdp/engine.hpp"
#include "train/run_output.hpp"

namespace ftrain {

// Where a run starts: step 0, or the checkpoint it resumed.
struct ResumePoint {
  std::string directory;               // the checkpoint loaded; empty = fresh start
  std::int64_t step = 0;               // optimizer steps already done
  double prior_elapsed = 0;            // training seconds of the runs before this one (scalar elapsed_s)
  std::int64_t prior_global_batch = 0; // samples per step of the run that wrote it (0 = unknown)
  int prior_world = 0;
  std::int64_t prior_max_steps = 0;    // max_steps of the deck that wrote it (0 = unknown)
};

// Rank 0 (is_root) decides which checkpoint `resume` takes (its step and
// the max_steps it was written under), so ranks that
// see the file system differently cannot disagree; the others only check
// the deck. The first candidate's rank-0 file must open (a damaged
// superblock shows here): resume auto falls back along the lineage, resume
// PATH stops. A checkpoint at max_steps is a finished run, which the caller
// reports as "nothing left to train". UserErrors name the resume line.
ResumePoint plan_resume(const RunConfig& c, bool is_root, ckpt::ResumePlan& plan);

// The schedule is a function of max_steps: when the deck's differs from the
// one `point` was written under, what that does to the learning rate from
// the resumed step on ("resume: max_steps changes from ...\n"); else "".
std::string max_steps_note(const RunConfig& c, const ResumePoint& point);

// Every rank loads the checkpoint rank 0 planned (the plan is shared first);
// a candidate that fails to load on any rank is skipped by all of them
// (resume auto) or stops the run (resume PATH). Under LoRA the frozen base
// the deck loaded must be the one the adapters were trained on. Says what it
// loaded and what differs from the writing run. Collective.
ResumePoint resume_training(FsdpEngine& engine, Communicator& world, const RunConfig& c, ckpt::ResumePlan& plan,
                            std::int64_t global_batch, RunOutput& out);

}  // namespace ftrain
