// Ranks stop when their launcher is gone (issue 35).
//
// After kill -9 of mpirun the ranks ran on for about a second (until the MPI
// runtime noticed) and could commit a checkpoint nobody would ever resume
// into: a restart in that window ran beside them. A rank's parent is its
// launcher (mpirun, orted/prted, slurmstepd, pbs_mom's tm task); when the
// launcher dies the kernel re-parents the rank (getppid() changes). A watch
// thread checks this every 50 ms and ends the process at once (no destructor
// runs, so nothing is flushed or committed; the kernel releases the run
// directory lock with the process). The checkpoint commit checks it too,
// right before its rename, so the window is closed there.
//
// Only under a launcher (the MPI launch environment is set): a singleton
// `ftrain deck.in` started from a shell that then exits must run on.
#pragma once

namespace ftrain {

// Records the current parent and starts the watch; a no-op outside a launcher
// or when called again.
void start_launcher_watch();

// True once the parent recorded by start_launcher_watch() is gone.
bool launcher_gone();

// If the launcher is gone: says so on stderr and ends the process now
// (_exit), naming `what` was about to happen.
void stop_if_launcher_gone(const char* what);

}  // namespace ftrain
