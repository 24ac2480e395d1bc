// patchify_forward/backward, prepend_rows_forward/backward,
// broadcast_add_forward/backward, slice_rows_forward/backward (the ops ViT
// assembles its tokens with): forward against a float64 reference, backward
// as the vector-Jacobian product of that reference (finite differences),
// accumulation of parameter gradients, bf16 storage, errors naming tensors.
#include <gtest/gtest.h>

#include "host_op_checks.hpp"
#include "kernels/ops.hpp"

using namespace ftrain;
using namespace ftrain::testing;

FTRAIN_BACKEND_TEST_SUITE(RowOps);

namespace {

// Reference im2col: images [B,H,W,Cin] -> [B*(H/P)*(W/P), Cin*P*P], written
// from the definition (pixel (py*P+ky, px*P+kx), channel c at column
// (c*P+ky)*P+kx), loop order independent of the kernel's.
std::vector<double> patchify_reference(const std::vector<double>& img, std::int64_t B, std::int64_t H,
                                       std::int64_t W, std::int64_t Cin, std::int64_t P) {
  const std::int64_t GH = H / P, GW = W / P, K = Cin * P * P;
  std::vector<double> out(static_cast<std::size_t>(B * GH * GW * K));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x)
        for (std::int64_t c = 0; c < Cin; ++c) {
          const std::int64_t row = (b * GH + y / P) * GW + x / P;
          const std::int64_t col = (c * P + y % P) * P + x % P;
          out[static_cast<std::size_t>(row * K + col)] = img[static_cast<std::size_t>(((b * H + y) * W + x) * Cin + c)];
        }
  return out;
}

// out[b] = [prefix ; x[b]]
std::vector<double> prepend_reference(const std::vector<double>& prefix, const std::vector<double>& x,
                                      std::int64_t B, std::int64_t R, std::int64_t N, std::int64_t C) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b) {
    out.insert(out.end(), prefix.begin(), prefix.begin() + R * C);
    out.insert(out.end(), x.begin() + b * N * C, x.begin() + (b + 1) * N * C);
  }
  return out;
}

std::vector<double> broadcast_add_reference(const std::vector<double>& x, const std::vector<double>& bias) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + bias[i % bias.size()];
  return out;
}

std::vector<double> slice_reference(const std::vector<double>& x, std::int64_t B, std::int64_t T, std::int64_t C,
                                    std::int64_t first, std::int64_t R) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < B; ++b)
    out.insert(out.end(), x.begin() + (b * T + first) * C, x.begin() + (b * T + first + R) * C);
  return out;
}

}  // namespace

TEST_P(RowOps, PatchifyMatchesReference) {
  const std::int64_t B = 2, H = 6, W = 9, Cin = 3, P = 3, rows = B * (H / P) * (W / P), K = Cin * P * P;
  Tensor images = random_tensor({B, H, W, Cin}, 1, DType::f32, "images");
  Tensor patches = named_zeros({rows, K}, DType::f32, "patches");
  ops::patchify_forward(backend_ctx(), images, P, patches);
  auto f = [&](const Inputs& in) { return patchify_reference(in[0], B, H, W, Cin, P); };
  const Inputs in{to_doubles(images)};
  EXPECT_EQ(to_doubles(patches), f(in)) << "a permutation of the pixels, copied exactly";

  // bf16 images into f32 patches widen exactly.
  Tensor images16 = random_tensor({B, H, W, Cin}, 5, DType::bf16, "images16");
  ops::patchify_forward(backend_ctx(), images16, P, patches);
  EXPECT_EQ(to_doubles(patches), patchify_reference(to_doubles(images16), B, H, W, Cin, P));
}

TEST_P(RowOps, PatchifyErrorsNameTheTensors) {
  Tensor images = random_tensor({1, 5, 6, 3}, 1, DType::f32, "odd_images");
  Tensor patches = named_zeros({4, 12}, DType::f32, "patches");
  expect_error_mentioning([&] { ops::patchify_forward(backend_ctx(), images, 2, patches); },
                          {"patchify_forward", "odd_images", "2x2"});
  Tensor good = random_tensor({1, 4, 6, 3}, 1, DType::f32, "images");
  Tensor wrong = named_zeros({6, 11}, DType::f32, "wrong_patches");
  expect_error_mentioning([&] { ops::patchify_forward(backend_ctx(), good, 2, wrong); },
                          {"patchify_forward", "wrong_patches", "[6, 12]"});
}

TEST_P(RowOps, PrependRowsForwardAndBackward) {
  const std::int64_t B = 3, R = 2, N = 5, C = 7;
  Tensor prefix = random_tensor({R, C}, 1, DType::f32, "cls_token");
  Tensor x = random_tensor({B, N, C}, 2, DType::f32, "patches");
  Tensor out = named_zeros({B, R + N, C}, DType::f32, "tokens");
  ops::prepend_rows_forward(backend_ctx(), prefix, x, out);
  auto f = [&](const Inputs& in) { return prepend_reference(in[0], in[1], B, R, N, C); };
  const Inputs in{to_doubles(prefix), to_doubles(x)};
  EXPECT_EQ(to_doubles(out), f(in));

  Tensor dout = random_tensor({B, R + N, C}, 3, DType::f32, "dtokens");
  Tensor dprefix = named_zeros({R, C}, DType::f32, "dcls");
  Tensor dx = random_tensor({B, N, C}, 4, DType::f32, "dpatches");  // overwritten (=)
  ops::prepend_rows_backward(backend_ctx(), dout, dprefix, dx);
  expect_vjp_matches(f, in, 0, to_doubles(dprefix), to_doubles(dout), 1e-6, 5, "dprefix");
  expect_vjp_matches(f, in, 1, to_doubles(dx), to_doubles(dout), 1e-7, 6, "dx");
  const auto once = to_doubles(dprefix), dx_once = to_doubles(dx);
  ops::prepend_rows_backward(backend_ctx(), dout, dprefix, dx);
  expect_scaled(to_doubles(dprefix), once, 2.0, 1e-6, "dprefix accumulates");
  EXPECT_EQ(to_doubles(dx), dx_once) << "dx is written, not accumulated";

  // Mixed storage: bf16 prefix (a bf16 parameter) widened exactly into f32 tokens.
  Tensor prefix16 = random_tensor({R, C}, 7, DType::bf16, "cls16");
  ops::prepend_rows_forward(backend_ctx(), prefix16, x, out);
  EXPECT_EQ(to_doubles(out), prepend_reference(to_doubles(prefix16), to_doubles(x), B, R, N, C));

  Tensor narrow_prefix = named_zeros({R, C - 1}, DType::f32, "narrow_cls");
  expect_error_mentioning([&] { ops::prepend_rows_forward(backend_ctx(), narrow_prefix, x, out); },
                          {"prepend_rows_forward", "narrow_cls"});
  Tensor short_out = named_zeros({B, N, C}, DType::f32, "short_tokens");
  expect_error_mentioning([&] { ops::prepend_rows_forward(backend_ctx(), prefix, x, short_out); },
                          {"prepend_rows_forward", "short_tokens"});
  Tensor wrong_dprefix = named_zeros({R + 1, C}, DType::f32, "wrong_dcls");
  expect_error_mentioning([&] { ops::prepend_rows_backward(backend_ctx(), dout, wrong_dprefix, dx); },
                          {"prepend_rows_backward", "wrong_dcls"});
}

TEST_P(RowOps, BroadcastAddForwardAndBackward) {
  const std::int64_t B = 4, R = 5, C = 1100;  // rows wider than nothing special; R*C spans chunks
  Tensor x = random_tensor({B, R, C}, 1, DType::f32, "tokens");
  Tensor bias = random_tensor({R, C}, 2, DType::f32, "pos_embed");
  Tensor out = named_zeros({B, R, C}, DType::f32, "out");
  ops::broadcast_add_forward(backend_ctx(), x, bias, out);
  auto f = [&](const Inputs& in) { return broadcast_add_reference(in[0], in[1]); };
  const Inputs in{to_doubles(x), to_doubles(bias)};
  const auto want = f(in);
  const auto got = to_doubles(out);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << "element " << i;

  // In place, rounded once into bf16.
  Tensor x2 = x.clone();
  ops::broadcast_add_forward(backend_ctx(), x2, bias, x2);
  EXPECT_EQ(to_doubles(x2), got) << "out aliases x";
  Tensor out16 = named_zeros({B, R, C}, DType::bf16, "out16");
  ops::broadcast_add_forward(backend_ctx(), x, bias, out16);
  const auto got16 = to_doubles(out16);
  for (std::size_t i = 0; i < got16.size(); ++i)
    ASSERT_EQ(got16[i], round_to_bf16(static_cast<float>(want[i]))) << "element " << i;

  Tensor dout = random_tensor({B, R, C}, 3, DType::bf16, "dout");
  Tensor dbias = random_tensor({R, C}, 4, DType::f32, "dpos");
  const auto before = to_doubles(dbias);
  ops::broadcast_add_backward(backend_ctx(), dout, dbias);
  std::vector<double> added = to_doubles(dbias);
  for (std::size_t i = 0; i < added.size(); ++i) added[i] -= before[i];
  expect_vjp_matches(f, in, 1, added, to_doubles(dout), 1e-6, 5, "dbias (accumulated onto its old value)");

  Tensor wrong_bias = named_zeros({R + 1, C}, DType::f32, "pos_too_long");
  expect_error_mentioning([&] { ops::broadcast_add_forward(backend_ctx(), x, wrong_bias, out); },
                          {"broadcast_add_forward", "pos_too_long"});
  expect_error_mentioning([&] { ops::broadcast_add_backward(backend_ctx(), dout, wrong_bias); },
                          {"broadcast_add_backward", "pos_too_long"});
  Tensor flat = named_zeros({B * R, C}, DType::f32, "flat_tokens");
  expect_error_mentioning([&] { ops::broadcast_add_forward(backend_ctx(), flat, bias, out); },
                          {"broadcast_add_forward", "flat_tokens", "[B, rows, C]"});
}

TEST_P(RowOps, SliceRowsForwardAndBackward) {
  const std::int64_t B = 3, T = 6, C = 5;
  for (std::int64_t first : {0, 2}) {
    const std::int64_t R = first == 0 ? 1 : 3;
    Tensor x = random_tensor({B, T, C}, 1, DType::bf16, "x");
    Tensor out = named_zeros({B, R, C}, DType::bf16, "cls");
    ops::slice_rows_forward(backend_ctx(), x, first, out);
    auto f = [&](const Inputs& in) { return slice_reference(in[0], B, T, C, first, R); };
    const Inputs in{to_doubles(x)};
    EXPECT_EQ(to_doubles(out), f(in)) << "first " << first;

    Tensor dout = random_tensor({B, R, C}, 2, DType::f32, "dcls");
    Tensor dx = random_tensor({B, T, C}, 3, DType::f32, "dx");  // every element overwritten
    ops::slice_rows_backward(backend_ctx(), dout, first, dx);
    expect_vjp_matches(f, in, 0, to_doubles(dx), to_doubles(dout), 1e-7, 4, "dx");
    const auto dxv = to_doubles(dx);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        if (t < first || t >= first + R)
          for (std::int64_t c = 0; c < C; ++c)
            ASSERT_EQ(dxv[static_cast<std::size_t>((b * T + t) * C + c)], 0.0) << "row " << t << " not sliced: zero";
  }
  Tensor x = random_tensor({B, T, C}, 1, DType::f32, "x");
  Tensor out = named_zeros({B, 2, C}, DType::f32, "tail");
  expect_error_mentioning([&] { ops::slice_rows_forward(backend_ctx(), x, 5, out); },
                          {"slice_rows_forward", "tail", "rows 5 .. 7"});
  expect_error_mentioning([&] { ops::slice_rows_backward(backend_ctx(), out, -1, x); },
                          {"slice_rows_backward", "tail"});
}
