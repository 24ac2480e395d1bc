// Window extraction and sample order; the mapping is documented in the header.
#include "data/token_dataset.hpp"

#include <algorithm>
#include <utility>

#include "base/error.hpp"

namespace ftrain::data {

std::vector<std::int64_t> shuffle_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  FT_CHECK(n >= 0 && epoch >= 0) << "n " << n << " epoch " << epoch;
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) perm[i] = i;
  const std::uint64_t stream = kShuffleStream + static_cast<std::uint64_t>(epoch);
  for (std::int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<std::int64_t>(rng::bits(seed, stream, static_cast<std::uint64_t>(i)) %
                                             static_cast<std::uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::string document_mask_problem(const TokenFile& file, const TokenDatasetOptions& options) {
  if (!options.document_mask) return {};
  if (!options.packing)
    return "data " + file.path() + ": document_mask on needs packing on (with packing off every row already holds "
           "one document)";
  if (!file.has_document_index())
    return "data " + file.path() + ": document_mask on needs a token file with a document index (version 2, made "
           "by ftrain-prep); this one has none";
  return {};
}

ExampleTruncation count_example_truncation(const TokenFile& file, std::int64_t seq_len) {
  FT_CHECK(file.has_document_index() && seq_len >= 1) << file.path() << " seq_len " << seq_len;
  ExampleTruncation count;
  const auto documents = static_cast<std::int64_t>(file.header().n_documents);
  for (std::int64_t d = 0; d < documents; ++d) {
    const std::int64_t begin = file.document_begin(d), end = file.document_begin(d + 1);
    const std::int64_t length = end - begin;
    if (length < 2) continue;  // skipped by packing off: nothing to predict
    ++count.examples;
    count.longest_tokens = std::max(count.longest_tokens, length);
    if (length > seq_len + 1) ++count.truncated;
    // Targets are tokens begin+1 .. begin+used of the window (fill_window).
    const std::int64_t used = std::min(length, seq_len + 1) - 1;
    bool any_trained = false;
    for (std::int64_t i = begin + 1; i <= begin + used && !any_trained; ++i) any_trained = file.trained(i);
    if (!any_trained) ++count.untrained;
  }
  return count;
}

TokenDataset::TokenDataset(std::shared_ptr<const TokenFile> file, const TokenDatasetOptions& options)
    : file_(std::move(file)), options_(options) {
  init();
}

TokenDataset::TokenDataset(const std::string& path, const TokenDatasetOptions& options)
    : file_(std::make_shared<const TokenFile>(path)), options_(options) {
  init();
}

void TokenDataset::init() {
  FT_CHECK(file_ != nullptr);
  const std::int64_t T = options_.seq_len;
  if (T < 1) FT_USER_ERROR() << "data " << file_->path() << ": seq_len must be at least 1, not " << T;
  if (options_.global_batch < 1)
    FT_USER_ERROR() << "data " << file_->path() << ": the global batch must be at least 1, not "
                    << options_.global_batch;
  const std::int64_t n = file_->n_tokens();
  if (const std::string problem = document_mask_problem(*file_, options_); !problem.empty())
    FT_USER_ERROR() << problem;
  if (options_.packing) {
    n_windows_ = n >= 1 ? (n - 1) / T : 0;
    if (n_windows_ == 0)
      FT_USER_ERROR() << "data " << file_->path() << " holds " << n << " tokens, fewer than one window of seq_len+1 = "
                      << T + 1 << " tokens";
    return;
  }
  const TokenFileHeader& h = file_->header();
  if (file_->has_document_index()) {
    // Version 2: the index gives the documents (eos may occur inside one).
    for (std::int64_t d = 0; d < static_cast<std::int64_t>(h.n_documents); ++d) {
      const std::int64_t begin = file_->document_begin(d), end = file_->document_begin(d + 1);
      if (end - begin < 2) continue;
      doc_begin_.push_back(begin);
      doc_end_.push_back(end);
    }
    n_windows_ = static_cast<std::int64_t>(doc_begin_.size());
    if (n_windows_ == 0)
      FT_USER_ERROR() << "data " << file_->path() << " holds no document of 2 or more tokens (packing off)";
    return;
  }
  if (!h.has_eos())
    FT_USER_ERROR() << "data " << file_->path() << ": packing off needs document boundaries, but the token file "
                    << "has no eos id";
  std::int64_t begin = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (file_->raw_token(i) != h.eos_id) continue;
    if (i + 1 - begin >= 2) {
      doc_begin_.push_back(begin);
      doc_end_.push_back(i + 1);
    }
    begin = i + 1;
  }
  if (n - begin >= 2) {
    doc_begin_.push_back(begin);
    doc_end_.push_back(n);
  }
  n_windows_ = static_cast<std::int64_t>(doc_begin_.size());
  if (n_windows_ == 0)
    FT_USER_ERROR() << "data " << file_->path() << " holds no document of 2 or more tokens (packing off)";
}

const std::vector<std::int64_t>& TokenDataset::permutation(std::int64_t epoch) {
  for (const auto& c : cache_)
    if (c.epoch == epoch) return c.perm;
  CachedPermutation& slot = cache_[cache_next_];
  cache_next_ = 1 - cache_next_;
  slot.epoch = -1;  // stays invalid if the allocation below throws
  slot.perm = shuffle_permutation(n_windows_, options_.seed, epoch);
  slot.epoch = epoch;
  return slot.perm;
}

std::int64_t TokenDataset::window_of_sample(std::int64_t step, std::int64_t sample) {
  FT_CHECK(step >= 0 && sample >= 0 && sample < options_.global_batch)
      << "step " << step << " sample " << sample << " global batch " << options_.global_batch;
  const std::int64_t g = step * options_.global_batch + sample;
  const std::int64_t position = g % n_windows_;
  if (!options_.shuffle) return position;
  return permutation(g / n_windows_)[static_cast<std::size_t>(position)];
}

void TokenDataset::check_batch_tensors(std::int64_t count, const Tensor& inputs, const Tensor& targets) const {
  const Shape want{count, options_.seq_len};
  for (const Tensor* t : {&inputs, &targets}) {
    FT_CHECK(t->defined() && t->device() == Device::host && t->dtype() == DType::i32 && t->shape() == want)
        << "batch tensor " << t->describe() << ", expected i32" << shape_string(want) << " on the host";
  }
}

void TokenDataset::apply_loss_mask(std::int64_t first_target_token, std::int64_t count,
                                   std::int32_t* targets) const {
  if (!file_->header().has_loss_mask()) return;
  for (std::int64_t t = 0; t < count; ++t)
    if (!file_->trained(first_target_token + t)) targets[t] = kIgnoreTarget;
}

void TokenDataset::fill_window(std::int64_t window, std::int32_t* inputs, std::int32_t* targets) const {
  const std::int64_t T = options_.seq_len;
  // Read T+1 tokens into inputs[0..T-1] and one extra, then derive targets:
  // one pass over the file, ids validated by TokenFile::read.
  if (options_.packing) {
    file_->read(window * T, T, inputs);
    std::copy(inputs + 1, inputs + T, targets);
    file_->read(window * T + T, 1, targets + T - 1);
    apply_loss_mask(window * T + 1, T, targets);
    return;
  }
  const std::int64_t begin = doc_begin_[static_cast<std::size_t>(window)];
  const std::int64_t length = std::min(doc_end_[static_cast<std::size_t>(window)] - begin, T + 1);
  const std::int64_t used = length - 1;  // positions with a real target
  file_->read(begin, used, inputs);
  std::copy(inputs + 1, inputs + used, targets);
  file_->read(begin + used, 1, targets + used - 1);
  apply_loss_mask(begin + 1, used, targets);
  const auto pad = static_cast<std::int32_t>(file_->header().eos_id);
  std::fill(inputs + used, inputs + T, pad);
  std::fill(targets + used, targets + T, kIgnoreTarget);
}

std::int64_t TokenDataset::document_of_token(std::int64_t i) const {
  // The last d with document_begin(d) <= i (the index increases).
  std::int64_t lo = 0, hi = static_cast<std::int64_t>(file_->header().n_documents) - 1;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (file_->document_begin(mid) <= i) lo = mid; else hi = mid - 1;
  }
  return lo;
}

void TokenDataset::fill_documents(std::int64_t window, std::int32_t* documents) const {
  const std::int64_t T = options_.seq_len, first = window * T;
  const std::int64_t first_document = document_of_token(first);
  const auto n_documents = static_cast<std::int64_t>(file_->header().n_documents);
  std::int64_t d = first_document;
  for (std::int64_t t = 0; t < T; ++t) {
    while (d + 1 < n_documents && file_->document_begin(d + 1) <= first + t) ++d;
    documents[t] = static_cast<std::int32_t>(d - first_document);
  }
}

void TokenDataset::fill_batch_documents(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                                        Tensor& documents) {
  FT_CHECK(options_.document_mask && first_sample + count <= options_.global_batch);
  check_batch_tensors(count, documents, documents);
  const std::int64_t T = options_.seq_len;
  std::int32_t* out = documents.data_as<std::int32_t>();
  for (std::int64_t r = 0; r < count; ++r) fill_documents(window_of_sample(step, first_sample + r), out + r * T);
}

void TokenDataset::fill_window_documents(std::int64_t first_window, std::int64_t count, Tensor& documents) const {
  FT_CHECK(options_.document_mask && first_window + count <= n_windows_);
  check_batch_tensors(count, documents, documents);
  const std::int64_t T = options_.seq_len;
  std::int32_t* out = documents.data_as<std::int32_t>();
  for (std::int64_t r = 0; r < count; ++r) fill_documents(first_window + r, out + r * T);
}

void TokenDataset::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& inputs,
                              Tensor& targets) {
  FT_CHECK(count >= 0 && first_sample >= 0 && first_sample + count <= options_.global_batch)
      << "samples [" << first_sample << ", " << first_sample + count << ") of a global batch of "
      << options_.global_batch;
  check_batch_tensors(count, inputs, targets);
  const std::int64_t T = options_.seq_len;
  std::int32_t* in = inputs.data_as<std::int32_t>();
  std::int32_t* tg = targets.data_as<std::int32_t>();
  for (std::int64_t r = 0; r < count; ++r)
    fill_window(window_of_sample(step, first_sample + r), in + r * T, tg + r * T);
}

void TokenDataset::fill_windows(std::int64_t first_window, std::int64_t count, Tensor& inputs,
                                Tensor& targets) const {
  FT_CHECK(count >= 0 && first_window >= 0 && first_window + count <= n_windows_)
      << "windows [" << first_window << ", " << first_window + count << ") of " << n_windows_;
  check_batch_tensors(count, inputs, targets);
  const std::int64_t T = options_.seq_len;
  std::int32_t* in = inputs.data_as<std::int32_t>();
  std::int32_t* tg = targets.data_as<std::int32_t>();
  for (std::int64_t r = 0; r < count; ++r) fill_window(first_window + r, in + r * T, tg + r * T);
}

void fill_document_positions(const Tensor& documents, Tensor& positions) {
  FT_CHECK(documents.dtype() == DType::i32 && documents.ndim() == 2 && positions.dtype() == DType::i32 &&
           positions.shape() == documents.shape())
      << "document positions: documents " << documents.describe() << " and positions " << positions.describe()
      << " must be i32 [B, T] alike";
  const std::int64_t rows = documents.dim(0), time = documents.dim(1);
  const auto* ids = documents.data_as<std::int32_t>();
  auto* out = positions.data_as<std::int32_t>();
  for (std::int64_t b = 0; b < rows; ++b) {
    std::int64_t begin = 0;
    for (std::int64_t t = 0; t < time; ++t) {
      if (ids[b * time + t] != ids[b * time + begin]) begin = t;
      out[b * time + t] = static_cast<std::int32_t>(t - begin);
    }
  }
}

}  // namespace ftrain::data
