#include "kernels/op_checks.hpp"

#include <initializer_list>
#include <utility>

#include "core/error.hpp"
#include "kernels/tensor_checks.hpp"

namespace ftrain::op_checks {

using checks::require_float;
using checks::require_numel;
using checks::require_same_shape;

namespace {

// x[..., in], w[out, in] and an activation of width out with the rows of x.
// An x of width 0 has no rows (never a division by zero).
LinearDims check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& y_like, const char* y_role) {
  require_float(op, x, "x");
  require_float(op, w, "w");
  require_float(op, y_like, y_role);
  FT_CHECK(w.ndim() == 2) << op << ": w " << w.describe() << " must be [out, in]";
  const std::int64_t in = w.dim(1), out = w.dim(0);
  FT_CHECK(x.ndim() >= 1 && x.dim(-1) == in)
      << op << ": x " << x.describe() << " must be [..., " << in << "] to match w " << w.describe();
  FT_CHECK(y_like.ndim() >= 1 && y_like.dim(-1) == out)
      << op << ": " << y_role << " " << y_like.describe() << " must be [..., " << out << "] to match w "
      << w.describe();
  const LinearDims d = linear_dims(x, w);
  FT_CHECK(y_like.numel() == d.rows * out) << op << ": " << y_role << " " << y_like.describe() << " must have "
                                           << d.rows << " rows like x " << x.describe();
  return d;
}

}  // namespace

LinearDims linear_dims(const Tensor& x, const Tensor& w) {
  const std::int64_t in = w.dim(1), out = w.dim(0);
  return {in > 0 ? x.numel() / in : 0, in, out};
}

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "linear_forward";
  const LinearDims d = check_linear(op, x, w, y, "y");
  if (b != nullptr) {
    require_float(op, *b, "b");
    require_numel(op, *b, "b", d.out, "one per output feature of w");
  }
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "linear_backward";
  const LinearDims d = check_linear(op, x, w, dy, "dy");
  // Undefined dw / db: a frozen weight (op_list.hpp); only dx is computed.
  if (dw.defined()) {
    require_float(op, dw, "dw");
    require_same_shape(op, w, "w", dw, "dw");
  }
  if (dx != nullptr) {
    require_float(op, *dx, "dx");
    require_same_shape(op, x, "x", *dx, "dx");
  }
  if (db != nullptr && db->defined()) {
    require_float(op, *db, "db");
    require_numel(op, *db, "db", d.out, "one per output feature of w");
  }
}

// ---- norms: x[..., C], w[C], per-row f32 statistics ----------------------------

namespace {

// The row width C; `stats` are the f32 per-row statistics the op saves or reads.
std::int64_t check_norm(const char* op, const Tensor& x, const Tensor& w,
                        std::initializer_list<std::pair<const Tensor*, const char*>> stats) {
  require_float(op, x, "x");
  require_float(op, w, "w");
  for (const auto& [stat, role] : stats) checks::require_dtype(op, *stat, role, DType::f32);
  const std::int64_t width = checks::row_width(op, x, "x");
  require_numel(op, w, "w", width, "one weight per feature of x");
  for (const auto& [stat, role] : stats) require_numel(op, *stat, role, x.numel() / width, "one per row of x");
  return width;
}

void check_activation_like_x(const char* op, const Tensor& x, const Tensor& t, const char* role) {
  require_float(op, t, role);
  require_same_shape(op, x, "x", t, role);
}

// A parameter gradient of C elements; undefined: the parameter is frozen (op_list.hpp).
void check_optional_feature_grad(const char* op, const Tensor* g, const char* role, std::int64_t width) {
  if (g == nullptr || !g->defined()) return;
  require_float(op, *g, role);
  require_numel(op, *g, role, width, "one per feature of x");
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& w, float /*eps*/, Tensor& y, Tensor& rstd) {
  constexpr const char* op = "rmsnorm_forward";
  check_norm(op, x, w, {{&rstd, "rstd"}});
  check_activation_like_x(op, x, y, "y");
}

void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,
                      Tensor& dw) {
  constexpr const char* op = "rmsnorm_backward";
  const std::int64_t width = check_norm(op, x, w, {{&rstd, "rstd"}});
  require_float(op, dy, "dy");
  require_float(op, dx, "dx");
  require_same_shape(op, x, "x", dy, "dy");
  require_same_shape(op, x, "x", dx, "dx");
  check_optional_feature_grad(op, &dw, "dw", width);
}

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor* b, float /*eps*/, Tensor& y, Tensor& mean,
                       Tensor& rstd) {
  constexpr const char* op = "layernorm_forward";
  const std::int64_t width = check_norm(op, x, w, {{&mean, "mean"}, {&rstd, "rstd"}});
  check_activation_like_x(op, x, y, "y");
  if (b != nullptr) {
    require_float(op, *b, "b");
    require_numel(op, *b, "b", width, "one bias per feature of x");
  }
}

void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,
                        Tensor& dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "layernorm_backward";
  const std::int64_t width = check_norm(op, x, w, {{&mean, "mean"}, {&rstd, "rstd"}});
  require_float(op, dy, "dy");
  require_float(op, dx, "dx");
  require_same_shape(op, x, "x", dy, "dy");
  require_same_shape(op, x, "x", dx, "dx");
  check_optional_feature_grad(op, &dw, "dw", width);
  check_optional_feature_grad(op, db, "db", width);
}

// ---- activations: every tensor of the op has one shape ---------------------------

namespace {

void check_elementwise(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> tensors) {
  for (const auto& [t, role] : tensors) require_float(op, *t, role);
  const auto& [first, first_role] = *tensors.begin();
  for (const auto& [t, role] : tensors)
    if (t != first) require_same_shape(op, *first, first_role, *t, role);
}

void check_gelu_form(const char* op, GeluApproximation approximation) {
  FT_CHECK(approximation == GeluApproximation::none || approximation == GeluApproximation::tanh)
      << op << ": unknown approximation " << static_cast<int>(approximation);
}

}  // namespace

void swiglu_forward(const Tensor& gate, const Tensor& up, Tensor& out) {
  check_elementwise("swiglu_forward", {{&gate, "gate"}, {&up, "up"}, {&out, "out"}});
}

void swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  check_elementwise("swiglu_backward",
                    {{&gate, "gate"}, {&up, "up"}, {&dout, "dout"}, {&dgate, "dgate"}, {&dup, "dup"}});
}

void gelu_forward(const Tensor& x, GeluApproximation approximation, Tensor& y) {
  check_elementwise("gelu_forward", {{&x, "x"}, {&y, "y"}});
  check_gelu_form("gelu_forward", approximation);
}

void gelu_backward(const Tensor& x, const Tensor& dy, GeluApproximation approximation, Tensor& dx) {
  check_elementwise("gelu_backward", {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  check_gelu_form("gelu_backward", approximation);
}

// ---- embedding: i32 tokens, a [V, C] table, one row of width C per token -------

namespace {

void check_embedding(const char* op, const Tensor& tokens, const Tensor& table, const char* table_role,
                     const Tensor& rows, const char* rows_role) {
  checks::require_dtype(op, tokens, "tokens", DType::i32);
  require_float(op, table, table_role);
  require_float(op, rows, rows_role);
  FT_CHECK(table.ndim() == 2) << op << ": " << table_role << " " << table.describe() << " must be [V, C]";
  const std::int64_t width = table.dim(1);
  FT_CHECK(rows.ndim() >= 1 && rows.dim(-1) == width && rows.numel() == tokens.numel() * width)
      << op << ": " << rows_role << " " << rows.describe() << " must hold one row of width " << width
      << " per token of tokens " << tokens.describe();
}

}  // namespace

void embedding_forward(const Tensor& tokens, const Tensor& table, Tensor& out) {
  check_embedding("embedding_forward", tokens, table, "table", out, "out");
}

void embedding_backward(const Tensor& tokens, const Tensor& dout, Tensor& dtable) {
  if (!dtable.defined()) return;  // a frozen table (op_list.hpp): the op does nothing
  check_embedding("embedding_backward", tokens, dtable, "dtable", dout, "dout");
}

}  // namespace ftrain::op_checks
