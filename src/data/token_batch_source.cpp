#include "data/token_batch_source.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace ftrain::data {

TokenBatchSource::TokenBatchSource(const std::string& path, const TokenDatasetOptions& options)
    : dataset_(path, options) {}

void TokenBatchSource::fill_positions(Batch& batch) const {
  if (!dataset_.options().restart_positions) {
    batch.positions = Tensor();
    return;
  }
  batch.positions = Tensor::empty(batch.documents.shape(), DType::i32);
  fill_document_positions(batch.documents, batch.positions);
}

void TokenBatchSource::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Batch& batch) {
  const std::int64_t T = dataset_.seq_len();
  batch.inputs = Tensor::empty({count, T}, DType::i32);
  batch.targets = Tensor::empty({count, T}, DType::i32);
  dataset_.fill_batch(step, first_sample, count, batch.inputs, batch.targets);
  if (dataset_.options().document_mask) {
    batch.documents = Tensor::empty({count, T}, DType::i32);
    dataset_.fill_batch_documents(step, first_sample, count, batch.documents);
    fill_positions(batch);
  }
}

void TokenBatchSource::fill_eval(std::int64_t first, std::int64_t count, std::int64_t rows, Batch& batch) {
  FT_CHECK(count >= 0 && count <= rows) << "eval batch of " << count << " samples in " << rows << " rows";
  const std::int64_t T = dataset_.seq_len();
  batch.inputs = Tensor::zeros({rows, T}, DType::i32);
  batch.targets = Tensor::empty({rows, T}, DType::i32);
  auto* t = batch.targets.data_as<std::int32_t>();
  std::fill(t, t + rows * T, -100);
  if (count > 0) {
    Tensor in = batch.inputs.view({count, T});
    Tensor tg = batch.targets.view({count, T});
    dataset_.fill_windows(first, count, in, tg);
  }
  if (dataset_.options().document_mask) {
    // Padding rows (beyond count) are one document each: ids 0.
    batch.documents = Tensor::zeros({rows, T}, DType::i32);
    if (count > 0) {
      Tensor docs = batch.documents.view({count, T});
      dataset_.fill_window_documents(first, count, docs);
    }
    fill_positions(batch);
  }
}

std::int64_t TokenBatchSource::label_space() const {
  return static_cast<std::int64_t>(dataset_.file().header().vocab_size);
}

}  // namespace ftrain::data
