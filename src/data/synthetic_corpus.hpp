// A small, learnable synthetic corpus with a known best achievable loss.
//
// The token stream is a first-order Markov chain over vocab V (V >= 3), made
// deterministically from the seed:
//  * eos_id = V - 1 ends documents; every other token is an ordinary state.
//  * After eos the next token is one of `successors` start tokens; after an
//    ordinary token it is eos with probability p_end = 1/mean_document_tokens,
//    otherwise one of that token's `successors` successor tokens. Successors
//    are distinct ordinary tokens drawn from the seed; their probabilities are
//    a Dirichlet(1) draw (normalised exponentials), also from the seed.
//  * Documents are sampled from the chain starting after an eos; the file
//    ends with the last (possibly truncated) document and its eos, so it holds
//    exactly n_tokens tokens.
//
// Because the next token depends only on the current one, the cross-entropy
// of an ideal model is the chain's entropy rate
//     H = sum_i pi_i * H(P(. | i))   (nats/token, pi = stationary distribution),
// which write_synthetic_corpus computes (power iteration) and returns. A model
// that learns the bigram statistics reaches a loss of about H, far below the
// ln V of a uniform guess; with the defaults (4 successors, documents of ~64
// tokens) H is about 1.1 nats whatever V (1.14 for V = 32, 1.15 for V = 512).
//
// The chain (structure and probabilities) depends only on seed, vocab_size,
// successors and mean_document_tokens; sample_stream only changes which
// documents are drawn, so a training file (stream 0) and an evaluation file
// (stream 1) come from the same distribution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ftrain::data {

struct SyntheticCorpusOptions {
  std::int64_t successors = 4;             // next-token choices per state
  double mean_document_tokens = 64.0;      // 1 / p_end
  std::uint64_t sample_stream = 0;         // 0 = training file, 1 = evaluation file, ...
};

struct SyntheticCorpusStats {
  std::int64_t n_tokens = 0;
  std::int64_t n_documents = 0;
  std::int64_t vocab_size = 0;
  std::int64_t eos_id = 0;
  double entropy_rate_nats = 0.0;     // best achievable mean loss per token
  double uniform_entropy_nats = 0.0;  // ln V, the loss of a uniform prediction
};

// The chain itself, for tests and documentation.
struct MarkovChain {
  std::int64_t vocab_size = 0;
  std::int64_t eos_id = 0;
  // Row i: next tokens and their probabilities (sum to 1).
  std::vector<std::vector<std::int64_t>> next;
  std::vector<std::vector<double>> prob;
};

MarkovChain make_synthetic_chain(std::int64_t vocab_size, std::uint64_t seed, const SyntheticCorpusOptions& options);
// Stationary distribution by power iteration (the chain is aperiodic and the
// states reachable from eos form one class).
std::vector<double> stationary_distribution(const MarkovChain& chain);
double entropy_rate_nats(const MarkovChain& chain);

// Writes the corpus to `path` (a token file, see token_file.hpp).
SyntheticCorpusStats write_synthetic_corpus(const std::string& path, std::int64_t n_tokens,
                                            std::int64_t vocab_size, std::uint64_t seed,
                                            const SyntheticCorpusOptions& options = {});

}  // namespace ftrain::data
