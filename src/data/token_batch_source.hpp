// BatchSource over a token file (data/token_dataset.hpp holds the mapping).
#pragma once

#include <memory>
#include <string>

#include "data/batch_source.hpp"
#include "data/token_dataset.hpp"

namespace ftrain::data {

class TokenBatchSource final : public BatchSource {
 public:
  TokenBatchSource(const std::string& path, const TokenDatasetOptions& options);
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Batch& batch) override;
  std::int64_t eval_size() const override { return dataset_.n_windows(); }
  void fill_eval(std::int64_t first, std::int64_t count, std::int64_t rows, Batch& batch) override;
  std::int64_t label_space() const override;
  const TokenDataset& dataset() const { return dataset_; }

 private:
  // batch.positions from batch.documents (restart_positions), or none.
  void fill_positions(Batch& batch) const;

  TokenDataset dataset_;
};

}  // namespace ftrain::data
