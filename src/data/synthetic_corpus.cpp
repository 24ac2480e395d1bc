// Synthetic Markov-chain corpus; the construction is documented in the header.
#include "data/synthetic_corpus.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "core/rng.hpp"
#include "data/token_file.hpp"

namespace ftrain::data {

namespace {

const std::uint64_t kStructureStream = rng::hash_name("ftrain.synthetic.structure");
const std::uint64_t kWeightStream = rng::hash_name("ftrain.synthetic.weights");
const std::uint64_t kSampleStream = rng::hash_name("ftrain.synthetic.sample");

void check_options(std::int64_t vocab_size, const SyntheticCorpusOptions& options) {
  if (vocab_size < 3 || vocab_size > 65536)
    FT_USER_ERROR() << "synthetic corpus: vocabulary size must be in [3, 65536], not " << vocab_size;
  if (options.successors < 1)
    FT_USER_ERROR() << "synthetic corpus: successors must be at least 1, not " << options.successors;
  if (!(options.mean_document_tokens >= 2.0 && options.mean_document_tokens <= 4096.0))
    FT_USER_ERROR() << "synthetic corpus: mean document length must be in [2, 4096] tokens, not "
                    << options.mean_document_tokens;
}

// `count` distinct ordinary tokens (ids 0..vocab-2) with Dirichlet(1) weights,
// drawn from the counters of `row`.
void draw_row(std::uint64_t seed, std::int64_t row, std::int64_t count, std::int64_t n_ordinary,
              std::vector<std::int64_t>& next, std::vector<double>& weight) {
  next.clear();
  weight.clear();
  std::uint64_t counter = static_cast<std::uint64_t>(row) << 20;
  while (static_cast<std::int64_t>(next.size()) < count) {
    const auto t = static_cast<std::int64_t>(rng::bits(seed, kStructureStream, counter++) %
                                             static_cast<std::uint64_t>(n_ordinary));
    if (std::find(next.begin(), next.end(), t) == next.end()) next.push_back(t);
  }
  double sum = 0.0;
  for (std::int64_t k = 0; k < count; ++k) {
    const double w = -std::log(rng::uniform(seed, kWeightStream, (static_cast<std::uint64_t>(row) << 20) + k));
    weight.push_back(w);
    sum += w;
  }
  for (double& w : weight) w /= sum;
}

}  // namespace

MarkovChain make_synthetic_chain(std::int64_t vocab_size, std::uint64_t seed, const SyntheticCorpusOptions& options) {
  check_options(vocab_size, options);
  MarkovChain chain;
  chain.vocab_size = vocab_size;
  chain.eos_id = vocab_size - 1;
  const std::int64_t n_ordinary = vocab_size - 1;
  const std::int64_t k = std::min(options.successors, n_ordinary);
  const double p_end = 1.0 / options.mean_document_tokens;
  chain.next.resize(static_cast<std::size_t>(vocab_size));
  chain.prob.resize(static_cast<std::size_t>(vocab_size));
  std::vector<std::int64_t> next;
  std::vector<double> weight;
  for (std::int64_t i = 0; i < vocab_size; ++i) {
    draw_row(seed, i, k, n_ordinary, next, weight);
    auto& row_next = chain.next[static_cast<std::size_t>(i)];
    auto& row_prob = chain.prob[static_cast<std::size_t>(i)];
    row_next = next;
    row_prob = weight;
    if (i != chain.eos_id) {
      for (double& p : row_prob) p *= 1.0 - p_end;
      row_next.push_back(chain.eos_id);
      row_prob.push_back(p_end);
    }
  }
  return chain;
}

std::vector<double> stationary_distribution(const MarkovChain& chain) {
  const auto v = static_cast<std::size_t>(chain.vocab_size);
  std::vector<double> pi(v, 0.0), next(v, 0.0);
  pi[static_cast<std::size_t>(chain.eos_id)] = 1.0;
  // Every ordinary state ends the document with probability p_end, which
  // makes the chain contract by (1 - p_end) per step: a few thousand
  // iterations reach double precision for documents of <= 4096 tokens.
  for (int iteration = 0; iteration < 2000000; ++iteration) {
    std::fill(next.begin(), next.end(), 0.0);
    for (std::size_t i = 0; i < v; ++i) {
      if (pi[i] == 0.0) continue;
      for (std::size_t k = 0; k < chain.next[i].size(); ++k)
        next[static_cast<std::size_t>(chain.next[i][k])] += pi[i] * chain.prob[i][k];
    }
    double change = 0.0;
    for (std::size_t i = 0; i < v; ++i) change += std::fabs(next[i] - pi[i]);
    pi.swap(next);
    if (change < 1e-14) return pi;
  }
  FT_THROW() << "power iteration did not converge for the synthetic chain";
}

double entropy_rate_nats(const MarkovChain& chain) {
  const std::vector<double> pi = stationary_distribution(chain);
  double rate = 0.0;
  for (std::size_t i = 0; i < pi.size(); ++i) {
    double row_entropy = 0.0;
    for (double p : chain.prob[i])
      if (p > 0.0) row_entropy -= p * std::log(p);
    rate += pi[i] * row_entropy;
  }
  return rate;
}

SyntheticCorpusStats write_synthetic_corpus(const std::string& path, std::int64_t n_tokens, std::int64_t vocab_size,
                                            std::uint64_t seed, const SyntheticCorpusOptions& options) {
  if (n_tokens < 1) FT_USER_ERROR() << "synthetic corpus " << path << ": token count must be positive, not " << n_tokens;
  const MarkovChain chain = make_synthetic_chain(vocab_size, seed, options);
  TokenFileWriter writer(path, static_cast<std::uint64_t>(vocab_size), static_cast<std::uint64_t>(chain.eos_id));

  const std::uint64_t stream = kSampleStream + options.sample_stream;
  std::uint64_t draw = 0;
  std::vector<std::uint32_t> document;
  std::int64_t written = 0;
  while (written < n_tokens) {
    // Room for this document's tokens, leaving one for its eos.
    const std::int64_t room = n_tokens - written - 1;
    document.clear();
    std::int64_t state = chain.eos_id;
    while (static_cast<std::int64_t>(document.size()) < room) {
      const double u = rng::uniform(seed, stream, draw++);
      const auto& next = chain.next[static_cast<std::size_t>(state)];
      const auto& prob = chain.prob[static_cast<std::size_t>(state)];
      std::size_t k = 0;
      double cumulative = prob[0];
      while (u >= cumulative && k + 1 < next.size()) cumulative += prob[++k];
      state = next[k];
      if (state == chain.eos_id) break;
      document.push_back(static_cast<std::uint32_t>(state));
    }
    writer.append_document(document);
    written += static_cast<std::int64_t>(document.size()) + 1;
  }
  writer.close();

  SyntheticCorpusStats stats;
  stats.n_tokens = static_cast<std::int64_t>(writer.header().n_tokens);
  stats.n_documents = static_cast<std::int64_t>(writer.header().n_documents);
  stats.vocab_size = vocab_size;
  stats.eos_id = chain.eos_id;
  stats.entropy_rate_nats = entropy_rate_nats(chain);
  stats.uniform_entropy_nats = std::log(static_cast<double>(vocab_size));
  return stats;
}

}  // namespace ftrain::data
