// What a diverged run's stop message suggests (issue 35): only what applies
// to the deck that ran. "Lower the learning rate or set clip_grad_norm" to a
// run with lr 0 and clipping on sends the user after causes that cannot be.
#pragma once

#include <string>

#include "deck/config.hpp"

namespace ftrain {

// One or two sentences, starting with a capital letter and ending with '.'.
std::string divergence_advice(const RunConfig& config);

}  // namespace ftrain
