// Backend parity: every op run on backend A and on backend B with the same
// random inputs, outputs compared (after ggml's test-backend-ops).
//
// backend_cases() (backend_test.hpp) lists every registered backend with a
// synchronous and an asynchronous stream. With only the host registered,
// parity compares host (ops inline) against host_async (the same kernels
// enqueued on a worker thread with borrowed tensors): bit-identical results
// are required, which checks the stream path (argument capture, ordering,
// stream-ordered release of temporaries). A CUDA backend is compared with
// the host within the tolerance its caller gives.
//
// parity_cases() has one entry per op of kernels/op_list.hpp; the test checks
// that none is missing, so a new op cannot skip the comparison.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/adamw_chunks.hpp"
#include "kernels/ops.hpp"
#include "kernels/rope_frequencies.hpp"

namespace ftrain::testing {

struct ParityOutputs {
  std::vector<Tensor> tensors;  // read back after the context synchronized
  std::vector<double> scalars;  // host values ops return
};

struct ParityCase {
  std::string op;
  // Makes its inputs on ctx.device() from `seed` (the same values for every
  // backend) and runs the op on ctx.
  std::function<ParityOutputs(ExecutionContext& ctx, std::uint64_t seed)> run;
};

namespace parity {

inline Tensor random(ExecutionContext& ctx, const Shape& shape, std::uint64_t seed, DType dtype = DType::f32,
                     double scale = 1.0, const char* name = "input") {
  const std::int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = static_cast<float>(scale * rng::normal(seed, 29, static_cast<std::uint64_t>(i)));
  Tensor t = from_floats(shape, v, dtype);
  t.set_name(name);
  return ctx.device() == Device::host ? t : to_device(t, ctx.device());
}

inline Tensor positive(ExecutionContext& ctx, const Shape& shape, std::uint64_t seed) {
  Tensor t = random(ctx, shape, seed);  // host values to adjust below
  Tensor h = t.device() == Device::host ? t : to_device(t, Device::host);
  float* p = h.data_as<float>();
  for (std::int64_t i = 0; i < h.numel(); ++i) p[i] = 0.5f + std::abs(p[i]);
  return ctx.device() == Device::host ? h : to_device(h, ctx.device());
}

inline Tensor zeros(ExecutionContext& ctx, const Shape& shape, DType dtype = DType::f32) {
  return Tensor::zeros(shape, dtype, ctx.device(), "output");
}

// i32 values in [0, bound), every 5th = ignore when `ignore` is set.
inline Tensor ids(ExecutionContext& ctx, std::int64_t n, std::int64_t bound, std::uint64_t seed, bool ignore) {
  Tensor t = Tensor::empty({n}, DType::i32, Device::host, "ids");
  auto* p = t.data_as<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t h = rng::hash_name(std::to_string(seed * 1000 + static_cast<std::uint64_t>(i)));
    p[i] = ignore && i % 5 == 4 ? kIgnoreIndex : static_cast<std::int32_t>(h % static_cast<std::uint64_t>(bound));
  }
  return ctx.device() == Device::host ? t : to_device(t, ctx.device());
}

// i32 [B, T] RoPE positions restarting at each document of a packed row.
inline Tensor restarting_positions(ExecutionContext& ctx, std::int64_t batch, std::int64_t time) {
  Tensor t = Tensor::empty({batch, time}, DType::i32, Device::host, "positions");
  auto* p = t.data_as<std::int32_t>();
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < time; ++i) p[b * time + i] = static_cast<std::int32_t>(i % (b + 2));
  return ctx.device() == Device::host ? t : to_device(t, ctx.device());
}

}  // namespace parity

inline std::vector<ParityCase> parity_cases() {
  using namespace parity;
  constexpr std::int64_t N = 12, C = 16, O = 10, V = 37, B = 2, T = 6, Hq = 4, Hkv = 2, D = 8;
  std::vector<ParityCase> c;
  c.push_back({"linear_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {O, C}, s + 1, DType::bf16),
                        b = random(ctx, {O}, s + 2), y = zeros(ctx, {N, O});
                 ops::linear_forward(ctx, x, w, &b, y);
                 return ParityOutputs{{y}, {}};
               }});
  c.push_back({"linear_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {O, C}, s + 1), dy = random(ctx, {N, O}, s + 2);
                 Tensor dx = zeros(ctx, {N, C}), dw = random(ctx, {O, C}, s + 3), db = random(ctx, {O}, s + 4);
                 ops::linear_backward(ctx, x, w, dy, &dx, dw, &db);
                 // A frozen weight (LoRA): undefined dw and db, dx only.
                 Tensor frozen_dx = zeros(ctx, {N, C}), frozen_dw, frozen_db;
                 ops::linear_backward(ctx, x, w, dy, &frozen_dx, frozen_dw, &frozen_db);
                 return ParityOutputs{{dx, dw, db, frozen_dx}, {}};
               }});
  c.push_back({"embedding_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor tokens = ids(ctx, N, V, s, false), table = random(ctx, {V, C}, s + 1), out = zeros(ctx, {N, C});
                 ops::embedding_forward(ctx, tokens, table, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"embedding_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor tokens = ids(ctx, N, V, s, false), dout = random(ctx, {N, C}, s + 1);
                 Tensor dtable = random(ctx, {V, C}, s + 2);
                 ops::embedding_backward(ctx, tokens, dout, dtable);
                 return ParityOutputs{{dtable}, {}};
               }});
  // The vocabulary-parallel pair: the rows [first, first + V/2) of a table of V rows.
  c.push_back({"embedding_forward_rows", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor tokens = ids(ctx, N, V, s, false), table = random(ctx, {V / 2, C}, s + 1),
                        out = zeros(ctx, {N, C});
                 ops::embedding_forward_rows(ctx, tokens, table, V / 2, V, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"embedding_backward_rows", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor tokens = ids(ctx, N, V, s, false), dout = random(ctx, {N, C}, s + 1);
                 Tensor dtable = random(ctx, {V / 2, C}, s + 2);
                 ops::embedding_backward_rows(ctx, tokens, dout, V / 2, dtable);
                 return ParityOutputs{{dtable}, {}};
               }});
  c.push_back({"rmsnorm_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {C}, s + 1), y = zeros(ctx, {N, C}),
                        rstd = zeros(ctx, {N});
                 ops::rmsnorm_forward(ctx, x, w, 1e-5f, y, rstd);
                 return ParityOutputs{{y, rstd}, {}};
               }});
  c.push_back({"rmsnorm_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {C}, s + 1), y = zeros(ctx, {N, C}),
                        rstd = zeros(ctx, {N});
                 ops::rmsnorm_forward(ctx, x, w, 1e-5f, y, rstd);
                 Tensor dy = random(ctx, {N, C}, s + 2), dx = zeros(ctx, {N, C}), dw = random(ctx, {C}, s + 3);
                 ops::rmsnorm_backward(ctx, x, w, rstd, dy, dx, dw);
                 return ParityOutputs{{dx, dw}, {}};
               }});
  c.push_back({"layernorm_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {C}, s + 1), b = random(ctx, {C}, s + 2);
                 Tensor y = zeros(ctx, {N, C}), mean = zeros(ctx, {N}), rstd = zeros(ctx, {N});
                 ops::layernorm_forward(ctx, x, w, &b, 1e-5f, y, mean, rstd);
                 return ParityOutputs{{y, mean, rstd}, {}};
               }});
  c.push_back({"layernorm_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), w = random(ctx, {C}, s + 1), b = random(ctx, {C}, s + 2);
                 Tensor y = zeros(ctx, {N, C}), mean = zeros(ctx, {N}), rstd = zeros(ctx, {N});
                 ops::layernorm_forward(ctx, x, w, &b, 1e-5f, y, mean, rstd);
                 Tensor dy = random(ctx, {N, C}, s + 3), dx = zeros(ctx, {N, C}), dw = zeros(ctx, {C}),
                        db = zeros(ctx, {C});
                 ops::layernorm_backward(ctx, x, w, mean, rstd, dy, dx, dw, &db);
                 return ParityOutputs{{dx, dw, db}, {}};
               }});
  c.push_back({"rope_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {B, T, Hq, D}, s), y = zeros(ctx, {B, T, Hq, D});
                 Tensor inv = rope_inv_freq(D, 10000.0);
                 if (ctx.device() != Device::host) inv = to_device(inv, ctx.device());
                 Tensor positions = restarting_positions(ctx, B, T), yp = zeros(ctx, {B, T, Hq, D});
                 ops::rope_forward(ctx, x, inv, 3, nullptr, y);
                 ops::rope_forward(ctx, x, inv, 2, &positions, yp);
                 ops::rope_forward(ctx, x, inv, 5, nullptr, x);  // in place
                 return ParityOutputs{{y, yp, x}, {}};
               }});
  c.push_back({"rope_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor dy = random(ctx, {B, T, Hkv, D}, s), dx = zeros(ctx, {B, T, Hkv, D});
                 Tensor inv = rope_inv_freq(D, 10000.0);
                 if (ctx.device() != Device::host) inv = to_device(inv, ctx.device());
                 Tensor positions = restarting_positions(ctx, B, T), dxp = zeros(ctx, {B, T, Hkv, D});
                 ops::rope_backward(ctx, dy, inv, 7, nullptr, dx);
                 ops::rope_backward(ctx, dy, inv, 0, &positions, dxp);
                 return ParityOutputs{{dx, dxp}, {}};
               }});
  c.push_back({"swiglu_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor g = random(ctx, {N, C}, s), u = random(ctx, {N, C}, s + 1), out = zeros(ctx, {N, C});
                 ops::swiglu_forward(ctx, g, u, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"swiglu_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor g = random(ctx, {N, C}, s), u = random(ctx, {N, C}, s + 1), d = random(ctx, {N, C}, s + 2);
                 Tensor dg = zeros(ctx, {N, C}), du = zeros(ctx, {N, C});
                 ops::swiglu_backward(ctx, g, u, d, dg, du);
                 return ParityOutputs{{dg, du}, {}};
               }});
  c.push_back({"gelu_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), y1 = zeros(ctx, {N, C}), y2 = zeros(ctx, {N, C}, DType::bf16);
                 ops::gelu_forward(ctx, x, GeluApproximation::none, y1);
                 ops::gelu_forward(ctx, x, GeluApproximation::tanh, y2);
                 return ParityOutputs{{y1, y2}, {}};
               }});
  c.push_back({"gelu_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), dy = random(ctx, {N, C}, s + 1), dx = zeros(ctx, {N, C});
                 ops::gelu_backward(ctx, x, dy, GeluApproximation::tanh, dx);
                 return ParityOutputs{{dx}, {}};
               }});
  c.push_back({"patchify_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor img = random(ctx, {B, 4, 6, 3}, s), p = zeros(ctx, {B * 6, 12});
                 Tensor p16 = zeros(ctx, {B * 6, 12}, DType::bf16);
                 ops::patchify_forward(ctx, img, 2, p);
                 ops::patchify_forward(ctx, img, 2, p16);
                 return ParityOutputs{{p, p16}, {}};
               }});
  c.push_back({"prepend_rows_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor prefix = random(ctx, {1, C}, s, DType::bf16), x = random(ctx, {B, T, C}, s + 1);
                 Tensor out = zeros(ctx, {B, T + 1, C});
                 ops::prepend_rows_forward(ctx, prefix, x, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"prepend_rows_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor dout = random(ctx, {B, T + 1, C}, s), dprefix = random(ctx, {1, C}, s + 1);
                 Tensor dx = zeros(ctx, {B, T, C});
                 ops::prepend_rows_backward(ctx, dout, dprefix, dx);
                 return ParityOutputs{{dprefix, dx}, {}};
               }});
  c.push_back({"broadcast_add_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {B, T, C}, s), bias = random(ctx, {T, C}, s + 1);
                 Tensor out = zeros(ctx, {B, T, C}, DType::bf16);
                 ops::broadcast_add_forward(ctx, x, bias, out);
                 ops::broadcast_add_forward(ctx, x, bias, x);  // in place
                 return ParityOutputs{{out, x}, {}};
               }});
  c.push_back({"broadcast_add_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor dout = random(ctx, {B, T, C}, s), dbias = random(ctx, {T, C}, s + 1);
                 ops::broadcast_add_backward(ctx, dout, dbias);
                 return ParityOutputs{{dbias}, {}};
               }});
  c.push_back({"slice_rows_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {B, T, C}, s), out = zeros(ctx, {B, 2, C});
                 ops::slice_rows_forward(ctx, x, 1, out);
                 return ParityOutputs{{out}, {}};
               }});
  c.push_back({"slice_rows_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor dout = random(ctx, {B, 2, C}, s), dx = random(ctx, {B, T, C}, s + 1);
                 ops::slice_rows_backward(ctx, dout, 1, dx);
                 return ParityOutputs{{dx}, {}};
               }});
  c.push_back({"attention_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor q = random(ctx, {B, T, Hq, D}, s), k = random(ctx, {B, T, Hkv, D}, s + 1),
                        v = random(ctx, {B, T, Hkv, D}, s + 2);
                 Tensor out = zeros(ctx, {B, T, Hq, D}), lse = zeros(ctx, {B, Hq, T});
                 ops::attention_forward(ctx, q, k, v, true, nullptr, 0.35f, out, lse);
                 return ParityOutputs{{out, lse}, {}};
               }});
  c.push_back({"attention_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor q = random(ctx, {B, T, Hq, D}, s), k = random(ctx, {B, T, Hkv, D}, s + 1),
                        v = random(ctx, {B, T, Hkv, D}, s + 2);
                 Tensor out = zeros(ctx, {B, T, Hq, D}), lse = zeros(ctx, {B, Hq, T});
                 ops::attention_forward(ctx, q, k, v, false, nullptr, 0.35f, out, lse);
                 Tensor dout = random(ctx, {B, T, Hq, D}, s + 3);
                 Tensor dq = zeros(ctx, {B, T, Hq, D}), dk = zeros(ctx, {B, T, Hkv, D});
                 Tensor dv = zeros(ctx, {B, T, Hkv, D});
                 ops::attention_backward(ctx, q, k, v, out, lse, dout, false, nullptr, 0.35f, dq, dk, dv);
                 return ParityOutputs{{dq, dk, dv}, {}};
               }});
  // Ring attention's blocks: the queries of the first 4 tokens against the
  // keys of the last 4, positions interleaved so the causal bound cuts
  // through the block, with and without document ids.
  auto block_tokens = [](ExecutionContext& ctx, std::int64_t batch, std::int64_t len, std::int32_t first,
                         std::int32_t stride) {
    Tensor t = Tensor::empty({batch, len}, DType::i32, Device::host, "positions");
    for (std::int64_t i = 0; i < batch * len; ++i)
      t.data_as<std::int32_t>()[i] = first + stride * static_cast<std::int32_t>(i % len);
    return ctx.device() == Device::host ? t : to_device(t, ctx.device());
  };
  c.push_back({"attention_block_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor q = random(ctx, {B, 4, Hq, D}, s), k = random(ctx, {B, 5, Hkv, D}, s + 1),
                        v = random(ctx, {B, 5, Hkv, D}, s + 2);
                 Tensor qp = block_tokens(ctx, B, 4, 1, 2), kp = block_tokens(ctx, B, 5, 0, 2);
                 Tensor qd = block_tokens(ctx, B, 4, 0, 1), kd = block_tokens(ctx, B, 5, 1, 1);
                 Tensor out = zeros(ctx, {B, 4, Hq, D}), lse = zeros(ctx, {B, Hq, 4});
                 Tensor out2 = zeros(ctx, {B, 4, Hq, D}), lse2 = zeros(ctx, {B, Hq, 4});
                 ops::attention_block_forward(ctx, q, k, v, qp, kp, nullptr, nullptr, true, 0.35f, out, lse);
                 ops::attention_block_forward(ctx, q, k, v, qp, kp, &qd, &kd, false, 0.35f, out2, lse2);
                 return ParityOutputs{{out, lse, out2, lse2}, {}};
               }});
  c.push_back({"attention_block_merge", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor out = random(ctx, {B, T, Hq, D}, s), lse = random(ctx, {B, Hq, T}, s + 1);
                 Tensor block = random(ctx, {B, T, Hq, D}, s + 2, DType::bf16), block_lse = random(ctx, {B, Hq, T}, s + 3);
                 ops::attention_block_merge(ctx, out, lse, block, block_lse);
                 return ParityOutputs{{out, lse}, {}};
               }});
  c.push_back({"attention_block_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor q = random(ctx, {B, 4, Hq, D}, s), k = random(ctx, {B, 5, Hkv, D}, s + 1),
                        v = random(ctx, {B, 5, Hkv, D}, s + 2);
                 Tensor qp = block_tokens(ctx, B, 4, 1, 2), kp = block_tokens(ctx, B, 5, 0, 2);
                 Tensor out = zeros(ctx, {B, 4, Hq, D}), lse = zeros(ctx, {B, Hq, 4});
                 ops::attention_block_forward(ctx, q, k, v, qp, kp, nullptr, nullptr, true, 0.35f, out, lse);
                 Tensor dout = random(ctx, {B, 4, Hq, D}, s + 3);
                 Tensor dq = random(ctx, {B, 4, Hq, D}, s + 4), dk = random(ctx, {B, 5, Hkv, D}, s + 5);
                 Tensor dv = random(ctx, {B, 5, Hkv, D}, s + 6);  // accumulated into
                 ops::attention_block_backward(ctx, q, k, v, out, lse, dout, qp, kp, nullptr, nullptr, true, 0.35f, dq,
                                               dk, dv);
                 return ParityOutputs{{dq, dk, dv}, {}};
               }});
  c.push_back({"cross_entropy_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor h = random(ctx, {N, C}, s), w = random(ctx, {V, C}, s + 1), b = random(ctx, {V}, s + 2);
                 Tensor t = ids(ctx, N, V, s + 3, true), losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_forward(ctx, h, w, &b, t, 8, losses, lse);
                 return ParityOutputs{{losses, lse}, {}};
               }});
  c.push_back({"cross_entropy_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor h = random(ctx, {N, C}, s), w = random(ctx, {V, C}, s + 1), b = random(ctx, {V}, s + 2);
                 Tensor t = ids(ctx, N, V, s + 3, true), losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_forward(ctx, h, w, &b, t, 8, losses, lse);
                 Tensor dh = zeros(ctx, {N, C}), dw = zeros(ctx, {V, C}), db = zeros(ctx, {V});
                 Tensor scale = from_floats({1}, {0.125f});
                 if (ctx.device() != Device::host) scale = to_device(scale, ctx.device());
                 ops::cross_entropy_backward(ctx, h, w, &b, t, lse, scale, 8, dh, dw, &db);
                 return ParityOutputs{{dh, dw, db}, {}};
               }});
  // A head slice of rows [V/2, V): its local lse and target logits, the
  // group's combination (one slice standing for the group), its backward.
  c.push_back({"cross_entropy_slice_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor h = random(ctx, {N, C}, s), w = random(ctx, {V / 2, C}, s + 1);
                 Tensor t = ids(ctx, N, V, s + 3, true), lse = zeros(ctx, {N}), picked = zeros(ctx, {N});
                 ops::cross_entropy_slice_forward(ctx, h, w, t, V / 2, V, 8, lse, picked);
                 return ParityOutputs{{lse, picked}, {}};
               }});
  c.push_back({"cross_entropy_slice_sum_exp", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor lse = random(ctx, {N}, s), max = positive(ctx, {N}, s + 1), sum = zeros(ctx, {N});
                 ops::cross_entropy_slice_sum_exp(ctx, lse, max, sum);
                 return ParityOutputs{{sum}, {}};
               }});
  c.push_back({"cross_entropy_slice_loss", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor max = random(ctx, {N}, s), sum = positive(ctx, {N}, s + 1), picked = random(ctx, {N}, s + 2);
                 Tensor t = ids(ctx, N, V, s + 3, true), losses = zeros(ctx, {N}), lse = zeros(ctx, {N});
                 ops::cross_entropy_slice_loss(ctx, max, sum, picked, t, losses, lse);
                 return ParityOutputs{{losses, lse}, {}};
               }});
  c.push_back({"cross_entropy_slice_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor h = random(ctx, {N, C}, s), w = random(ctx, {V / 2, C}, s + 1);
                 Tensor t = ids(ctx, N, V, s + 3, true), lse = zeros(ctx, {N}), picked = zeros(ctx, {N});
                 ops::cross_entropy_slice_forward(ctx, h, w, t, V / 2, V, 8, lse, picked);
                 Tensor dh = zeros(ctx, {N, C}), dw = zeros(ctx, {V / 2, C});
                 Tensor scale = from_floats({1}, {0.125f});
                 if (ctx.device() != Device::host) scale = to_device(scale, ctx.device());
                 ops::cross_entropy_slice_backward(ctx, h, w, t, V / 2, V, lse, scale, 8, dh, dw);
                 return ParityOutputs{{dh, dw}, {}};
               }});
  c.push_back({"add", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor a = random(ctx, {N, C}, s), b = random(ctx, {N, C}, s + 1, DType::bf16);
                 Tensor out = zeros(ctx, {N, C});
                 ops::add(ctx, a, b, out);
                 ops::add(ctx, a, b, a);  // aliasing
                 return ParityOutputs{{out, a}, {}};
               }});
  c.push_back({"add_inplace", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor acc = random(ctx, {N, C}, s), x = random(ctx, {N, C}, s + 1);
                 ops::add_inplace(ctx, acc, x);
                 return ParityOutputs{{acc}, {}};
               }});
  c.push_back({"scale_inplace", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s, DType::bf16);
                 ops::scale_inplace(ctx, x, 0.3f);
                 return ParityOutputs{{x}, {}};
               }});
  c.push_back({"dropout", [=](ExecutionContext& ctx, std::uint64_t s) {
                 // The mask is a pure function of (seed, stream, global index): identical on every backend.
                 Tensor x = random(ctx, {N, C}, s, DType::bf16);
                 Tensor y = zeros(ctx, {N, C}, DType::bf16);
                 ops::dropout(ctx, x, 0.3f, s, 17, 5, y);
                 ops::dropout(ctx, x, 0.25f, s, 18, 0, x);  // in place
                 return ParityOutputs{{y, x}, {}};
               }});
  c.push_back({"fill", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s);
                 ops::fill(ctx, x, -2.5f);
                 return ParityOutputs{{x}, {}};
               }});
  c.push_back({"cast", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s, DType::f32, 100.0);
                 Tensor b = zeros(ctx, {N, C}, DType::bf16), e4 = zeros(ctx, {N, C}, DType::fp8_e4m3),
                        e5 = zeros(ctx, {N, C}, DType::fp8_e5m2);
                 ops::cast(ctx, x, b);
                 ops::cast(ctx, x, e4);
                 ops::cast(ctx, b, e5);
                 return ParityOutputs{{b, e4, e5}, {}};
               }});
  c.push_back({"sum", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), y = random(ctx, {V}, s + 1, DType::bf16);
                 Tensor sx = zeros(ctx, {1}), sy = zeros(ctx, {1});
                 ops::sum(ctx, x, sx);
                 ops::sum(ctx, y, sy);
                 return ParityOutputs{{sx, sy}, {}};
               }});
  c.push_back({"sum_squares", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), y = random(ctx, {N, C}, s + 1, DType::bf16);
                 ops::add_inplace(ctx, x, y);  // enqueued before: the sum must see it
                 return ParityOutputs{{x}, {ops::sum_squares(ctx, x), ops::sum_squares(ctx, y)}};
               }});
  c.push_back({"adamw_update", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor p = random(ctx, {N * C}, s), g = random(ctx, {N * C}, s + 1), m = random(ctx, {N * C}, s + 2);
                 Tensor v = positive(ctx, {N * C}, s + 3);
                 ops::adamw_update(ctx, p, g, m, v, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 3, 0.7f);
                 return ParityOutputs{{p, m, v}, {}};
               }});
  c.push_back({"sum_squares_accumulate", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s), y = random(ctx, {V}, s + 1, DType::bf16);
                 Tensor acc = zeros(ctx, {1}, DType::f64);
                 ops::sum_squares_accumulate(ctx, x, acc);
                 ops::sum_squares_accumulate(ctx, y, acc);
                 return ParityOutputs{{acc}, {}};
               }});
  c.push_back({"clip_coefficient", [=](ExecutionContext& ctx, std::uint64_t s) {
                 // Above the limit (clipped), below it, then a NaN norm (flagged, sticky).
                 Tensor x = random(ctx, {N, C}, s);
                 Tensor sum_sq = zeros(ctx, {1}, DType::f64), norm = zeros(ctx, {1}, DType::f64);
                 Tensor clipped = zeros(ctx, {1}), unclipped = zeros(ctx, {1}), nan_scale = zeros(ctx, {1});
                 Tensor diverged = zeros(ctx, {1}, DType::i64);
                 ops::sum_squares_accumulate(ctx, x, sum_sq);
                 ops::clip_coefficient(ctx, sum_sq, 1.0, 4, norm, clipped, diverged);
                 ops::clip_coefficient(ctx, sum_sq, 1e6, 5, norm, unclipped, diverged);
                 Tensor bad = random(ctx, {N, C}, s + 1);
                 ops::fill(ctx, bad, std::nanf(""));
                 ops::sum_squares_accumulate(ctx, bad, sum_sq);
                 Tensor nan_norm = zeros(ctx, {1}, DType::f64);
                 ops::clip_coefficient(ctx, sum_sq, 1.0, 6, nan_norm, nan_scale, diverged);
                 ops::clip_coefficient(ctx, sum_sq, 1.0, 7, nan_norm, nan_scale, diverged);
                 return ParityOutputs{{norm, clipped, unclipped, nan_norm, nan_scale, diverged}, {}};
               }});
  // The multi-tensor AdamW over a shard of N * C = 192 elements: gaps at the
  // front, between segments and at the end (padding, left alone), decay
  // flags mixed, chunks of 16 so segments span several.
  auto adamw_chunks = [](ExecutionContext& ctx) {
    return adamw_chunk_table({{2, 40, true}, {42, 9, false}, {60, 70, true}, {130, 3, false}, {150, 37, true}},
                             ctx.device(), "adamw_chunks", 16);
  };
  c.push_back({"adamw_update_chunks", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor p = random(ctx, {N * C}, s), g = random(ctx, {N * C}, s + 1), m = random(ctx, {N * C}, s + 2);
                 Tensor v = positive(ctx, {N * C}, s + 3);
                 ops::adamw_update_chunks(ctx, p, g, m, v, adamw_chunks(ctx), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 3,
                                          0.7f);
                 return ParityOutputs{{p, m, v}, {}};
               }});
  c.push_back({"adamw_update_chunks_guarded", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor p = random(ctx, {N * C}, s), g = random(ctx, {N * C}, s + 1), m = random(ctx, {N * C}, s + 2);
                 Tensor v = positive(ctx, {N * C}, s + 3);
                 Tensor scale = zeros(ctx, {1}), clear = zeros(ctx, {1}, DType::i64);
                 ops::fill(ctx, scale, 0.7f);
                 const Tensor chunks = adamw_chunks(ctx);
                 ops::adamw_update_chunks_guarded(ctx, p, g, m, v, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 3, scale,
                                                  clear);
                 Tensor flagged = Tensor::zeros({1}, DType::i64, Device::host, "diverged_step");
                 flagged.data_as<std::int64_t>()[0] = 3;
                 if (ctx.device() != Device::host) flagged = to_device(flagged, ctx.device());
                 ops::adamw_update_chunks_guarded(ctx, p, g, m, v, chunks, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 4, scale,
                                                  flagged);
                 return ParityOutputs{{p, m, v}, {}};
               }});
  // FP8: descriptors over f32[1] scalars on the device (filled by an op).
  auto scalar = [](ExecutionContext& ctx, float value) {
    Tensor t = zeros(ctx, {1});
    ops::fill(ctx, t, value);
    return t;
  };
  auto fp8 = [=](ExecutionContext& ctx, const Shape& shape, DType format, float scale, bool record) {
    return Fp8Tensor{zeros(ctx, shape, format), scalar(ctx, scale), zeros(ctx, {1}),
                     record ? scalar(ctx, 0.5f) : Tensor()};
  };
  c.push_back({"cast_to_fp8", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s, DType::f32, 30.0), y = random(ctx, {N, C}, s + 1, DType::bf16);
                 Fp8Tensor a = fp8(ctx, {N, C}, DType::fp8_e4m3, 7.3f, true);
                 Fp8Tensor b = fp8(ctx, {N, C}, DType::fp8_e5m2, 1000.0f, true);
                 ops::cast_to_fp8(ctx, x, a);
                 ops::cast_to_fp8(ctx, y, b);
                 return ParityOutputs{{a.data, a.scale_inv, a.amax, b.data, b.scale_inv, b.amax}, {}};
               }});
  c.push_back({"fp8_transpose", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Fp8Tensor a = fp8(ctx, {N, C}, DType::fp8_e4m3, 7.3f, false);
                 ops::cast_to_fp8(ctx, random(ctx, {N, C}, s, DType::f32, 30.0), a);
                 Fp8Tensor t = fp8(ctx, {C, N}, DType::fp8_e4m3, 1.0f, false);  // its data: the destination
                 ops::fp8_transpose(ctx, a.data, t.data);
                 return ParityOutputs{{a.data, t.data}, {}};
               }});
  c.push_back({"rmsnorm_forward_fp8", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor x = random(ctx, {N, C}, s, DType::bf16), w = random(ctx, {C}, s + 1);
                 Tensor y = zeros(ctx, {N, C}, DType::bf16), rstd = zeros(ctx, {N});
                 Fp8Casts casts;
                 casts.out[casts.count++] = fp8(ctx, {N, C}, DType::fp8_e4m3, 37.3f, true);
                 casts.out[casts.count++] = fp8(ctx, {N, C}, DType::fp8_e5m2, 900.0f, false);
                 ops::rmsnorm_forward_fp8(ctx, x, w, 1e-5f, y, rstd, casts);
                 const Fp8Tensor& a = casts.out[0];
                 const Fp8Tensor& b = casts.out[1];
                 return ParityOutputs{{y, rstd, a.data, a.scale_inv, a.amax, b.data, b.scale_inv}, {}};
               }});
  c.push_back({"swiglu_forward_fp8", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor g = random(ctx, {N, C}, s, DType::f32, 3.0), u = random(ctx, {N, C}, s + 1, DType::bf16);
                 Tensor out = zeros(ctx, {N, C}, DType::bf16);
                 Fp8Tensor q = fp8(ctx, {N, C}, DType::fp8_e4m3, 11.7f, true);
                 ops::swiglu_forward_fp8(ctx, g, u, out, q);
                 return ParityOutputs{{out, q.data, q.scale_inv, q.amax}, {}};
               }});
  // The FP8 GEMMs read operands a cast wrote just before (stream order).
  auto fp8_operands = [=](ExecutionContext& ctx, std::uint64_t s, Fp8Tensor& x, Fp8Tensor& w, Fp8Tensor& dy,
                          Tensor& dy_source) {
    x = fp8(ctx, {N, C}, DType::fp8_e4m3, 40.0f, false);
    w = fp8(ctx, {O, C}, DType::fp8_e4m3, 300.0f, false);
    dy = fp8(ctx, {N, O}, DType::fp8_e5m2, 2000.0f, false);
    dy_source = random(ctx, {N, O}, s + 2, DType::bf16, 0.1);
    ops::cast_to_fp8(ctx, random(ctx, {N, C}, s, DType::bf16), x);
    ops::cast_to_fp8(ctx, random(ctx, {O, C}, s + 1, DType::f32, 0.3), w);
    ops::cast_to_fp8(ctx, dy_source, dy);
  };
  c.push_back({"fp8_linear_forward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Fp8Tensor x, w, dy;
                 Tensor dy_source;
                 fp8_operands(ctx, s, x, w, dy, dy_source);
                 Tensor b = random(ctx, {O}, s + 3), y = zeros(ctx, {N, O}), yb = zeros(ctx, {N, O}, DType::bf16);
                 ops::fp8_linear_forward(ctx, x, w, &b, y);
                 ops::fp8_linear_forward(ctx, x, w, nullptr, yb);
                 return ParityOutputs{{y, yb}, {}};
               }});
  c.push_back({"fp8_linear_backward", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Fp8Tensor x, w, dy;
                 Tensor dy_source;
                 fp8_operands(ctx, s, x, w, dy, dy_source);
                 Tensor dx = zeros(ctx, {N, C}, DType::bf16), dw = random(ctx, {O, C}, s + 4), db = random(ctx, {O}, s + 5);
                 ops::fp8_linear_backward(ctx, x, w, dy, dy_source, &dx, dw, &db);
                 return ParityOutputs{{dx, dw, db}, {}};
               }});
  c.push_back({"fp8_update_scales", [=](ExecutionContext& ctx, std::uint64_t s) {
                 Tensor h = positive(ctx, {4, 3}, s), scale = positive(ctx, {3}, s + 1);
                 Tensor scale_inv = positive(ctx, {3}, s + 2);  // stale: the update rewrites it
                 ops::fp8_update_scales(ctx, h, scale, scale_inv, DType::fp8_e4m3, DType::fp8_e5m2, 1,
                                        Fp8AmaxAlgo::max);
                 ops::fp8_update_scales(ctx, h, scale, scale_inv, DType::fp8_e4m3, DType::fp8_e4m3, 0,
                                        Fp8AmaxAlgo::most_recent);
                 return ParityOutputs{{h, scale, scale_inv}, {}};
               }});
  return c;
}

// Every op of kernels/op_list.hpp, by name.
inline std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
#define FTRAIN_PARITY_OP_NAME(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) names.push_back(#NAME);
  FTRAIN_OP_LIST(FTRAIN_PARITY_OP_NAME)
#undef FTRAIN_PARITY_OP_NAME
  return names;
}

}  // namespace ftrain::testing
