#include "train/divergence_advice.hpp"

#include <sstream>

namespace ftrain {

std::string divergence_advice(const RunConfig& c) {
  std::ostringstream m;
  const bool learning = c.optimizer.lr > 0;
  const bool clipping = c.clip_grad_norm > 0;
  if (!learning) {
    // No update moved the weights: what diverged came in with them or the data.
    m << "The learning rate is 0, so no update moved the weights: the initial weights";
    if (c.init.kind == "safetensors" || c.init.kind == "hdf5")
      m << " (" << c.init.where.str() << ": init " << c.init.kind << " " << c.init.path << ")";
    m << ", the data or the model's arithmetic (precision " << c.precision << ") produce the non-finite value.";
    return m.str();
  }
  m << "Lower the learning rate (lr " << c.optimizer.lr << ")";
  if (clipping)
    m << " or lengthen the warm-up; clipping is on (clip_grad_norm " << c.clip_grad_norm << ").";
  else
    m << " or set clip_grad_norm (it is off).";
  return m.str();
}

}  // namespace ftrain
