// Training windows over a token file, and which window each sample reads.
//
// This header is the user documentation of the data order: with it, the token
// file and the deck, anyone can list the exact tokens of every sample of every
// step. T is the deck's seq_len, B the global batch (micro_batch x
// grad_accum x data-parallel ranks), seed the deck's seed.
//
// Windows. A window is T+1 consecutive tokens x[0..T]; the sample's inputs
// are x[0..T-1] and its targets x[1..T] (next-token prediction).
//  * packing on: window w is tokens [w*T, w*T + T + 1) of the file, so
//    consecutive windows share one token; n_windows = (n_tokens - 1) / T
//    (integer division; the tail that does not fill a window is unused).
//    Windows run across document boundaries (eos tokens stay in the stream).
//  * packing off: one window per document, in file order. Documents are the
//    runs of tokens up to and including each eos (a trailing run without eos
//    is a document too); documents shorter than 2 tokens have nothing to
//    predict and are skipped. The window is the document's first T+1 tokens;
//    a document of L < T+1 tokens fills inputs[0..L-2] and targets[0..L-2],
//    and the rest of the row has inputs = eos_id and targets = -100 (ignored
//    by the loss). Packing off needs a token file with an eos_id. In a
//    version 2 file (instruction data) the documents are the file's document
//    index instead (a chat turn may end with eos inside a document).
//
// Loss mask (version 2 files). Target t of a window is token x[t+1] of the
// file; when that token's loss-mask bit is 0 (a prompt token), the target is
// -100, so the loss and its gradient skip it and the trainer's mean runs over
// the trained (response and eos) targets only. Inputs are never masked: the
// model reads the prompt. With packing on, a window can hold the end of one
// example and the start of the next, and attention still runs across that
// boundary (share/doc/decisions.md, "Packing instruction data"); packing off
// gives each example a row of its own.
//
// Document mask (`document_mask on`, packing on, version 2 files). Input t
// of a packed window is file token w*T + t; its document id is d - d0, where
// d is the document of the file's index holding that token and d0 the one
// holding the window's first token (so ids start at 0 in every row and never
// decrease). Attention then lets a token see only the earlier tokens of its
// own document. RoPE positions (`positions restart`, the default with the
// mask): input t is at position t - t0, where t0 is the first column of the
// row holding t's document id, so every document (and the tail of one the
// window begins inside) starts at position 0, as it would alone.
// `positions continue`: input t is at position t.
//
// Sample order. Sample k (0 <= k < B) of 0-based global step s has the global
// index g = s*B + k; epoch e = g / n_windows, position p = g mod n_windows.
//  * shuffle off: window p.
//  * shuffle on: window perm_e[p], where perm_e is this Fisher-Yates
//    permutation of 0..n_windows-1 (rng = core/rng.hpp's rng::bits):
//        perm = [0, 1, ..., n-1]
//        for i = n-1 down to 1:
//            j = rng::bits(seed, kShuffleStream + e, i) mod (i + 1)
//            swap(perm[i], perm[j])
//    with kShuffleStream = rng::hash_name("ftrain.data.shuffle"). Each epoch
//    visits every window once; the modulo bias is below n/2^64.
// Which rank reads which of the B samples is the trainer's business
// (fill_batch takes a range of k); the result does not depend on it.
//
// Evaluation reads windows 0..n_windows-1 in file order (fill_windows),
// never shuffled.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "data/token_file.hpp"

namespace ftrain::data {

// Target value the loss ignores (the same value as kernels' kIgnoreIndex,
// kept literal here so the data layer does not depend on kernels).
inline constexpr std::int32_t kIgnoreTarget = -100;

inline const std::uint64_t kShuffleStream = rng::hash_name("ftrain.data.shuffle");

struct TokenDatasetOptions {
  std::int64_t seq_len = 128;       // T
  std::int64_t global_batch = 1;    // B, samples per optimizer step over all ranks
  bool packing = true;
  // Per-token document ids for the attention mask; needs packing and a
  // version 2 file (its document index).
  bool document_mask = false;
  // With document_mask: RoPE positions restart at 0 where each document of
  // a window begins (Batch::positions); false: they run on across the window.
  bool restart_positions = true;
  bool shuffle = false;
  std::uint64_t seed = 0;
};

class TokenDataset {
 public:
  TokenDataset(std::shared_ptr<const TokenFile> file, const TokenDatasetOptions& options);
  // Opens the file itself.
  TokenDataset(const std::string& path, const TokenDatasetOptions& options);

  std::int64_t n_windows() const { return n_windows_; }
  std::int64_t seq_len() const { return options_.seq_len; }
  const TokenFile& file() const { return *file_; }
  const TokenDatasetOptions& options() const { return options_; }

  // The window sample k of global step s reads (the mapping above).
  std::int64_t window_of_sample(std::int64_t step, std::int64_t sample);

  // Samples first_sample .. first_sample+count-1 of global step `step` into
  // host i32 tensors inputs/targets of shape [count, T].
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& inputs,
                  Tensor& targets);
  // Windows first_window .. first_window+count-1 in file order (evaluation).
  void fill_windows(std::int64_t first_window, std::int64_t count, Tensor& inputs, Tensor& targets) const;
  // document_mask: the document ids (above) of the same samples / windows
  // into a host i32 tensor of shape [count, T].
  void fill_batch_documents(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& documents);
  void fill_window_documents(std::int64_t first_window, std::int64_t count, Tensor& documents) const;

 private:
  void fill_window(std::int64_t window, std::int32_t* inputs, std::int32_t* targets) const;
  void fill_documents(std::int64_t window, std::int32_t* documents) const;
  // The document of the file's index that holds token i.
  std::int64_t document_of_token(std::int64_t i) const;
  // targets[t] = kIgnoreTarget where file token first_target_token + t is
  // untrained (version 2 loss mask); no-op for version 1 files.
  void apply_loss_mask(std::int64_t first_target_token, std::int64_t count, std::int32_t* targets) const;
  const std::vector<std::int64_t>& permutation(std::int64_t epoch);
  void check_batch_tensors(std::int64_t count, const Tensor& inputs, const Tensor& targets) const;
  void init();

  std::shared_ptr<const TokenFile> file_;
  TokenDatasetOptions options_;
  std::int64_t n_windows_ = 0;
  // packing off: window w is document [doc_begin_[w], doc_end_[w]).
  std::vector<std::int64_t> doc_begin_;
  std::vector<std::int64_t> doc_end_;
  // The permutations of the last two epochs used (a batch can straddle an
  // epoch boundary); fill_batch is therefore not thread-safe.
  struct CachedPermutation {
    std::int64_t epoch = -1;
    std::vector<std::int64_t> perm;
  };
  CachedPermutation cache_[2];
  int cache_next_ = 0;
};

// What packing off does to a version 2 file's examples (its document index)
// at seq_len T: a window holds an example's first T+1 tokens, so a longer
// one is truncated, and one whose trained (response) tokens all lie past
// them trains on nothing. `ftrain --check` and the run header report it.
struct ExampleTruncation {
  std::int64_t examples = 0;        // documents of 2 or more tokens (the windows)
  std::int64_t truncated = 0;       // longer than T+1 tokens
  std::int64_t untrained = 0;       // no trained target left within the window
  std::int64_t longest_tokens = 0;  // the longest example
};
// Why `options.document_mask` cannot run on `file` (needs packing and a
// document index), or "" when it can: the dataset's refusal, and --check's.
std::string document_mask_problem(const TokenFile& file, const TokenDatasetOptions& options);

// The RoPE positions of documents (host i32 [B, T] document ids, runs of
// equal ids) restarting at each document: into host i32 positions [B, T].
void fill_document_positions(const Tensor& documents, Tensor& positions);

// Requires file.has_document_index().
ExampleTruncation count_example_truncation(const TokenFile& file, std::int64_t seq_len);

// The Fisher-Yates permutation of 0..n-1 documented above.
std::vector<std::int64_t> shuffle_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace ftrain::data
