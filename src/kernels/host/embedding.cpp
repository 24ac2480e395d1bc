// Host token embedding: out[n, :] = table[tokens[n], :] and its backward
// (ops.hpp).
//
// Conventions: tokens are i32 of any shape (N = numel); table / dtable are
// [V, C]; out / dout hold N * C elements with last dimension C. A token
// outside [0, V) is an error naming its value, its row and the table.
// Backward accumulates (+=) into dtable and is race-free under a threaded
// Kokkos: rows are sorted by token, and each distinct token's gradient row is
// summed in f32 (in row order) and added by exactly one iteration, with one
// rounding when dtable is bf16.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "base/error.hpp"
#include "kernels/host/float_spans.hpp"
#include "kernels/host/host_ops.hpp"
#include "kernels/math/embedding.hpp"

namespace ftrain::host {

using spans::HostPolicy;

namespace {

struct EmbeddingDims {
  std::int64_t tokens, vocab, width;
};

// Shapes and dtypes were checked by ops::embedding_* (kernels/op_checks.hpp).
EmbeddingDims host_embedding(const char* op, const Tensor& tokens, const Tensor& table, const char* table_role,
                             const Tensor& rows, const char* rows_role) {
  spans::require_on_host(op, {{&tokens, "tokens"}, {&table, table_role}, {&rows, rows_role}});
  return {tokens.numel(), table.dim(0), table.dim(1)};
}

// Throws on the first token outside [0, vocab), naming it.
void check_tokens(const char* op, const Tensor& tokens, std::int64_t vocab, const Tensor& table) {
  const std::int32_t* ids = static_cast<const std::int32_t*>(tokens.data());
  std::int64_t bad_count = 0;
  Kokkos::parallel_reduce(
      "ftrain::embedding::check_tokens", HostPolicy(0, tokens.numel()),
      [=](std::int64_t i, std::int64_t& count) { count += math::embedding_token_valid(ids[i], vocab) ? 0 : 1; }, bad_count);
  if (bad_count == 0) return;
  // Report the first bad row (a serial scan: this is the error path).
  for (std::int64_t i = 0; i < tokens.numel(); ++i) {
    if (!math::embedding_token_valid(ids[i], vocab)) {
      FT_THROW() << op << ": token " << ids[i] << " at row " << i << " of " << tokens.describe()
                 << " is outside the embedding table " << table.describe() << " (valid ids 0.." << vocab - 1
                 << ")";
    }
  }
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) {
  constexpr const char* op = "embedding_forward";
  const EmbeddingDims d = host_embedding(op, tokens, table, "table", out, "out");
  check_tokens(op, tokens, d.vocab, table);
  const std::int32_t* ids = static_cast<const std::int32_t*>(tokens.data());
  const Tensor ttable = table, tout = out;
  const std::int64_t width = d.width;
  Kokkos::parallel_for("ftrain::embedding::forward", HostPolicy(0, d.tokens), [=](std::int64_t n) {
    const std::int64_t src = static_cast<std::int64_t>(ids[n]) * width, dst = n * width;
    if (ttable.dtype() == tout.dtype()) {
      const std::size_t bytes = static_cast<std::size_t>(width) * dtype_size(ttable.dtype());
      std::memcpy(static_cast<char*>(tout.data()) + dst * static_cast<std::int64_t>(dtype_size(tout.dtype())),
                  static_cast<const char*>(ttable.data()) + src * static_cast<std::int64_t>(dtype_size(ttable.dtype())),
                  bytes);
      return;
    }
    const float* row = spans::read_f32(ttable, src, width, spans::thread_scratch(0, width));
    float* o = spans::write_f32_begin(tout, dst, spans::thread_scratch(1, width));
    std::copy(row, row + width, o);
    spans::write_f32_end(tout, dst, width, o);
  });
}

namespace {

// dtable[ids[i] - first_row] += dout[i] for the rows i in `rows`, grouped by
// token, each group summed in row order (stable: deterministic sums) and
// added once.
void add_rows_by_token(const char* label, const std::int32_t* ids, std::vector<std::int64_t> rows,
                       std::int64_t first_row, std::int64_t width, const Tensor& dout, Tensor& dtable) {
  std::stable_sort(rows.begin(), rows.end(), [ids](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  std::vector<std::int64_t> group_start;
  const auto kept = static_cast<std::int64_t>(rows.size());
  for (std::int64_t i = 0; i < kept; ++i) {
    if (i == 0 || ids[rows[static_cast<std::size_t>(i)]] != ids[rows[static_cast<std::size_t>(i - 1)]])
      group_start.push_back(i);
  }
  group_start.push_back(kept);
  const std::int64_t* sorted = rows.data();
  const std::int64_t* starts = group_start.data();
  const std::int64_t groups = static_cast<std::int64_t>(group_start.size()) - 1;
  const Tensor tdout = dout, tdtable = dtable;
  Kokkos::parallel_for(label, HostPolicy(0, groups), [=](std::int64_t g) {
    float* sum = spans::thread_scratch(0, width);
    std::fill(sum, sum + width, 0.0f);
    float* widened = spans::thread_scratch(1, width);
    for (std::int64_t k = starts[g]; k < starts[g + 1]; ++k) {
      const float* row = spans::read_f32(tdout, sorted[k] * width, width, widened);
      for (std::int64_t j = 0; j < width; ++j) sum[j] += row[j];
    }
    const std::int64_t token = ids[sorted[starts[g]]] - first_row;
    spans::accumulate_f32(tdtable, token * width, width, sum);
  });
}

}  // namespace

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  constexpr const char* op = "embedding_backward";
  if (!dtable.defined()) return;  // a frozen table (op_list.hpp): there is no activation gradient to compute
  const EmbeddingDims d = host_embedding(op, tokens, dtable, "dtable", dout, "dout");
  check_tokens(op, tokens, d.vocab, dtable);
  const std::int32_t* ids = static_cast<const std::int32_t*>(tokens.data());
  std::vector<std::int64_t> rows(static_cast<std::size_t>(d.tokens));
  std::iota(rows.begin(), rows.end(), std::int64_t{0});
  add_rows_by_token("ftrain::embedding::backward", ids, std::move(rows), 0, d.width, dout, dtable);
}

}  // namespace ftrain::host

namespace ftrain::host {

// The vocabulary-parallel lookup: this rank's rows of the table, zeros for
// the tokens another rank's rows hold (the tensor group's sum is the lookup).
void embedding_forward_rows(const Tensor& tokens, const Tensor& table, std::int64_t first_row, std::int64_t vocab,
                            Tensor& out) {
  constexpr const char* op = "embedding_forward_rows";
  const EmbeddingDims d = host_embedding(op, tokens, table, "table", out, "out");
  check_tokens(op, tokens, vocab, table);
  const std::int32_t* ids = static_cast<const std::int32_t*>(tokens.data());
  const Tensor ttable = table, tout = out;
  const std::int64_t width = d.width, rows = d.vocab;
  Kokkos::parallel_for("ftrain::embedding::forward_rows", HostPolicy(0, d.tokens), [=](std::int64_t n) {
    const std::int64_t local = math::embedding_slice_row(ids[n], first_row, rows), dst = n * width;
    float* o = spans::write_f32_begin(tout, dst, spans::thread_scratch(1, width));
    if (local < 0) {
      std::fill(o, o + width, 0.0f);
    } else {
      const float* row = spans::read_f32(ttable, local * width, width, spans::thread_scratch(0, width));
      std::copy(row, row + width, o);
    }
    spans::write_f32_end(tout, dst, width, o);
  });
}

void embedding_backward_rows(const Tensor& tokens, const Tensor& dout, std::int64_t first_row, Tensor& dtable) {
  constexpr const char* op = "embedding_backward_rows";
  if (!dtable.defined()) return;
  const EmbeddingDims d = host_embedding(op, tokens, dtable, "dtable", dout, "dout");
  const std::int32_t* ids = static_cast<const std::int32_t*>(tokens.data());
  // This slice's rows only, summed as embedding_backward sums them.
  std::vector<std::int64_t> rows;
  for (std::int64_t i = 0; i < d.tokens; ++i) {
    if (math::embedding_slice_row(ids[i], first_row, d.vocab) >= 0) rows.push_back(i);
  }
  add_rows_by_token("ftrain::embedding::backward_rows", ids, std::move(rows), first_row, d.width, dout, dtable);
}

}  // namespace ftrain::host
