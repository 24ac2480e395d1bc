// CUDA token embedding (kernels.hpp). Forward: one grid-stride loop over the
// N x C outputs. Backward, deterministic and with the host's rounding:
//  1. the rows are grouped by token with a STABLE radix sort of the pairs
//     (token, row) (CUB's LSD radix sort keeps equal keys in input order; the
//     keys unsigned, only the bits that 0 .. vocab needs),
//     an invalid token keyed as `vocab` so that it sorts last and is skipped:
//     O(N) passes, no O(N^2) scan;
//  2. block k works only if sorted position k starts a run of one token; it
//     then sums the run's rows, which are in row order, in f32 (threads over
//     columns) and adds the sum to dtable once.
// The host does the same (kernels/host/embedding.cpp: std::stable_sort, per
// token an f32 sum in row order, one add): the same bits. No atomics on
// floats. Invalid tokens (math::embedding_token_valid) leave their output
// alone (the backward sorts them last and skips them); the device range
// check (input_checks.cu) records the first one, reported at the next
// synchronisation: the op itself never waits for the stream. The
// vocabulary-parallel pair (a slice of the table's rows) is the same with
// math::embedding_slice_row choosing the row: another slice's token gives a
// zero row forward and is sorted last and skipped backward.
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/embedding.hpp"

namespace ftrain::cuda {

namespace {

// Step 1's input: keys (the token's row of the table slice [first_row,
// first_row + vocab); any other token as `vocab`, after every valid one)
// and row numbers.
__global__ void embedding_sort_input_kernel(const std::int32_t* tokens, std::int64_t n, std::int64_t first_row,
                                            std::int64_t vocab, std::uint32_t* keys, std::int32_t* rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t row = math::embedding_slice_row(tokens[i], first_row, vocab);
    keys[i] = static_cast<std::uint32_t>(row >= 0 ? row : vocab);
    rows[i] = static_cast<std::int32_t>(i);
  }
}

// Step 2: one block per sorted position; only a run's first position works.
__global__ void embedding_backward_runs_kernel(const std::uint32_t* keys, const std::int32_t* rows, std::int64_t n,
                                               FloatSpan dout, std::int64_t vocab, std::int64_t width,
                                               FloatSpan dtable) {
  for (std::int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const std::uint32_t token = keys[k];
    if (token >= vocab || (k > 0 && keys[k - 1] == token)) continue;  // invalid, or not the run's start
    for (std::int64_t c = threadIdx.x; c < width; c += blockDim.x) {
      float sum = 0.0f;
      for (std::int64_t m = k; m < n && keys[m] == token; ++m)
        sum += load_f32(dout, static_cast<std::int64_t>(rows[m]) * width + c);
      const std::int64_t at = static_cast<std::int64_t>(token) * width + c;
      store_f32(dtable, at, load_f32(dtable, at) + sum);
    }
  }
}

// Bits of the sort keys: 0 .. vocab (the invalid key) fit.
int embedding_key_bits(std::int64_t vocab) {
  int bits = 1;
  while ((std::int64_t{1} << bits) <= vocab) ++bits;
  return bits;
}

// The scratch of one backward, carved in order: keys and rows in and out,
// then CUB's temporary storage (256-byte aligned, as CUB asks).
struct EmbeddingSortScratch {
  std::uint32_t *keys_in, *keys_out;
  std::int32_t *rows_in, *rows_out;
  void* cub_storage;
  std::size_t cub_bytes;
};

std::size_t align_up(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

std::size_t cub_sort_bytes(std::int64_t n_tokens, int key_bits) {
  std::size_t bytes = 0;
  FTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::uint32_t*>(nullptr),
                                                    static_cast<std::uint32_t*>(nullptr),
                                                    static_cast<const std::int32_t*>(nullptr),
                                                    static_cast<std::int32_t*>(nullptr), n_tokens, 0, key_bits));
  return bytes;
}

EmbeddingSortScratch carve(void* scratch, std::int64_t n_tokens, std::size_t cub_bytes) {
  const std::size_t array = align_up(static_cast<std::size_t>(n_tokens) * sizeof(std::uint32_t));
  auto* base = static_cast<char*>(scratch);
  return {reinterpret_cast<std::uint32_t*>(base), reinterpret_cast<std::uint32_t*>(base + array),
          reinterpret_cast<std::int32_t*>(base + 2 * array), reinterpret_cast<std::int32_t*>(base + 3 * array),
          base + 4 * array, cub_bytes};
}

}  // namespace

void launch_embedding_forward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan table, std::int64_t vocab,
                              std::int64_t width, FloatSpan out, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  launch_input_range_check(InputCheck::embedding_forward, tokens, n_tokens, vocab, stream);
  launch_elementwise("ftrain::embedding::forward", n_tokens * width, stream, [=] __device__(std::int64_t e) {
    const std::int64_t row = e / width, c = e % width;
    const std::int32_t token = tokens[row];
    if (math::embedding_token_valid(token, vocab))
      store_f32(out, e, load_f32(table, static_cast<std::int64_t>(token) * width + c));
  });
}

std::size_t embedding_backward_scratch_bytes(std::int64_t n_tokens, std::int64_t vocab) {
  if (n_tokens <= 0) return 0;
  const std::size_t array = align_up(static_cast<std::size_t>(n_tokens) * sizeof(std::int32_t));
  return 4 * array + cub_sort_bytes(n_tokens, embedding_key_bits(vocab));
}

namespace {

// The sort and the sums of a backward over the table slice [first_row,
// first_row + vocab) (the whole table: first_row 0).
void embedding_backward_sorted(const char* label, const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout,
                               std::int64_t first_row, std::int64_t vocab, std::int64_t width, FloatSpan dtable,
                               void* scratch, cudaStream_t stream) {
  FT_CHECK(n_tokens <= INT32_MAX && vocab < INT32_MAX)
      << label << ": " << n_tokens << " tokens, vocabulary " << vocab
      << ": rows and token ids are sorted as 32-bit integers";
  const int key_bits = embedding_key_bits(vocab);
  const EmbeddingSortScratch t = carve(scratch, n_tokens, cub_sort_bytes(n_tokens, key_bits));
  const LaunchConfig in = elementwise_launch(n_tokens);
  embedding_sort_input_kernel<<<static_cast<unsigned>(in.grid_x), static_cast<unsigned>(in.block), 0, stream>>>(
      tokens, n_tokens, first_row, vocab, t.keys_in, t.rows_in);
  FTRAIN_CUDA_CHECK_LAUNCH("ftrain::embedding::backward::sort_input");
  std::size_t cub_bytes = t.cub_bytes;
  FTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(t.cub_storage, cub_bytes, t.keys_in, t.keys_out, t.rows_in,
                                                    t.rows_out, n_tokens, 0, key_bits, stream));
  const LaunchConfig c = embedding_backward_launch(n_tokens, width);
  embedding_backward_runs_kernel<<<static_cast<unsigned>(c.grid_x), static_cast<unsigned>(c.block), 0, stream>>>(
      t.keys_out, t.rows_out, n_tokens, dout, vocab, width, dtable);
  FTRAIN_CUDA_CHECK_LAUNCH(label);
}

}  // namespace

void launch_embedding_backward(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout, std::int64_t vocab,
                               std::int64_t width, FloatSpan dtable, void* scratch, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  launch_input_range_check(InputCheck::embedding_backward, tokens, n_tokens, vocab, stream);
  embedding_backward_sorted("ftrain::embedding::backward", tokens, n_tokens, dout, 0, vocab, width, dtable, scratch,
                            stream);
}

void launch_embedding_forward_rows(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan table,
                                   std::int64_t first_row, std::int64_t rows, std::int64_t vocab, std::int64_t width,
                                   FloatSpan out, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  launch_input_range_check(InputCheck::embedding_forward_rows, tokens, n_tokens, vocab, stream);
  launch_elementwise("ftrain::embedding::forward_rows", n_tokens * width, stream, [=] __device__(std::int64_t e) {
    const std::int64_t n = e / width, c = e % width;
    const std::int64_t row = math::embedding_slice_row(tokens[n], first_row, rows);
    store_f32(out, e, row >= 0 ? load_f32(table, row * width + c) : 0.0f);
  });
}

void launch_embedding_backward_rows(const std::int32_t* tokens, std::int64_t n_tokens, FloatSpan dout,
                                    std::int64_t first_row, std::int64_t rows, std::int64_t width, FloatSpan dtable,
                                    void* scratch, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  embedding_backward_sorted("ftrain::embedding::backward_rows", tokens, n_tokens, dout, first_row, rows, width, dtable,
                            scratch, stream);
}

}  // namespace ftrain::cuda
