// Agreeing on errors before the next collective call.
//
// A rank that throws inside a sequence of collective calls (parallel HDF5
// writes, a checkpoint load that every rank must finish) leaves the others
// waiting in the next collective: the job hangs instead of reporting. The
// pattern used in src/ckpt/ is: each rank catches its own failure into a
// string, every rank calls agree_on_failure at the same point, and then
// either every rank continues or every rank throws the same UserError, so
// unwinding (whose RAII closes may themselves be collective) stays in step.
#pragma once

#include <string>

#include "comm/communicator.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

// Collective over `world`. `mine` is this rank's failure ("" = none). Returns
// "" on every rank when no rank failed; otherwise, on every rank, the message
// of the lowest failing rank, with "rank R: " in front when world.size() > 1
// and "(and K other rank(s))" after when more than one failed.
std::string agree_on_failure(Communicator& world, const std::string& mine);

// Collective over `world`: rank `root`'s `text` on every rank.
std::string broadcast_text(Communicator& world, const std::string& text, int root);

// Runs `body`, returning "" or the message of the UserError / std::exception
// it threw (internal errors keep their "internal error: " mark).
template <class Body>
std::string failure_of(Body&& body) {
  try {
    body();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("internal error: ") + e.what();
  }
  return {};
}

}  // namespace ftrain::ckpt
