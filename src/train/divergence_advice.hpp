// What a diverged run's stop message suggests (issue 35): only what applies
// to the deck that ran. "Lower the learning rate or set clip_grad_norm" to a
// run with lr 0 and clipping on sends the user after causes that cannot be.
#pragma once

#include <cstdint>
#include <string>

#include "deck/config.hpp"

namespace ftrain {

// One or two sentences, starting with a capital letter and ending with '.',
// for the 1-based `step` that diverged: its learning rate is the schedule's
// (warm-up starts at 0, so step 1 of a warm-up trains with lr 0).
std::string divergence_advice(const RunConfig& config, std::int64_t step);

}  // namespace ftrain
