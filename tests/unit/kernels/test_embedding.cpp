// host embedding_forward / embedding_backward: gather vs reference, backward
// vs finite differences (repeated tokens), accumulation, bf16, bad tokens.
#include <gtest/gtest.h>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(Embedding);

namespace {

Tensor token_tensor(const Shape& shape, const std::vector<std::int32_t>& ids, const std::string& name = "tokens") {
  Tensor t = Tensor::empty(shape, DType::i32, Device::host, name);
  std::copy(ids.begin(), ids.end(), t.data_as<std::int32_t>());
  return t;
}

std::vector<double> embedding_reference(const std::vector<double>& table, const std::vector<std::int32_t>& ids,
                                        std::int64_t width) {
  std::vector<double> out;
  for (std::int32_t id : ids)
    for (std::int64_t j = 0; j < width; ++j) out.push_back(table[static_cast<std::size_t>(id * width + j)]);
  return out;
}

}  // namespace

TEST_P(Embedding, ForwardGathersAndBackwardMatchesFiniteDifferences) {
  const std::int64_t vocab = 11, width = 13;
  // Repeated ids (3 three times, 0 and 10 at the edges) exercise the grouping.
  const std::vector<std::int32_t> ids{3, 0, 10, 3, 7, 3, 1};
  Tensor tokens = token_tensor({1, 7}, ids);
  Tensor table = random_tensor({vocab, width}, 1, DType::f32, "wte");
  Tensor out = named_zeros({1, 7, width}, DType::f32, "out");
  ops::embedding_forward(backend_ctx(), tokens, table, out);
  auto f = [&](const Inputs& in) { return embedding_reference(in[0], ids, width); };
  const Inputs in{to_doubles(table)};
  EXPECT_EQ(to_doubles(out), f(in));

  Tensor dout = random_tensor({1, 7, width}, 2, DType::f32, "dout");
  Tensor dtable = named_zeros({vocab, width}, DType::f32, "dwte");
  ops::embedding_backward(backend_ctx(), tokens, dout, dtable);
  expect_vjp_matches(f, in, 0, to_doubles(dtable), to_doubles(dout), 1e-6, 3, "dtable");
  const auto once = to_doubles(dtable);
  ops::embedding_backward(backend_ctx(), tokens, dout, dtable);
  expect_scaled(to_doubles(dtable), once, 2.0, 1e-6, "dtable accumulates");
  // Rows of unused ids stay zero.
  for (std::int64_t j = 0; j < width; ++j) EXPECT_EQ(once[static_cast<std::size_t>(2 * width + j)], 0.0);
}

TEST_P(Embedding, ManyTokensBf16) {
  const std::int64_t vocab = 50, width = 24, n = 300;
  std::vector<std::int32_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) ids[i] = static_cast<std::int32_t>((i * 37 + i / 7) % vocab);
  Tensor tokens = token_tensor({n}, ids);
  Tensor table = random_tensor({vocab, width}, 1, DType::bf16, "wte");
  Tensor out = named_zeros({n, width}, DType::bf16, "out");
  ops::embedding_forward(backend_ctx(), tokens, table, out);
  EXPECT_EQ(to_doubles(out), embedding_reference(to_doubles(table), ids, width)) << "bf16 gather is a copy";
  Tensor out32 = named_zeros({n, width}, DType::f32, "out32");
  ops::embedding_forward(backend_ctx(), tokens, table, out32);
  EXPECT_EQ(to_doubles(out32), embedding_reference(to_doubles(table), ids, width)) << "bf16 -> f32 widen";

  Tensor dout = random_tensor({n, width}, 2, DType::bf16, "dout");
  Tensor dtable = named_zeros({vocab, width}, DType::bf16, "dwte");
  ops::embedding_backward(backend_ctx(), tokens, dout, dtable);
  std::vector<double> expect(static_cast<std::size_t>(vocab * width), 0.0);
  const auto g = to_doubles(dout);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < width; ++j) expect[ids[i] * width + j] += g[i * width + j];
  EXPECT_LT(relative_error(to_doubles(dtable), expect), 5e-3);
}

TEST_P(Embedding, OutOfRangeTokenIsNamed) {
  Tensor table = random_tensor({5, 4}, 1, DType::f32, "model.embed_tokens.weight");
  Tensor out = named_zeros({3, 4}, DType::f32, "out");
  Tensor bad = token_tensor({3}, {1, 5, 2});
  expect_error_mentioning([&] { ops::embedding_forward(backend_ctx(), bad, table, out); },
                          {"embedding_forward", "token 5", "row 1", "model.embed_tokens.weight"});
  Tensor negative = token_tensor({3}, {1, 2, -1});
  Tensor dtable = named_zeros({5, 4}, DType::f32, "dtable");
  expect_error_mentioning([&] { ops::embedding_backward(backend_ctx(), negative, out, dtable); },
                          {"embedding_backward", "token -1", "row 2", "dtable"});
  EXPECT_EQ(to_doubles(dtable), std::vector<double>(20, 0.0)) << "nothing written before the error";
  Tensor wrong_width = named_zeros({3, 5}, DType::f32, "out5");
  Tensor ok = token_tensor({3}, {0, 1, 2});
  expect_error_mentioning([&] { ops::embedding_forward(backend_ctx(), ok, table, wrong_width); }, {"embedding_forward", "out5"});
  Tensor float_tokens = named_zeros({3}, DType::f32, "ftokens");
  expect_error_mentioning([&] { ops::embedding_forward(backend_ctx(), float_tokens, table, out); }, {"ftokens", "i32"});
}
