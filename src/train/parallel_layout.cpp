#include "train/parallel_layout.hpp"

#include <sstream>

#include "base/error.hpp"

namespace ftrain {

namespace {

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() && text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// A config value as an integer; -1 when absent or not one.
std::int64_t integer(const std::map<std::string, std::string>& config, const std::string& key) {
  const auto it = config.find(key);
  if (it == config.end()) return -1;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(it->second, &used);
    return used == it->second.size() ? v : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

TensorSplit tensor_split(const std::string& architecture, const std::string& name, const std::vector<std::int64_t>& shape) {
  if (architecture != "llama" || shape.size() != 2) return TensorSplit::replicated;
  for (const char* column : {".q_proj.weight", ".k_proj.weight", ".v_proj.weight", ".gate_proj.weight", ".up_proj.weight"})
    if (ends_with(name, column)) return TensorSplit::output;
  for (const char* row : {".o_proj.weight", ".down_proj.weight"})
    if (ends_with(name, row)) return TensorSplit::input;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return TensorSplit::output;
  return TensorSplit::replicated;
}

std::int64_t tensor_slice_numel(TensorSplit split, std::int64_t numel, std::int64_t tensor) {
  // The layout check guarantees the split dimension divides by T.
  return split == TensorSplit::replicated || tensor <= 1 ? numel : numel / tensor;
}

std::vector<std::string> parallel_layout_problems(const std::string& architecture,
                                                  const std::map<std::string, std::string>& config, std::int64_t tensor,
                                                  std::int64_t context, std::int64_t seq_len) {
  std::vector<std::string> problems;
  if (tensor <= 1 && context <= 1) return problems;
  if (architecture != "llama") {
    problems.push_back("model " + architecture + " has no tensor or context parallel layout (the llama decoder has); "
                       "use parallel tensor 1 context 1 for it");
    return problems;
  }
  if (tensor > 1) {
    const struct {
      const char* key;
      const char* why;
    } divided[] = {
        {"num_attention_heads", "each tensor rank takes whole attention heads"},
        {"num_key_value_heads", "each tensor rank takes whole KV heads"},
        {"intermediate_size", "gate_proj and up_proj are split by output features, down_proj by input features"},
        {"vocab_size", "the embedding and the head are split by vocabulary rows"},
    };
    for (const auto& d : divided) {
      const std::int64_t value = integer(config, d.key);
      if (value < 0) {
        problems.push_back(std::string("the model's config has no ") + d.key + " to split over tensor " +
                           std::to_string(tensor));
      } else if (value % tensor != 0) {
        problems.push_back(std::string(d.key) + " " + std::to_string(value) + " is not divisible by tensor " +
                           std::to_string(tensor) + " (" + d.why + ")");
      }
    }
  }
  if (context > 1 && seq_len % (2 * context) != 0)
    problems.push_back("seq_len " + std::to_string(seq_len) + " is not divisible by 2 x context " +
                       std::to_string(context) + " = " + std::to_string(2 * context) +
                       " (each context rank holds 2 of the sequence's 2C equal chunks: ring attention's causal "
                       "load balancing)");
  return problems;
}

void check_parallel_layout(const std::string& architecture, const std::map<std::string, std::string>& config,
                           const RunConfig& c) {
  const std::vector<std::string> problems =
      parallel_layout_problems(architecture, config, c.parallel.tensor, c.parallel.context, c.batch.seq_len);
  if (problems.empty()) return;
  std::ostringstream what;
  what << c.parallel.where.str() << ": parallel tensor " << c.parallel.tensor << " context " << c.parallel.context
       << " does not fit model " << architecture;
  if (!c.model.where.file.empty()) what << " (" << c.model.where.str() << ")";
  if (problems.size() == 1) {
    what << ": " << problems[0];
  } else {
    what << ":";
    for (const std::string& p : problems) what << "\n    " << p;
  }
  if (c.parallel.context > 1 && c.batch.seq_len % (2 * c.parallel.context) != 0 && !c.batch.where.file.empty())
    what << " [seq_len from " << c.batch.where.str() << "]";
  FT_USER_ERROR() << what.str();
}

}  // namespace ftrain
