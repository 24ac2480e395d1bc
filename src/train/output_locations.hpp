// Output locations, checked before anything runs.
//
// A run that cannot write its checkpoints should fail at `ftrain --check`, or
// at the latest before step 1, not hours later at the first save (issue 22).
// Every rank checks every location, because every rank writes to each of
// them (its shard file, its log, its slices of the consolidated file) and
// ranks on different nodes can see different mounts.
#pragma once

#include <string>
#include <vector>

#include "deck/config.hpp"

namespace ftrain {

struct OutputLocation {
  std::string what;   // "run_dir", "checkpoint dir", "save_final directory"
  std::string dir;    // the directory that must be writable
  DeckLocation where; // the deck command that set it (file empty: a default)
};

// run_dir, the checkpoint dir and save_final's directory, as the deck sets them.
std::vector<OutputLocation> output_locations(const RunConfig& config);

// create = false (`--check`): nothing is created; the nearest existing
// ancestor of each directory must be a directory this process can write in.
// create = true (before training): each directory is created and written.
// Writing is tested with a real file (created, written, removed), which also
// catches read-only mounts and full disks where permission bits say nothing
// (root passes every permission check). Throws UserError naming the deck
// file:line of the command and the reason.
void check_output_locations(const std::vector<OutputLocation>& locations, bool create);

}  // namespace ftrain
