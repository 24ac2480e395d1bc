// What a GPU must confirm about the CUDA backend [gpu]: every op with a CUDA
// kernel against the host on the same inputs (tests/support/backend_parity.hpp's
// cases), bit for bit where both backends run the same kernels/math/
// function element by element, within a tolerance where a reduction's
// order or libm differs; and two runs on the GPU give the same bits
// (deterministic kernels). Without a usable GPU every test skips, printing
// why (ctest reports it as skipped: tests/gpu/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "kernels/backend_registry.hpp"
#include "runtime/allocator.hpp"
#include "runtime/backend_library.hpp"
#include "kernels/rope_frequencies.hpp"
#include "support/backend_parity.hpp"

using namespace ftrain;
using namespace ftrain::testing;

namespace {

// Ops whose CUDA kernel applies the shared per-element function with no
// reduction: the same bits as the host are required.
const std::set<std::string> kBitExact = {"add",
                                         "add_inplace",
                                         "scale_inplace",
                                         "fill",
                                         "cast",
                                         "gelu_forward",
                                         "gelu_backward",
                                         "swiglu_forward",
                                         "swiglu_backward",
                                         "adamw_update",
                                         "adamw_update_chunks",
                                         "adamw_update_chunks_guarded",
                                         "embedding_forward",
                                         "embedding_backward",
                                         // the vocabulary-parallel pair: math::embedding_slice_row, copies
                                         // and the same per-token sums
                                         "embedding_forward_rows",
                                         "embedding_backward_rows",
                                         // copies (token_rows.hpp index math), add_value, and batch
                                         // sums in the host's batch order; the host's dropout mask
                                         "dropout",
                                         "patchify_forward",
                                         "prepend_rows_forward",
                                         "prepend_rows_backward",
                                         "broadcast_add_forward",
                                         "broadcast_add_backward",
                                         "slice_rows_forward",
                                         "slice_rows_backward"};
// (Attention runs the reference kernel: its own odd-size cases are in
// test_cuda_attention.cpp.)
// Checked in test_cuda_fp8.cpp on shapes cuBLASLt's FP8 GEMMs take (multiples
// of 16, transposed copies from the cast); the parity cases' 12 x 16 x 10 are not.
const std::set<std::string> kCheckedInFp8Test = {"fp8_linear_forward", "fp8_linear_backward"};

bool cuda_usable(std::string& why) {
  if (find_backend(Device::cuda) != nullptr) return true;
  why = "no usable CUDA GPU: " + describe_backend_search();
  return false;
}

std::vector<std::vector<float>> run_on(Device device, const ParityCase& c, std::uint64_t seed,
                                       std::vector<double>& scalars) {
  ExecutionOptions o;
  o.device = device;
  ExecutionContext ctx(o);
  ParityOutputs out = c.run(ctx, seed);
  ctx.synchronize();
  std::vector<std::vector<float>> r;
  for (const Tensor& t : out.tensors)
    r.push_back(to_float_vector(t.device() == Device::host ? t : to_device(t, Device::host)));
  scalars = out.scalars;
  return r;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Sizes that are no multiple of a warp, a block or a vector width, rows
// wider than one block's threads times four, bf16 everywhere it is allowed:
// the launch configurations' edges, which the parity cases' small round
// shapes do not reach.
std::vector<ParityCase> odd_size_cases() {
  using namespace parity;
  std::vector<ParityCase> c;
  c.push_back({"add (n = 100003, bf16 out)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor a = random(ctx, {100003}, s), b = random(ctx, {100003}, s + 1, DType::bf16),
                        out = zeros(ctx, {100003}, DType::bf16);
                 ops::add(ctx, a, b, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"gelu tanh (n = 4097)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {4097}, s, DType::bf16, 3.0), y = zeros(ctx, {4097}),
                        dy = random(ctx, {4097}, s + 1), dx = zeros(ctx, {4097}, DType::bf16);
                 ops::gelu_forward(ctx, x, GeluApproximation::tanh, y);
                 ops::gelu_backward(ctx, x, dy, GeluApproximation::tanh, dx);
                 return ParityOutputs{{y, dx}, {}};
               }});
  c.push_back({"rmsnorm (7 x 5001, bf16)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {7, 5001}, s, DType::bf16), w = random(ctx, {5001}, s + 1),
                        y = zeros(ctx, {7, 5001}, DType::bf16), rstd = zeros(ctx, {7});
                 ops::rmsnorm_forward(ctx, x, w, 1e-5f, y, rstd);
                 Tensor dy = random(ctx, {7, 5001}, s + 2), dx = zeros(ctx, {7, 5001}), dw = random(ctx, {5001}, s + 3);
                 ops::rmsnorm_backward(ctx, x, w, rstd, dy, dx, dw);
                 return ParityOutputs{{y, rstd, dx, dw}, {}};
               }});
  c.push_back({"layernorm (3 x 769, no bias)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {3, 769}, s), w = random(ctx, {769}, s + 1), y = zeros(ctx, {3, 769}),
                        mean = zeros(ctx, {3}), rstd = zeros(ctx, {3});
                 ops::layernorm_forward(ctx, x, w, nullptr, 1e-6f, y, mean, rstd);
                 Tensor dy = random(ctx, {3, 769}, s + 2), dx = zeros(ctx, {3, 769}), dw = zeros(ctx, {769});
                 ops::layernorm_backward(ctx, x, w, mean, rstd, dy, dx, dw, nullptr);
                 return ParityOutputs{{y, mean, rstd, dx, dw}, {}};
               }});
  c.push_back({"rope (1 x 5 x 3 x 6, in place)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {1, 5, 3, 6}, s, DType::bf16);
                 Tensor inv = rope_inv_freq(6, 500000.0);
                 if (ctx.device() != Device::host) inv = to_device(inv, ctx.device());
                 ops::rope_forward(ctx, x, inv, 4093, nullptr, x);
                 return ParityOutputs{{x}, {}};
               }});
  c.push_back({"embedding backward (33 tokens, repeats, bf16 table)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor tokens = ids(ctx, 33, 5, s, false), dout = random(ctx, {33, 70}, s + 1);
                 Tensor dtable = random(ctx, {5, 70}, s + 2, DType::bf16);
                 ops::embedding_backward(ctx, tokens, dout, dtable);
                 return ParityOutputs{{dtable}, {}};
               }});
  c.push_back({"linear bf16 (5 x 33 -> 17) fwd and bwd", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {5, 33}, s, DType::bf16), w = random(ctx, {17, 33}, s + 1, DType::bf16),
                        b = random(ctx, {17}, s + 2, DType::bf16), y = zeros(ctx, {5, 17});
                 ops::linear_forward(ctx, x, w, &b, y);
                 Tensor dy = random(ctx, {5, 17}, s + 3, DType::bf16), dx = zeros(ctx, {5, 33}, DType::bf16),
                        dw = random(ctx, {17, 33}, s + 4), db = zeros(ctx, {17});
                 ops::linear_backward(ctx, x, w, dy, &dx, dw, &db);
                 return ParityOutputs{{y, dx, dw, db}, {}};
               }});
  // cuBLASLt's bias epilogue reads D's dtype outside FP8: an f32 bias for a
  // bf16 y is added after the GEMM (the case above converts a bf16 bias for f32 y).
  c.push_back({"linear bf16 (5 x 33 -> 17), f32 bias into bf16 y", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {5, 33}, s, DType::bf16), w = random(ctx, {17, 33}, s + 1, DType::bf16),
                        b = random(ctx, {17}, s + 2), y = zeros(ctx, {5, 17}, DType::bf16);
                 ops::linear_forward(ctx, x, w, &b, y);
                 return ParityOutputs{{y}, {}};
               }});
  // Views at odd element offsets (as flat-parameter views and row slices
  // can be): the heuristic must be told their alignment (2 bytes for bf16,
  // 4 for f32), and the bias, below 16 bytes, goes through aligned scratch.
  c.push_back({"linear on views at odd offsets (bf16 x, w, b; f32 y, dx, dw)", [](ExecutionContext& ctx,
                                                                                 std::uint64_t s) {
                 Tensor xs = random(ctx, {5 * 33 + 1}, s, DType::bf16), ws = random(ctx, {17 * 33 + 3}, s + 1, DType::bf16),
                        bs = random(ctx, {17 + 1}, s + 2, DType::bf16), ys = zeros(ctx, {5 * 17 + 1});
                 Tensor x = xs.view({5, 33}, 1), w = ws.view({17, 33}, 3), b = bs.view({17}, 1), y = ys.view({5, 17}, 1);
                 ops::linear_forward(ctx, x, w, &b, y);
                 Tensor dy = random(ctx, {5, 17}, s + 3, DType::bf16), dxs = zeros(ctx, {5 * 33 + 1}),
                        dws = random(ctx, {17 * 33 + 1}, s + 4), db = zeros(ctx, {17});
                 Tensor dx = dxs.view({5, 33}, 1), dw = dws.view({17, 33}, 1);
                 ops::linear_backward(ctx, x, w, dy, &dx, dw, &db);
                 return ParityOutputs{{ys, dxs, dws, db}, {}};
               }});
  c.push_back({"sum_squares (n = 2^20 + 7)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {(1 << 20) + 7}, s);
                 return ParityOutputs{{}, {ops::sum_squares(ctx, x)}};
               }});
  c.push_back({"sum_squares_accumulate (n = 1025 then 3, bf16) and clip_coefficient", [](ExecutionContext& ctx,
                                                                                          std::uint64_t s) {
                 Tensor x = random(ctx, {1025}, s), y = random(ctx, {3}, s + 1, DType::bf16);
                 Tensor acc = zeros(ctx, {1}, DType::f64), norm = zeros(ctx, {1}, DType::f64);
                 Tensor scale = zeros(ctx, {1}), diverged = zeros(ctx, {1}, DType::i64);
                 ops::fill(ctx, acc, 0.5f);  // f64 fill
                 ops::sum_squares_accumulate(ctx, x, acc);
                 ops::sum_squares_accumulate(ctx, y, acc);
                 ops::clip_coefficient(ctx, acc, 3.0, 9, norm, scale, diverged);
                 return ParityOutputs{{acc, norm, scale, diverged}, {}};
               }});
  c.push_back({"cast f32 -> f16 -> bf16 -> f16 -> f32 (n = 70001, past f16's range)", [](ExecutionContext& ctx,
                                                                                         std::uint64_t s) {
                 // Scale 3e4: values beyond 65504 overflow to inf, small ones are f16 subnormals.
                 Tensor x = random(ctx, {70001}, s, DType::f32, 3e4);
                 Tensor tiny = random(ctx, {70001}, s + 1, DType::f32, 1e-6);
                 Tensor h = zeros(ctx, {70001}, DType::f16), b = zeros(ctx, {70001}, DType::bf16),
                        h2 = zeros(ctx, {70001}, DType::f16), back = zeros(ctx, {70001}),
                        tiny_h = zeros(ctx, {70001}, DType::f16);
                 ops::cast(ctx, x, h);
                 ops::cast(ctx, h, b);
                 ops::cast(ctx, b, h2);
                 ops::cast(ctx, h2, back);
                 ops::cast(ctx, tiny, tiny_h);
                 return ParityOutputs{{h, b, h2, back, tiny_h}, {}};
               }});
  // The fused head at odd sizes: rows past a warp, a vocabulary that is no
  // multiple of the chunk (last chunk partial), ignored rows, bf16 storage
  // (bf16 GEMMs), a mixed f32 h / bf16 w head, a chunk wider than the
  // vocabulary, a frozen head (no dw).
  c.push_back({"cross_entropy bf16 (37 x 70, V 1001, chunk 97)", [](ExecutionContext& ctx, std::uint64_t s) {
                 const std::int64_t N = 37, C = 70, V = 1001;
                 Tensor h = random(ctx, {N, C}, s, DType::bf16), w = random(ctx, {V, C}, s + 1, DType::bf16, 0.2);
                 Tensor b = random(ctx, {V}, s + 2, DType::bf16), t = ids(ctx, N, V, s + 3, true);
                 Tensor losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_forward(ctx, h, w, &b, t, 97, losses, lse);
                 Tensor scale = zeros(ctx, {1});
                 ops::fill(ctx, scale, 1.0f / 29.0f);
                 Tensor dh = zeros(ctx, {N, C}, DType::bf16), dw = random(ctx, {V, C}, s + 4, DType::bf16, 0.01),
                        db = zeros(ctx, {V});
                 ops::cross_entropy_backward(ctx, h, w, &b, t, lse, scale, 97, dh, dw, &db);
                 return ParityOutputs{{losses, lse, dh, dw, db}, {}};
               }});
  c.push_back({"cross_entropy mixed f32 h / bf16 w (33 x 65, V 300, chunk 4096, no bias)",
               [](ExecutionContext& ctx, std::uint64_t s) {
                 const std::int64_t N = 33, C = 65, V = 300;
                 Tensor h = random(ctx, {N, C}, s), w = random(ctx, {V, C}, s + 1, DType::bf16, 0.3);
                 Tensor t = ids(ctx, N, V, s + 3, false), losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_forward(ctx, h, w, nullptr, t, 4096, losses, lse);
                 Tensor scale = zeros(ctx, {1});
                 ops::fill(ctx, scale, 0.5f);
                 Tensor dh = zeros(ctx, {N, C}), dw = zeros(ctx, {V, C});
                 ops::cross_entropy_backward(ctx, h, w, nullptr, t, lse, scale, 4096, dh, dw, nullptr);
                 Tensor frozen_dh = zeros(ctx, {N, C}), no_dw;
                 ops::cross_entropy_backward(ctx, h, w, nullptr, t, lse, scale, 7, frozen_dh, no_dw, nullptr);
                 return ParityOutputs{{losses, lse, dh, dw, frozen_dh}, {}};
               }});
  // Tensor parallelism's vocabulary-parallel ops at odd sizes: a middle
  // slice (rows [333, 667) of 1001) of a bf16 head whose chunk leaves a
  // partial last chunk, ignored rows, targets on both sides of the slice;
  // the group's combination with the slice's lse as a second slice's; the
  // embedding pair on a bf16 table slice with tokens of every slice.
  c.push_back({"cross_entropy_slice_* bf16 (37 x 70, rows 333.. of V 1001, chunk 97)",
               [](ExecutionContext& ctx, std::uint64_t s) {
                 const std::int64_t N = 37, C = 70, V = 1001, first = 333, rows = 334;
                 Tensor h = random(ctx, {N, C}, s, DType::bf16), w = random(ctx, {rows, C}, s + 1, DType::bf16, 0.2);
                 Tensor t = ids(ctx, N, V, s + 3, true), local_lse = zeros(ctx, {N}), picked = zeros(ctx, {N});
                 ops::cross_entropy_slice_forward(ctx, h, w, t, first, V, 97, local_lse, picked);
                 Tensor row_max = random(ctx, {N}, s + 4, DType::f32, 0.5), sum_exp = zeros(ctx, {N});
                 ops::add(ctx, row_max, local_lse, row_max);  // a group max near the slice's own lse
                 ops::cross_entropy_slice_sum_exp(ctx, local_lse, row_max, sum_exp);
                 Tensor losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_slice_loss(ctx, row_max, sum_exp, picked, t, losses, lse);
                 Tensor scale = zeros(ctx, {1});
                 ops::fill(ctx, scale, 1.0f / 29.0f);
                 Tensor dh = zeros(ctx, {N, C}, DType::bf16), dw = random(ctx, {rows, C}, s + 5, DType::bf16, 0.01);
                 ops::cross_entropy_slice_backward(ctx, h, w, t, first, V, lse, scale, 97, dh, dw);
                 Tensor frozen_dh = zeros(ctx, {N, C}), no_dw;
                 ops::cross_entropy_slice_backward(ctx, h, w, t, first, V, lse, scale, 7, frozen_dh, no_dw);
                 return ParityOutputs{{local_lse, picked, sum_exp, losses, lse, dh, dw, frozen_dh}, {}};
               }});
  c.push_back({"embedding_*_rows (300 tokens, rows 40.. of V 100, bf16 table, width 77)",
               [](ExecutionContext& ctx, std::uint64_t s) {
                 const std::int64_t N = 300, V = 100, C = 77, first = 40, rows = 30;
                 Tensor tokens = ids(ctx, N, V, s, false), table = random(ctx, {rows, C}, s + 1, DType::bf16);
                 Tensor out = random(ctx, {N, C}, s + 2);  // every element written, zeros included
                 ops::embedding_forward_rows(ctx, tokens, table, first, V, out);
                 Tensor dout = random(ctx, {N, C}, s + 3, DType::bf16), dtable = random(ctx, {rows, C}, s + 4);
                 ops::embedding_backward_rows(ctx, tokens, dout, first, dtable);
                 return ParityOutputs{{out, dtable}, {}};
               }});
  // The ViT row ops and dropout past a block, with mixed storage: a
  // 3-channel image of 5 x 7 patches of 3 x 3 (27 columns), 197 = 1 + 196
  // rows of width 77 (the class token and patch rows of a ViT at a width
  // that is no multiple of a warp), bf16 everywhere it is allowed.
  c.push_back({"patchify (3 x 15 x 21 x 3 image, patch 3, bf16 patches)", [](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor img = random(ctx, {3, 15, 21, 3}, s), p = zeros(ctx, {3 * 35, 27}, DType::bf16);
                 ops::patchify_forward(ctx, img, 3, p);
                 return ParityOutputs{{p}, {}};
               }});
  c.push_back({"prepend/broadcast/slice rows (5 x 196 -> 197 x 77, bf16)", [](ExecutionContext& ctx,
                                                                              std::uint64_t s) {
                 const std::int64_t B = 5, N = 196, T = 197, C = 77;
                 Tensor cls = random(ctx, {1, C}, s, DType::bf16), x = random(ctx, {B, N, C}, s + 1, DType::bf16);
                 Tensor seq = zeros(ctx, {B, T, C}, DType::bf16), pos = random(ctx, {T, C}, s + 2);
                 ops::prepend_rows_forward(ctx, cls, x, seq);
                 ops::broadcast_add_forward(ctx, seq, pos, seq);
                 Tensor head = zeros(ctx, {B, 1, C});
                 ops::slice_rows_forward(ctx, seq, 0, head);
                 Tensor dhead = random(ctx, {B, 1, C}, s + 3), dseq = random(ctx, {B, T, C}, s + 4, DType::bf16);
                 ops::slice_rows_backward(ctx, dhead, 0, dseq);
                 Tensor dpos = random(ctx, {T, C}, s + 5, DType::bf16);
                 ops::broadcast_add_backward(ctx, dseq, dpos);
                 Tensor dcls = random(ctx, {1, C}, s + 6), dx = zeros(ctx, {B, N, C});
                 ops::prepend_rows_backward(ctx, dseq, dcls, dx);
                 return ParityOutputs{{seq, head, dseq, dpos, dcls, dx}, {}};
               }});
  c.push_back({"adamw_update_chunks_guarded (shard 200003, 65536-element chunks, gaps, mixed decay)",
               [](ExecutionContext& ctx, std::uint64_t s) {
                 const std::int64_t n = 200003;
                 Tensor p = random(ctx, {n}, s), g = random(ctx, {n}, s + 1), m = random(ctx, {n}, s + 2);
                 Tensor v = positive(ctx, {n}, s + 3);
                 Tensor scale = zeros(ctx, {1}), clear = zeros(ctx, {1}, DType::i64);
                 ops::fill(ctx, scale, 0.3f);
                 const Tensor chunks = adamw_chunk_table(
                     {{1, 70000, true}, {70000 + 1, 4097, false}, {74100, 125000, true}, {199101, 900, false}},
                     ctx.device(), "adamw_chunks");
                 ops::adamw_update_chunks_guarded(ctx, p, g, m, v, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, scale,
                                                  clear);
                 return ParityOutputs{{p, m, v}, {}};
               }});
  c.push_back({"dropout (LoRA rows 1000.. of width 4099, bf16, in place)", [](ExecutionContext& ctx,
                                                                             std::uint64_t s) {
                 Tensor x = random(ctx, {13, 4099}, s, DType::bf16), y = zeros(ctx, {13, 4099});
                 ops::dropout(ctx, x, 0.1f, s, 3, 1000, y);
                 ops::dropout(ctx, x, 0.5f, s, 4, 7, x);
                 return ParityOutputs{{y, x}, {}};
               }});
  return c;
}

}  // namespace

TEST(CudaOps, EveryImplementedOpMatchesTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const auto& c : parity_cases()) {
    if (kCheckedInFp8Test.count(c.op)) continue;
    const bool exact = kBitExact.count(c.op) != 0;
    for (std::uint64_t seed : {11u, 12u}) {
      SCOPED_TRACE(c.op + (exact ? " (bit for bit)" : " (tolerance)") + ", seed " + std::to_string(seed));
      std::vector<double> host_scalars, cuda_scalars;
      const auto want = run_on(Device::host, c, seed, host_scalars);
      const auto got = run_on(Device::cuda, c, seed, cuda_scalars);
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t t = 0; t < want.size(); ++t) {
        ASSERT_EQ(got[t].size(), want[t].size());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < want[t].size(); ++i) {
          const float w = want[t][i], g = got[t][i];
          // NaN where the host has NaN is right (clip_coefficient's diverged norm), as is the same infinity.
          const bool ok = exact ? same_bits(w, g)
                                : g == w || (std::isnan(w) && std::isnan(g)) ||
                                      std::abs(g - w) <= 1e-3f * (1.0f + std::abs(w));
          if (!ok && bad++ < 3) ADD_FAILURE() << "output " << t << " element " << i << ": " << g << " vs " << w;
        }
        EXPECT_EQ(bad, 0u) << "output " << t;
      }
      ASSERT_EQ(cuda_scalars.size(), host_scalars.size());
      for (std::size_t s = 0; s < host_scalars.size(); ++s)
        EXPECT_NEAR(cuda_scalars[s], host_scalars[s], 1e-6 * (1.0 + std::abs(host_scalars[s])));
    }
  }
}

// Runs everywhere: the odd-size cases are well formed (shapes, dtypes) on
// the host, so a GPU run finds kernels to compare, not a broken test.
TEST(CudaOps, OddSizeCasesRunOnTheHost) {
  for (const auto& c : odd_size_cases()) {
    SCOPED_TRACE(c.op);
    std::vector<double> scalars;
    EXPECT_NO_THROW(run_on(Device::host, c, 5, scalars));
  }
}

TEST(CudaOps, OddSizesMatchTheHost) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const auto& c : odd_size_cases()) {
    SCOPED_TRACE(c.op);
    std::vector<double> host_scalars, cuda_scalars;
    const auto want = run_on(Device::host, c, 5, host_scalars);
    const auto got = run_on(Device::cuda, c, 5, cuda_scalars);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t t = 0; t < want.size(); ++t) {
      ASSERT_EQ(got[t].size(), want[t].size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < want[t].size(); ++i) {
        // bf16 outputs may round the other way when the f32 value differs in
        // its last bits (reduction order): one bf16 ulp, 2^-7 relative.
        // Equal (an f16 overflow's infinity) or both NaN is right too.
        const bool same = got[t][i] == want[t][i] || (std::isnan(got[t][i]) && std::isnan(want[t][i]));
        if (!same && !(std::abs(got[t][i] - want[t][i]) <= 1e-2f * (1.0f + std::abs(want[t][i]))) && bad++ < 3)
          ADD_FAILURE() << "output " << t << " element " << i << ": " << got[t][i] << " vs " << want[t][i];
      }
      EXPECT_EQ(bad, 0u) << "output " << t;
    }
    ASSERT_EQ(cuda_scalars.size(), host_scalars.size());
    for (std::size_t s = 0; s < host_scalars.size(); ++s)
      EXPECT_NEAR(cuda_scalars[s], host_scalars[s], 1e-9 * (1.0 + std::abs(host_scalars[s])));
  }
}

TEST(CudaOps, RepeatedRunsAreBitIdentical) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  for (const auto& c : parity_cases()) {
    if (kCheckedInFp8Test.count(c.op)) continue;
    SCOPED_TRACE(c.op);
    std::vector<double> s1, s2;
    const auto first = run_on(Device::cuda, c, 21, s1);
    const auto second = run_on(Device::cuda, c, 21, s2);
    ASSERT_EQ(first.size(), second.size());
    for (std::size_t t = 0; t < first.size(); ++t)
      for (std::size_t i = 0; i < first[t].size(); ++i)
        ASSERT_TRUE(same_bits(first[t][i], second[t][i])) << "output " << t << " element " << i;
    EXPECT_EQ(s1, s2);
  }
}

// sum, sum_squares and sum_squares_accumulate add in kernels/math/
// reduction.hpp's order on both backends (two passes on the GPU: a partial
// per 4096-element chunk over the whole grid, then the partials in order),
// so they equal the host BIT FOR BIT, also past the size where the first
// pass's blocks stride over the chunks (132 SMs x 16 blocks x 32 chunks x
// 4096 = 277M elements).
TEST(CudaOps, ReductionsEqualTheHostBitForBit) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext gpu(o);
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{4097}, std::int64_t{(1 << 20) + 7},
                               std::int64_t{300'000'007}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    Tensor host = Tensor::empty({n}, DType::f32, Device::host, "x");
    float* v = host.data_as<float>();
    for (std::int64_t i = 0; i < n; ++i)  // 16 decades: the order of the f64 additions shows
      v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * std::pow(10.0, static_cast<double>(i % 17) - 8.0));
    const Tensor device = to_device(host, Device::cuda);
    const double want = ops::sum_squares(host_context(), host), got = ops::sum_squares(gpu, device);
    EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0) << got << " vs the host's " << want;
    Tensor host_acc = Tensor::zeros({1}, DType::f64);
    host_acc.data_as<double>()[0] = 0.25;  // accumulates onto a value
    Tensor device_acc = to_device(host_acc, Device::cuda);
    ops::sum_squares_accumulate(host_context(), host, host_acc);
    ops::sum_squares_accumulate(gpu, device, device_acc);
    Tensor host_sum = Tensor::zeros({1}, DType::f32), device_sum = Tensor::zeros({1}, DType::f32, Device::cuda);
    ops::sum(host_context(), host, host_sum);
    ops::sum(gpu, device, device_sum);
    gpu.synchronize();
    EXPECT_EQ(to_device(device_acc, Device::host).data_as<double>()[0], host_acc.data_as<double>()[0]);
    EXPECT_EQ(to_device(device_sum, Device::host).data_as<float>()[0], host_sum.data_as<float>()[0]);
  }
}

// The embedding backward groups rows by token with a stable device radix
// sort (no O(N^2) scan): a long batch with hot tokens (repeated thousands of
// times), rare ones and Llama 3's vocabulary gives the host's dtable bit for
// bit (per token an f32 sum in row order, one add), twice the same.
TEST(CudaOps, EmbeddingBackwardOfALongBatchEqualsTheHostBitForBit) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext gpu(o);
  const std::int64_t n = 1 << 17, vocab = 128256, width = 96;
  Tensor tokens = Tensor::empty({n}, DType::i32, Device::host, "tokens");
  for (std::int64_t i = 0; i < n; ++i)
    tokens.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3 == 0 ? (i * i) % 17 : (i * 7919) % vocab);
  Tensor dout = Tensor::empty({n, width}, DType::f32, Device::host, "dout");
  for (std::int64_t i = 0; i < n * width; ++i) dout.data_as<float>()[i] = static_cast<float>(std::sin(0.001 * i));
  Tensor host_table = Tensor::zeros({vocab, width}, DType::f32, Device::host, "dtable");
  ops::embedding_backward(host_context(), tokens, dout, host_table);
  const Tensor d_tokens = to_device(tokens, Device::cuda), d_dout = to_device(dout, Device::cuda);
  for (int run = 0; run < 2; ++run) {
    Tensor d_table = Tensor::zeros({vocab, width}, DType::f32, Device::cuda, "dtable");
    ops::embedding_backward(gpu, d_tokens, d_dout, d_table);
    gpu.synchronize();
    const Tensor back = to_device(d_table, Device::host);
    EXPECT_EQ(std::memcmp(back.data(), host_table.data(), host_table.nbytes()), 0) << "run " << run;
  }
}

// Token ids and targets are range-checked on the device without a host
// round trip per op: the op returns at once, the bad id is recorded, and the
// next synchronisation (the step's loss, a log line) throws the host's
// error naming the op, the value and its row; the record is cleared then.
TEST(CudaOps, BadIdsAreReportedAtTheNextSynchronisation) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext gpu(o);
  const std::int64_t n = 16, vocab = 64, width = 32;
  Tensor tokens = Tensor::zeros({n}, DType::i32, Device::host, "tokens");
  tokens.data_as<std::int32_t>()[5] = 70000;
  tokens.data_as<std::int32_t>()[9] = -1;
  const Tensor d_tokens = to_device(tokens, Device::cuda);
  const Tensor table = to_device(Tensor::zeros({vocab, width}, DType::f32), Device::cuda);
  Tensor out = Tensor::zeros({n, width}, DType::f32, Device::cuda, "out");
  EXPECT_NO_THROW(ops::embedding_forward(gpu, d_tokens, table, out)) << "the op itself must not wait for the stream";
  std::string message;
  try {
    gpu.synchronize();
  } catch (const Error& e) {
    message = e.what();
  }
  for (const char* part : {"embedding_forward", "token 70000", "row 5"})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  EXPECT_NO_THROW(gpu.synchronize()) << "reported once, then cleared";
  // Valid ids leave nothing behind.
  const Tensor good = to_device(Tensor::zeros({n}, DType::i32), Device::cuda);
  ops::embedding_forward(gpu, good, table, out);
  EXPECT_NO_THROW(gpu.synchronize());
}

// The vocabulary-parallel ops check ids against the whole vocabulary (a
// token of another slice is valid), each in its own slot: a bad target of
// a head slice is reported naming cross_entropy_slice_forward.
TEST(CudaOps, BadIdsOfTheVocabularySlicesAreReportedNamingTheirOp) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext gpu(o);
  const std::int64_t n = 16, vocab = 64, width = 32;
  Tensor ids = Tensor::zeros({n}, DType::i32, Device::host, "ids");
  for (std::int64_t i = 0; i < n; ++i) ids.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(i * 4);  // both halves
  const Tensor d_ids = to_device(ids, Device::cuda);
  const Tensor table = to_device(Tensor::zeros({vocab / 2, width}, DType::f32), Device::cuda);
  Tensor out = Tensor::zeros({n, width}, DType::f32, Device::cuda, "out");
  ops::embedding_forward_rows(gpu, d_ids, table, vocab / 2, vocab, out);
  EXPECT_NO_THROW(gpu.synchronize()) << "tokens of the other slice are valid ids";
  ids.data_as<std::int32_t>()[7] = static_cast<std::int32_t>(vocab);
  const Tensor bad = to_device(ids, Device::cuda);
  Tensor lse = Tensor::zeros({n}, DType::f32, Device::cuda, "lse"), picked = Tensor::zeros({n}, DType::f32, Device::cuda, "picked");
  EXPECT_NO_THROW(ops::cross_entropy_slice_forward(gpu, out, table, bad, vocab / 2, vocab, 8, lse, picked));
  std::string message;
  try {
    gpu.synchronize();
  } catch (const Error& e) {
    message = e.what();
  }
  for (const char* part : {"cross_entropy_slice_forward", "target 64", "row 7", "[0, 64)"})
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  EXPECT_NO_THROW(gpu.synchronize()) << "reported once, then cleared";
}

// The norms' weight and bias gradients sum over rows in
// kernels/math/column_sums.hpp's order on both backends (32-row block
// partials, then the partials in order): dw and db equal the host bit for
// bit (dx, whose row sums are a block tree here, within the usual tolerance
// in OddSizesMatchTheHost). An odd row count leaves a short last block.
TEST(CudaOps, NormWeightGradientsEqualTheHostBitForBit) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext gpu(o);
  const std::int64_t rows = 4097, width = 2048;
  const auto filled = [](const Shape& shape, double phase, float offset) {
    Tensor t = Tensor::empty(shape, DType::f32, Device::host);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data_as<float>()[i] = offset + static_cast<float>(std::sin(phase * static_cast<double>(i + 1)));
    return t;
  };
  const Tensor x = filled({rows, width}, 0.013, 0.0f), dy = filled({rows, width}, 0.007, 0.0f);
  const Tensor w = filled({width}, 0.3, 1.0f);
  Tensor rstd = Tensor::empty({rows}, DType::f32), mean = Tensor::empty({rows}, DType::f32);
  Tensor y = Tensor::empty({rows, width}, DType::f32);
  ops::rmsnorm_forward(host_context(), x, w, 1e-5f, y, rstd);
  Tensor dx = Tensor::empty({rows, width}, DType::f32), dw = filled({width}, 0.5, 0.0f);
  Tensor d_dw = to_device(dw, Device::cuda), d_dx = to_device(dx, Device::cuda);
  ops::rmsnorm_backward(host_context(), x, w, rstd, dy, dx, dw);
  ops::rmsnorm_backward(gpu, to_device(x, Device::cuda), to_device(w, Device::cuda), to_device(rstd, Device::cuda),
                        to_device(dy, Device::cuda), d_dx, d_dw);
  gpu.synchronize();
  EXPECT_EQ(std::memcmp(to_device(d_dw, Device::host).data(), dw.data(), dw.nbytes()), 0) << "rmsnorm dw";
  ops::layernorm_forward(host_context(), x, w, nullptr, 1e-5f, y, mean, rstd);
  Tensor lw = filled({width}, 0.5, 0.0f), lb = filled({width}, 0.25, 0.0f);
  Tensor d_lw = to_device(lw, Device::cuda), d_lb = to_device(lb, Device::cuda);
  ops::layernorm_backward(host_context(), x, w, mean, rstd, dy, dx, lw, &lb);
  ops::layernorm_backward(gpu, to_device(x, Device::cuda), to_device(w, Device::cuda), to_device(mean, Device::cuda),
                          to_device(rstd, Device::cuda), to_device(dy, Device::cuda), d_dx, d_lw, &d_lb);
  gpu.synchronize();
  EXPECT_EQ(std::memcmp(to_device(d_lw, Device::host).data(), lw.data(), lw.nbytes()), 0) << "layernorm dw";
  EXPECT_EQ(std::memcmp(to_device(d_lb, Device::host).data(), lb.data(), lb.nbytes()), 0) << "layernorm db";
}

// Real CUDA events (runtime/stream.hpp NativeEvent over cudaEvent_t): record()
// returns at once with a device event, another stream waits for it on the
// device, and the host can query and wait for it.
TEST(CudaStreams, EventsAreCudaEventsAndOrderStreams) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext ctx(o);
  Tensor x = parity::random(ctx, {1 << 22}, 3);
  for (int i = 0; i < 50; ++i) ops::scale_inplace(ctx, x, 1.0f);
  ops::scale_inplace(ctx, x, 0.0f);
  const Event done = ctx.compute().record();
  ASSERT_NE(done.native(), nullptr) << "record() must give a cudaEvent_t, not wait for the stream";
  ctx.communication().wait(done);
  const Event after = ctx.communication().record();
  after.synchronize();
  EXPECT_TRUE(done.query()) << "the communication stream's event completed before the event it waited for";
  const std::vector<float> v = to_float_vector(to_device(x, Device::host));
  for (std::size_t i = 0; i < v.size(); i += 4097) ASSERT_EQ(v[i], 0.0f);
}

// The allocator's pool: allocated bytes are counted, the pool reserves at
// least that, and freed memory stays reserved (release threshold "never").
TEST(CudaAllocator, PoolStatsAllocatedReservedPeak) {
  std::string why;
  if (!cuda_usable(why)) GTEST_SKIP() << why;
  DeviceAllocator* allocator = find_allocator(Device::cuda);
  ASSERT_NE(allocator, nullptr);
  const AllocatorStats before = allocator->stats();
  {
    std::shared_ptr<void> block = allocator->allocate(std::size_t(64) << 20);
    const AllocatorStats during = allocator->stats();
    EXPECT_EQ(during.live_bytes, before.live_bytes + (std::size_t(64) << 20));
    EXPECT_GE(during.reserved_bytes, during.live_bytes);
    EXPECT_GE(during.peak_live_bytes, during.live_bytes);
    EXPECT_GE(during.peak_reserved_bytes, during.reserved_bytes);
  }
  ExecutionOptions o;
  o.device = Device::cuda;
  ExecutionContext ctx(o);
  ctx.synchronize();
  const AllocatorStats after = allocator->stats();
  EXPECT_EQ(after.live_bytes, before.live_bytes);
  EXPECT_GE(after.reserved_bytes, std::size_t(64) << 20) << "freed memory went back to the driver";
}
