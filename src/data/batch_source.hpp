// BatchSource: what the trainer draws micro-batches from (tokens or images).
//
// Contract (the same for every kind of data, so results do not depend on the
// number of ranks): global step s has a fixed, documented list of samples;
// rank r at micro-step a asks for a contiguous range of them. Evaluation
// reads samples in file order. Targets equal to -100 are ignored by the loss
// (padding); the trainer counts the others to normalise the loss.
#pragma once

#include <cstdint>

#include "data/batch.hpp"

namespace ftrain::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Samples first_sample .. first_sample + count - 1 of global step `step`;
  // allocates batch.inputs / batch.targets with `count` rows.
  virtual void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Batch& batch) = 0;
  // Number of evaluation samples (file order).
  virtual std::int64_t eval_size() const = 0;
  // Evaluation samples first .. first + count - 1 into a batch of `rows` rows
  // (count <= rows); rows past count are padding whose targets are all -100.
  virtual void fill_eval(std::int64_t first, std::int64_t count, std::int64_t rows, Batch& batch) = 0;
  // Largest class / token id + 1 the data can contain (checked against the model).
  virtual std::int64_t label_space() const = 0;
};

}  // namespace ftrain::data
