#include "layers/lora.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/error.hpp"
#include "kernels/math/dropout.hpp"
#include "kernels/ops.hpp"
#include "plugin/model.hpp"

namespace ftrain::lora {

double Config::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / static_cast<double>(rank);
}

bool Config::targets_module(const std::string& module) const {
  if (all_linear) return true;
  for (const auto& t : targets) {
    if (module == t) return true;
    if (module.size() > t.size() && module.compare(module.size() - t.size(), t.size(), t) == 0 &&
        module[module.size() - t.size() - 1] == '.')
      return true;
  }
  return false;
}

std::string Config::targets_text() const {
  if (all_linear) return "all-linear";
  std::ostringstream out;
  for (std::size_t i = 0; i < targets.size(); ++i) out << (i ? "," : "") << targets[i];
  return out.str();
}

std::string module_of_weight(const std::string& weight_name) {
  static const std::string kSuffix = ".weight";
  if (weight_name.size() <= kSuffix.size() ||
      weight_name.compare(weight_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
    return "";
  return weight_name.substr(0, weight_name.size() - kSuffix.size());
}

std::string lora_a_name(const std::string& module) { return module + ".lora_A.weight"; }
std::string lora_b_name(const std::string& module) { return module + ".lora_B.weight"; }

float dropout_factor(std::uint64_t seed, std::uint64_t stream, std::int64_t global_row, std::int64_t column,
                     std::int64_t width, float p) {
  return math::dropout_factor(seed, stream, math::dropout_mask_index(global_row, width, column), p);
}

bool adapted(const StepContext& ctx, int slot) { return ctx.lora != nullptr && ctx.lora->at(slot) != nullptr; }

namespace {

struct Operands {
  const UnitAdapters* unit;
  const AdaptedLinear* linear;
  Tensor b, grad_b;  // the rows of B (and its gradient) this call covers
  Tensor x;  // [N, in]
  std::int64_t rows, in, out, rank;
  bool drop;  // dropout active
  std::int64_t first_row;
};

Operands operands(const StepContext& ctx, int slot, const Tensor& x, std::int64_t out_features, std::int64_t out_first,
                  const char* what) {
  Operands o{};
  o.unit = ctx.lora;
  o.linear = o.unit->at(slot);
  const AdaptedLinear& l = *o.linear;
  FT_CHECK(l.a.ndim() == 2 && l.b.ndim() == 2 && l.b.dim(1) == l.a.dim(0))
      << what << " " << l.module << ": lora_A " << l.a.describe() << " / lora_B " << l.b.describe();
  o.rank = l.a.dim(0);
  o.in = l.a.dim(1);
  o.out = l.b.dim(0);
  FT_CHECK(x.numel() % o.in == 0 && out_first >= 0 && out_first + out_features <= o.out)
      << what << " " << l.module << ": input " << x.describe() << " / output features [" << out_first << ", "
      << out_first + out_features << ") do not fit lora_A " << l.a.describe() << " and lora_B " << l.b.describe();
  o.b = l.b.view({out_features, o.rank}, out_first * o.rank, l.b.name());
  if (l.grad_b.defined()) o.grad_b = l.grad_b.view({out_features, o.rank}, out_first * o.rank, l.grad_b.name());
  o.out = out_features;
  o.rows = x.numel() / o.in;
  o.x = x.reshape({o.rows, o.in});
  o.drop = ctx.training && o.unit->dropout > 0.0f;
  const std::int64_t samples = std::max<std::int64_t>(1, o.unit->samples);
  FT_CHECK(o.rows % samples == 0) << what << " " << l.module << ": " << o.rows << " rows are not a whole number of "
                                  << samples << " samples";
  o.first_row = o.unit->first_sample * (o.rows / samples);
  return o;
}

// drop(x) into a new tensor (or x itself without dropout).
Tensor dropped_input(const StepContext& ctx, const Operands& o) {
  if (!o.drop) return o.x;
  Tensor xd = Tensor::empty(o.x.shape(), o.x.dtype(), o.x.device());
  ops::dropout(ctx.execution(), o.x, o.unit->dropout, o.unit->seed, o.linear->dropout_stream, o.first_row, xd);
  return xd;
}

}  // namespace

void add_forward(const StepContext& ctx, int slot, const Tensor& x, Tensor& y, std::int64_t out_first) {
  if (!adapted(ctx, slot)) return;
  const Operands o = operands(ctx, slot, x, y.dim(y.ndim() - 1), out_first, "lora::add_forward");
  ExecutionContext& ex = ctx.execution();
  const Tensor xd = dropped_input(ctx, o);
  Tensor t = Tensor::empty({o.rows, o.rank}, ctx.compute_dtype, o.x.device());
  ops::linear_forward(ex, xd, o.linear->a, nullptr, t);
  Tensor delta = Tensor::empty({o.rows, o.out}, y.dtype(), y.device());
  ops::linear_forward(ex, t, o.b, nullptr, delta);
  ops::scale_inplace(ex, delta, o.unit->scale);
  Tensor y2 = y.reshape({o.rows, o.out});
  ops::add_inplace(ex, y2, delta);
}

void add_backward(const StepContext& ctx, int slot, const Tensor& x, const Tensor& dy, Tensor* dx,
                  std::int64_t out_first) {
  if (!adapted(ctx, slot)) return;
  const Operands o = operands(ctx, slot, x, dy.dim(dy.ndim() - 1), out_first, "lora::add_backward");
  ExecutionContext& ex = ctx.execution();
  const AdaptedLinear& l = *o.linear;
  const Tensor dy2 = dy.reshape({o.rows, o.out});
  // Recompute drop(x) (same mask: a pure function of the RNG key) and
  // scale * drop(x) A^T rather than keeping them from forward.
  const Tensor xd = dropped_input(ctx, o);
  Tensor t = Tensor::empty({o.rows, o.rank}, ctx.compute_dtype, o.x.device());
  ops::linear_forward(ex, xd, l.a, nullptr, t);
  ops::scale_inplace(ex, t, o.unit->scale);
  // dB += dy^T (scale t);  dt = dy B
  Tensor dt = Tensor::empty({o.rows, o.rank}, ctx.compute_dtype, o.x.device());
  Tensor grad_b = o.grad_b;
  ops::linear_backward(ex, t, o.b, dy2, &dt, grad_b, nullptr);
  ops::scale_inplace(ex, dt, o.unit->scale);
  // dA += (scale dt)^T drop(x);  d drop(x) = (scale dt) A
  Tensor grad_a = l.grad_a;
  if (dx == nullptr) {
    ops::linear_backward(ex, xd, l.a, dt, nullptr, grad_a, nullptr);
    return;
  }
  Tensor dxd = Tensor::empty({o.rows, o.in}, dx->dtype(), dx->device());
  ops::linear_backward(ex, xd, l.a, dt, &dxd, grad_a, nullptr);
  if (o.drop) ops::dropout(ex, dxd, o.unit->dropout, o.unit->seed, l.dropout_stream, o.first_row, dxd);
  Tensor dx2 = dx->reshape({o.rows, o.in});
  ops::add_inplace(ex, dx2, dxd);
}

}  // namespace ftrain::lora
