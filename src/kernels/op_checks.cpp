#include "kernels/op_checks.hpp"

#include <initializer_list>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "kernels/math/adamw.hpp"
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

// ---- element-wise --------------------------------------------------------------

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_elementwise("add", {{&a, "a"}, {&b, "b"}, {&out, "out"}});
}

void add_inplace(Tensor& acc, const Tensor& x) {
  constexpr const char* op = "add_inplace";
  require_float(op, acc, "acc");
  require_float(op, x, "x");
  require_numel(op, x, "x", acc.numel(), "same as acc");
}

void scale_inplace(Tensor& x, float /*factor*/) { require_float("scale_inplace", x, "x"); }

void fill(Tensor& x, float /*value*/) {
  constexpr const char* op = "fill";
  checks::require_defined(op, x, "x");
  switch (x.dtype()) {
    case DType::f32:
    case DType::bf16:
    case DType::f16:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
    case DType::f64: return;  // f64: accumulators (the gradient norm)
    default: FT_THROW() << op << ": x " << x.describe() << " must have a float dtype";
  }
}

void cast(const Tensor& src, Tensor& dst) {
  constexpr const char* op = "cast";
  checks::require_defined(op, src, "src");
  checks::require_defined(op, dst, "dst");
  require_numel(op, dst, "dst", src.numel(), "same as src");
}

void sum(const Tensor& x, Tensor& out) {
  constexpr const char* op = "sum";
  require_float(op, x, "x");
  checks::require_defined(op, out, "out");
  FT_CHECK(out.dtype() == DType::f32 && out.numel() == 1) << op << ": out " << out.describe() << " must be f32[1]";
}

void sum_squares(const Tensor& x) { require_float("sum_squares", x, "x"); }

// ---- attention: q, out [B, T, Hq, D]; k, v [B, T, Hkv, D]; lse f32 [B, Hq, T] ----

namespace {

void check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse) {
  require_float(op, q, "q");
  require_float(op, k, "k");
  require_float(op, v, "v");
  FT_CHECK(q.ndim() == 4) << op << ": q " << q.describe() << " must be [B, T, Hq, D]";
  FT_CHECK(k.ndim() == 4) << op << ": k " << k.describe() << " must be [B, T, Hkv, D]";
  const std::int64_t batch = q.dim(0), seq = q.dim(1), q_heads = q.dim(2), kv_heads = k.dim(2);
  FT_CHECK(k.dim(0) == batch && k.dim(1) == seq && k.dim(3) == q.dim(3))
      << op << ": k " << k.describe() << " does not match q " << q.describe() << " in B, T or D";
  FT_CHECK(kv_heads > 0 && q_heads % kv_heads == 0)
      << op << ": query heads of q " << q.describe() << " must be a multiple of the kv heads of k " << k.describe();
  require_same_shape(op, k, "k", v, "v");
  checks::require_defined(op, lse, "lse");
  FT_CHECK(lse.dtype() == DType::f32 && lse.shape() == Shape({batch, q_heads, seq}))
      << op << ": lse " << lse.describe() << " must be f32[" << batch << ", " << q_heads << ", " << seq << "]";
}

// The packed window's document ids: i32 [B, T] on q's device. That they do
// not decrease along T is the host kernel's check (it reads them).
void check_documents(const char* op, const Tensor& q, const Tensor* documents) {
  if (documents == nullptr) return;
  checks::require_defined(op, *documents, "documents");
  FT_CHECK(documents->dtype() == DType::i32 && documents->shape() == Shape({q.dim(0), q.dim(1)}) &&
           documents->device() == q.device())
      << op << ": documents " << documents->describe() << " must be i32[" << q.dim(0) << ", " << q.dim(1)
      << "] on q's device (q " << q.describe() << ")";
}

// An output or gradient of `like`'s shape.
void check_like(const char* op, const Tensor& like, const char* like_role, const Tensor& t, const char* role) {
  require_float(op, t, role);
  require_same_shape(op, like, like_role, t, role);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool /*causal*/, const Tensor* documents,
                       float /*softmax_scale*/, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_forward";
  check_attention(op, q, k, v, lse);
  check_documents(op, q, documents);
  check_like(op, q, "q", out, "out");
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, bool /*causal*/, const Tensor* documents, float /*softmax_scale*/,
                        Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* op = "attention_backward";
  check_attention(op, q, k, v, lse);
  check_documents(op, q, documents);
  check_like(op, q, "q", out, "out");
  check_like(op, q, "q", dout, "dout");
  check_like(op, q, "q", dq, "dq");
  check_like(op, k, "k", dk, "dk");
  check_like(op, v, "v", dv, "dv");
}

// ---- ring attention's blocks: queries of one block against keys of another -------

namespace {

// q[B,Tq,Hq,D] against k, v[B,Tk,Hkv,D]; lse f32[B,Hq,Tq]; the per-token
// positions and (both or neither) document ids of each side.
void check_attention_block(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& q_positions, const Tensor& k_positions, const Tensor* q_documents,
                           const Tensor* k_documents, const Tensor& lse) {
  require_float(op, q, "q");
  require_float(op, k, "k");
  require_float(op, v, "v");
  FT_CHECK(q.ndim() == 4) << op << ": q " << q.describe() << " must be [B, Tq, Hq, D]";
  FT_CHECK(k.ndim() == 4) << op << ": k " << k.describe() << " must be [B, Tk, Hkv, D]";
  const std::int64_t batch = q.dim(0), q_len = q.dim(1), q_heads = q.dim(2), k_len = k.dim(1), kv_heads = k.dim(2);
  FT_CHECK(k.dim(0) == batch && k.dim(3) == q.dim(3))
      << op << ": k " << k.describe() << " does not match q " << q.describe() << " in B or D";
  FT_CHECK(kv_heads > 0 && q_heads % kv_heads == 0)
      << op << ": query heads of q " << q.describe() << " must be a multiple of the kv heads of k " << k.describe();
  require_same_shape(op, k, "k", v, "v");
  checks::require_defined(op, lse, "lse");
  FT_CHECK(lse.dtype() == DType::f32 && lse.shape() == Shape({batch, q_heads, q_len}))
      << op << ": lse " << lse.describe() << " must be f32[" << batch << ", " << q_heads << ", " << q_len << "]";
  auto ids = [&](const Tensor& t, const char* role, std::int64_t len) {
    checks::require_defined(op, t, role);
    FT_CHECK(t.dtype() == DType::i32 && t.shape() == Shape({batch, len}) && t.device() == q.device())
        << op << ": " << role << " " << t.describe() << " must be i32[" << batch << ", " << len
        << "] on q's device (q " << q.describe() << ")";
  };
  ids(q_positions, "q_positions", q_len);
  ids(k_positions, "k_positions", k_len);
  FT_CHECK((q_documents == nullptr) == (k_documents == nullptr))
      << op << ": document ids for " << (q_documents != nullptr ? "the queries" : "the keys")
      << " only; the document mask needs both sides' ids";
  if (q_documents != nullptr) {
    ids(*q_documents, "q_documents", q_len);
    ids(*k_documents, "k_documents", k_len);
  }
}

}  // namespace

void attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_positions,
                             const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                             bool /*causal*/, float /*softmax_scale*/, Tensor& out, Tensor& lse) {
  constexpr const char* op = "attention_block_forward";
  check_attention_block(op, q, k, v, q_positions, k_positions, q_documents, k_documents, lse);
  check_like(op, q, "q", out, "out");
}

void attention_block_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  constexpr const char* op = "attention_block_merge";
  checks::require_dtype(op, out, "out", DType::f32);
  FT_CHECK(out.ndim() == 4) << op << ": out " << out.describe() << " must be [B, T, H, D]";
  check_like(op, out, "out", block_out, "block_out");
  const Shape lse_shape{out.dim(0), out.dim(2), out.dim(1)};
  checks::require_dtype(op, lse, "lse", DType::f32);
  checks::require_dtype(op, block_lse, "block_lse", DType::f32);
  FT_CHECK(lse.shape() == lse_shape && block_lse.shape() == lse_shape)
      << op << ": lse " << lse.describe() << " and block_lse " << block_lse.describe() << " must be f32["
      << out.dim(0) << ", " << out.dim(2) << ", " << out.dim(1) << "] for out " << out.describe();
}

void attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& dout, const Tensor& q_positions,
                              const Tensor& k_positions, const Tensor* q_documents, const Tensor* k_documents,
                              bool /*causal*/, float /*softmax_scale*/, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* op = "attention_block_backward";
  check_attention_block(op, q, k, v, q_positions, k_positions, q_documents, k_documents, lse);
  check_like(op, q, "q", out, "out");
  check_like(op, q, "q", dout, "dout");
  check_like(op, q, "q", dq, "dq");
  check_like(op, k, "k", dk, "dk");
  check_like(op, v, "v", dv, "dv");
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

namespace {

// The slice [first_row, first_row + rows) must lie inside a vocabulary of `vocab` rows.
void check_vocab_slice(const char* op, const Tensor& table, const char* role, std::int64_t first_row,
                       std::int64_t vocab) {
  FT_CHECK(first_row >= 0 && first_row + table.dim(0) <= vocab)
      << op << ": " << role << " " << table.describe() << " as rows [" << first_row << ", " << first_row + table.dim(0)
      << ") does not fit a vocabulary of " << vocab << " rows";
}

}  // namespace

void embedding_forward_rows(const Tensor& tokens, const Tensor& table, std::int64_t first_row, std::int64_t vocab,
                            Tensor& out) {
  check_embedding("embedding_forward_rows", tokens, table, "table", out, "out");
  check_vocab_slice("embedding_forward_rows", table, "table", first_row, vocab);
}

void embedding_backward_rows(const Tensor& tokens, const Tensor& dout, std::int64_t first_row, Tensor& dtable) {
  if (!dtable.defined()) return;
  check_embedding("embedding_backward_rows", tokens, dtable, "dtable", dout, "dout");
  FT_CHECK(first_row >= 0) << "embedding_backward_rows: first_row " << first_row << " is negative";
}

// ---- rope: [B, T, H, D] with D even, inv_freq f32[D/2] ------------------------

namespace {

// positions: i32 [B, T] on in's device. That none is negative is the host
// kernel's check (it reads them).
void check_rope(const char* op, const Tensor& in, const char* in_role, const Tensor& inv_freq, const Tensor* positions,
                const Tensor& out, const char* out_role) {
  require_float(op, in, in_role);
  require_float(op, out, out_role);
  checks::require_dtype(op, inv_freq, "inv_freq", DType::f32);
  FT_CHECK(in.ndim() == 4) << op << ": " << in_role << " " << in.describe() << " must be [B, T, H, D]";
  require_same_shape(op, in, in_role, out, out_role);
  const std::int64_t head_dim = in.dim(3);
  FT_CHECK(head_dim % 2 == 0) << op << ": head dimension of " << in_role << " " << in.describe() << " must be even";
  require_numel(op, inv_freq, "inv_freq", head_dim / 2, "half the head dimension");
  if (positions == nullptr) return;
  checks::require_defined(op, *positions, "positions");
  FT_CHECK(positions->dtype() == DType::i32 && positions->shape() == Shape({in.dim(0), in.dim(1)}) &&
           positions->device() == in.device())
      << op << ": positions " << positions->describe() << " must be i32[" << in.dim(0) << ", " << in.dim(1) << "] on "
      << in_role << "'s device (" << in_role << " " << in.describe() << ")";
}

}  // namespace

void rope_forward(const Tensor& x, const Tensor& inv_freq, std::int64_t /*position_offset*/, const Tensor* positions,
                  Tensor& y) {
  check_rope("rope_forward", x, "x", inv_freq, positions, y, "y");
}

void rope_backward(const Tensor& dy, const Tensor& inv_freq, std::int64_t /*position_offset*/, const Tensor* positions,
                   Tensor& dx) {
  check_rope("rope_backward", dy, "dy", inv_freq, positions, dx, "dx");
}

// ---- dropout ----------------------------------------------------------------------

void dropout(const Tensor& x, float p, std::uint64_t /*seed*/, std::uint64_t /*stream*/, std::int64_t first_row,
             Tensor& y) {
  constexpr const char* op = "dropout";
  require_float(op, x, "x");
  require_float(op, y, "y");
  require_numel(op, y, "y", x.numel(), "same as x");
  FT_CHECK(p >= 0.0f && p < 1.0f) << op << ": p = " << p << " is outside [0, 1)";
  FT_CHECK(x.ndim() >= 1 && first_row >= 0) << op << ": x " << x.describe() << " first_row " << first_row;
}

// ---- token rows: [B, rows, C] activations and image patches ----------------------

namespace {

struct Rows3 {
  std::int64_t batch, rows, cols;
};

Rows3 rows_3d(const char* op, const Tensor& t, const char* role) {
  require_float(op, t, role);
  FT_CHECK(t.ndim() == 3) << op << ": " << role << " " << t.describe() << " must be [B, rows, C]";
  return {t.dim(0), t.dim(1), t.dim(2)};
}

void require_rows(const char* op, const Tensor& t, const char* role, const Rows3& got, const Rows3& want) {
  FT_CHECK(got.batch == want.batch && got.rows == want.rows && got.cols == want.cols)
      << op << ": " << role << " " << t.describe() << " must be [" << want.batch << ", " << want.rows << ", "
      << want.cols << "]";
}

void require_matrix(const char* op, const Tensor& t, const char* role, std::int64_t rows, std::int64_t cols) {
  require_float(op, t, role);
  FT_CHECK(t.ndim() == 2 && t.dim(0) == rows && t.dim(1) == cols)
      << op << ": " << role << " " << t.describe() << " must be [" << rows << ", " << cols << "]";
}

void check_patches(const char* op, const Tensor& images, const char* images_role, std::int64_t patch_size,
                   const Tensor& patches, const char* patches_role) {
  require_float(op, images, images_role);
  require_float(op, patches, patches_role);
  FT_CHECK(images.ndim() == 4) << op << ": " << images_role << " " << images.describe()
                               << " must be [B, H, W, C] (channels last)";
  FT_CHECK(patch_size > 0) << op << ": patch_size " << patch_size << " must be positive";
  const std::int64_t h = images.dim(1), w = images.dim(2), p = patch_size;
  FT_CHECK(h % p == 0 && w % p == 0) << op << ": " << images_role << " " << images.describe()
                                     << " is not a whole number of " << p << "x" << p << " patches";
  const math::PatchGeometry g = patch_geometry(images, patch_size);
  FT_CHECK(patches.ndim() == 2 && patches.dim(0) == g.rows() && patches.dim(1) == g.cols())
      << op << ": " << patches_role << " " << patches.describe() << " must be [" << g.rows() << ", " << g.cols()
      << "] (B * patches per image, C * P * P) for " << images_role << " " << images.describe();
}

void check_slice(const char* op, const Tensor& whole, const char* whole_role, std::int64_t first, const Tensor& part,
                 const char* part_role) {
  const Rows3 dw = rows_3d(op, whole, whole_role), dp = rows_3d(op, part, part_role);
  FT_CHECK(dp.batch == dw.batch && dp.cols == dw.cols && first >= 0 && first + dp.rows <= dw.rows)
      << op << ": " << part_role << " " << part.describe() << " is not rows " << first << " .. " << first + dp.rows
      << " of each batch item of " << whole_role << " " << whole.describe();
}

}  // namespace

math::PatchGeometry patch_geometry(const Tensor& images, std::int64_t patch_size) {
  const std::int64_t h = images.dim(1), w = images.dim(2), p = patch_size;
  return {images.dim(0), h, w, images.dim(3), p, h / p, w / p};
}

void patchify_forward(const Tensor& images, std::int64_t patch_size, Tensor& patches) {
  check_patches("patchify_forward", images, "images", patch_size, patches, "patches");
}

void prepend_rows_forward(const Tensor& prefix, const Tensor& x, Tensor& out) {
  constexpr const char* op = "prepend_rows_forward";
  const Rows3 dx = rows_3d(op, x, "x"), dout = rows_3d(op, out, "out");
  require_float(op, prefix, "prefix");
  FT_CHECK(prefix.ndim() == 2 && prefix.dim(1) == dx.cols)
      << op << ": prefix " << prefix.describe() << " must be [R, " << dx.cols << "] (the width of x " << x.describe()
      << ")";
  require_rows(op, out, "out", dout, {dx.batch, prefix.dim(0) + dx.rows, dx.cols});
}

void prepend_rows_backward(const Tensor& dout, Tensor& dprefix, Tensor& dx) {
  constexpr const char* op = "prepend_rows_backward";
  const Rows3 dd = rows_3d(op, dout, "dout"), dxd = rows_3d(op, dx, "dx");
  const std::int64_t R = dd.rows - dxd.rows, C = dd.cols;
  FT_CHECK(R >= 0) << op << ": dx " << dx.describe() << " has more rows than dout " << dout.describe();
  require_rows(op, dx, "dx", dxd, {dd.batch, dd.rows - R, C});
  require_matrix(op, dprefix, "dprefix", R, C);
}

void broadcast_add_forward(const Tensor& x, const Tensor& bias, Tensor& out) {
  constexpr const char* op = "broadcast_add_forward";
  const Rows3 dx = rows_3d(op, x, "x"), dout = rows_3d(op, out, "out");
  require_rows(op, out, "out", dout, dx);
  require_matrix(op, bias, "bias", dx.rows, dx.cols);
}

void broadcast_add_backward(const Tensor& dout, Tensor& dbias) {
  constexpr const char* op = "broadcast_add_backward";
  const Rows3 d = rows_3d(op, dout, "dout");
  require_matrix(op, dbias, "dbias", d.rows, d.cols);
}

void slice_rows_forward(const Tensor& x, std::int64_t first, Tensor& out) {
  check_slice("slice_rows_forward", x, "x", first, out, "out");
}

void slice_rows_backward(const Tensor& dout, std::int64_t first, Tensor& dx) {
  check_slice("slice_rows_backward", dx, "dx", first, dout, "dout");
}

// ---- gradient clipping and AdamW (device scalars are one-element tensors) -------

namespace {

void require_scalar(const char* op, const Tensor& t, const char* role, DType dtype) {
  checks::require_dtype(op, t, role, dtype);
  require_numel(op, t, role, 1, "one element");
}

// AdamW's f32 operands of one size, and a step that bias correction can use.
void check_adamw(const char* op, const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 std::int64_t step) {
  checks::require_dtype(op, param, "param", DType::f32);
  checks::require_dtype(op, grad, "grad", DType::f32);
  checks::require_dtype(op, m, "m", DType::f32);
  checks::require_dtype(op, v, "v", DType::f32);
  require_numel(op, grad, "grad", param.numel(), "same as param");
  require_numel(op, m, "m", param.numel(), "same as param");
  require_numel(op, v, "v", param.numel(), "same as param");
  FT_CHECK(step >= 1) << op << ": step " << step << " must be >= 1 (bias correction) for param "
                      << param.describe();
}

// The chunk table's dtype and shape; its rows are data, checked where they
// can be read (the host backend).
void check_chunk_table(const char* op, const Tensor& chunks) {
  checks::require_dtype(op, chunks, "chunks", DType::i64);
  FT_CHECK(chunks.ndim() == 2 && chunks.dim(1) == math::kAdamwChunkColumns)
      << op << ": chunks " << chunks.describe() << " must be [chunks, " << math::kAdamwChunkColumns
      << "] (offset, count, decay per row; kernels/adamw_chunks.hpp)";
}

}  // namespace

void sum_squares_accumulate(const Tensor& x, Tensor& acc) {
  constexpr const char* op = "sum_squares_accumulate";
  require_scalar(op, acc, "acc", DType::f64);
  require_float(op, x, "x");
}

void clip_coefficient(const Tensor& sum_sq, double /*max_norm*/, std::int64_t step, Tensor& norm, Tensor& scale,
                      Tensor& diverged_step) {
  constexpr const char* op = "clip_coefficient";
  require_scalar(op, sum_sq, "sum_sq", DType::f64);
  require_scalar(op, norm, "norm", DType::f64);
  require_scalar(op, scale, "scale", DType::f32);
  require_scalar(op, diverged_step, "diverged_step", DType::i64);
  FT_CHECK(step >= 1) << op << ": step " << step << " must be >= 1 (0 means \"not diverged\")";
}

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float /*lr*/, float /*beta1*/,
                  float /*beta2*/, float /*eps*/, float /*weight_decay*/, std::int64_t step, float /*grad_scale*/) {
  check_adamw("adamw_update", param, grad, m, v, step);
}

void adamw_update_chunks(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks,
                         float /*lr*/, float /*beta1*/, float /*beta2*/, float /*eps*/, float /*weight_decay*/,
                         std::int64_t step, float /*grad_scale*/) {
  constexpr const char* op = "adamw_update_chunks";
  check_adamw(op, param, grad, m, v, step);
  check_chunk_table(op, chunks);
}

void adamw_update_chunks_guarded(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const Tensor& chunks,
                                 float /*lr*/, float /*beta1*/, float /*beta2*/, float /*eps*/,
                                 float /*weight_decay*/, std::int64_t step, const Tensor& grad_scale,
                                 const Tensor& diverged_step) {
  constexpr const char* op = "adamw_update_chunks_guarded";
  require_scalar(op, grad_scale, "grad_scale", DType::f32);
  require_scalar(op, diverged_step, "diverged_step", DType::i64);
  check_adamw(op, param, grad, m, v, step);
  check_chunk_table(op, chunks);
}

// ---- cross entropy: h [N, C], w [V, C], targets i32 [N], per-row f32 results ----
// Whether each target is in [0, V) or the ignore index is a check of the
// targets' values, made by each backend where the values live (the host
// reads them; the CUDA backend checks them on the device without a wait).

namespace {

// The rows N of h; every tensor the forward and backward share.
std::int64_t check_head(const char* op, const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                        std::int64_t vocab_chunk) {
  require_float(op, h, "h");
  require_float(op, w, "w");
  FT_CHECK(h.ndim() == 2) << op << ": h " << h.describe() << " must be [N, C]";
  FT_CHECK(w.ndim() == 2 && w.dim(1) == h.dim(1))
      << op << ": w " << w.describe() << " must be [V, C] with the C of h " << h.describe();
  const std::int64_t rows = h.dim(0), vocab = w.dim(0);
  FT_CHECK(vocab > 0) << op << ": w " << w.describe() << " has an empty vocabulary";
  if (bias != nullptr) {
    require_float(op, *bias, "bias");
    FT_CHECK(bias->shape() == Shape({vocab})) << op << ": bias " << bias->describe() << " must be [" << vocab << "]";
  }
  FT_CHECK(targets.defined() && targets.dtype() == DType::i32 && targets.shape() == Shape({rows}))
      << op << ": targets " << targets.describe() << " must be i32[" << rows << "]";
  FT_CHECK(vocab_chunk > 0) << op << ": vocab_chunk must be positive, got " << vocab_chunk;
  return rows;
}

void check_f32_rows(const char* op, const Tensor& t, const char* role, std::int64_t rows) {
  FT_CHECK(t.defined() && t.dtype() == DType::f32 && t.shape() == Shape({rows}))
      << op << ": " << role << " " << t.describe() << " must be f32[" << rows << "]";
}

}  // namespace

void cross_entropy_forward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                           std::int64_t vocab_chunk, Tensor& losses, Tensor& lse) {
  constexpr const char* op = "cross_entropy_forward";
  const std::int64_t rows = check_head(op, h, w, bias, targets, vocab_chunk);
  check_f32_rows(op, losses, "losses", rows);
  check_f32_rows(op, lse, "lse", rows);
}

void cross_entropy_backward(const Tensor& h, const Tensor& w, const Tensor* bias, const Tensor& targets,
                            const Tensor& lse, const Tensor& loss_scale, std::int64_t vocab_chunk, Tensor& dh,
                            Tensor& dw, Tensor* dbias) {
  constexpr const char* op = "cross_entropy_backward";
  const std::int64_t rows = check_head(op, h, w, bias, targets, vocab_chunk);
  FT_CHECK(loss_scale.defined() && loss_scale.dtype() == DType::f32 && loss_scale.numel() == 1)
      << op << ": loss_scale " << loss_scale.describe() << " must be f32[1]";
  check_f32_rows(op, lse, "lse", rows);
  require_float(op, dh, "dh");
  require_same_shape(op, h, "h", dh, "dh");
  // Undefined dw / dbias: a frozen head (op_list.hpp); only dh is computed.
  if (dw.defined()) {
    require_float(op, dw, "dw");
    require_same_shape(op, w, "w", dw, "dw");
  }
  if (dbias != nullptr && dbias->defined()) {
    require_float(op, *dbias, "dbias");
    FT_CHECK(dbias->shape() == Shape({w.dim(0)}))
        << op << ": dbias " << dbias->describe() << " must be [" << w.dim(0) << "]";
  }
}

void cross_entropy_slice_forward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                 std::int64_t vocab, std::int64_t vocab_chunk, Tensor& local_lse, Tensor& target_logit) {
  constexpr const char* op = "cross_entropy_slice_forward";
  const std::int64_t rows = check_head(op, h, w, nullptr, targets, vocab_chunk);
  check_vocab_slice(op, w, "w", first_row, vocab);
  check_f32_rows(op, local_lse, "local_lse", rows);
  check_f32_rows(op, target_logit, "target_logit", rows);
}

void cross_entropy_slice_sum_exp(const Tensor& local_lse, const Tensor& row_max, Tensor& sum_exp) {
  constexpr const char* op = "cross_entropy_slice_sum_exp";
  FT_CHECK(local_lse.defined() && local_lse.ndim() == 1) << op << ": local_lse " << local_lse.describe()
                                                         << " must be f32[N]";
  const std::int64_t rows = local_lse.dim(0);
  check_f32_rows(op, local_lse, "local_lse", rows);
  check_f32_rows(op, row_max, "row_max", rows);
  check_f32_rows(op, sum_exp, "sum_exp", rows);
}

void cross_entropy_slice_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                              const Tensor& targets, Tensor& losses, Tensor& lse) {
  constexpr const char* op = "cross_entropy_slice_loss";
  FT_CHECK(row_max.defined() && row_max.ndim() == 1) << op << ": row_max " << row_max.describe() << " must be f32[N]";
  const std::int64_t rows = row_max.dim(0);
  check_f32_rows(op, row_max, "row_max", rows);
  check_f32_rows(op, sum_exp, "sum_exp", rows);
  check_f32_rows(op, target_logit, "target_logit", rows);
  FT_CHECK(targets.defined() && targets.dtype() == DType::i32 && targets.shape() == Shape({rows}))
      << op << ": targets " << targets.describe() << " must be i32[" << rows << "]";
  check_f32_rows(op, losses, "losses", rows);
  check_f32_rows(op, lse, "lse", rows);
}

void cross_entropy_slice_backward(const Tensor& h, const Tensor& w, const Tensor& targets, std::int64_t first_row,
                                  std::int64_t vocab, const Tensor& lse, const Tensor& loss_scale,
                                  std::int64_t vocab_chunk, Tensor& dh, Tensor& dw) {
  constexpr const char* op = "cross_entropy_slice_backward";
  cross_entropy_backward(h, w, nullptr, targets, lse, loss_scale, vocab_chunk, dh, dw, nullptr);
  check_vocab_slice(op, w, "w", first_row, vocab);
}

// ---- FP8: descriptors (kernels/fp8_tensor.hpp) and the delayed-scaling state ----

namespace {

bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

void require_fp8_data(const char* op, const Tensor& t, const std::string& role) {
  checks::require_defined(op, t, role.c_str());
  FT_CHECK(is_fp8(t.dtype())) << op << ": " << role << " " << t.describe() << " must be fp8_e4m3 or fp8_e5m2";
}

void require_f32_scalar(const char* op, const Tensor& t, const std::string& role) {
  checks::require_dtype(op, t, role.c_str(), DType::f32);
  FT_CHECK(t.numel() == 1) << op << ": " << role << " " << t.describe() << " must be f32[1]";
}

// What every cast writes: fp8 data of `like`'s shape, f32[1] scale and
// scale_inv, an optional f32[1] amax slot.
void check_cast_target(const char* op, const Fp8Tensor& t, const std::string& role, const Tensor& like,
                       const char* like_role) {
  require_fp8_data(op, t.data, role + ".data");
  require_same_shape(op, like, like_role, t.data, (role + ".data").c_str());
  require_f32_scalar(op, t.scale, role + ".scale");
  require_f32_scalar(op, t.scale_inv, role + ".scale_inv");
  if (t.amax.defined()) require_f32_scalar(op, t.amax, role + ".amax");
}

// A fused producer's cast: as a cast's, with no transposed copy.
void check_fused_cast(const char* op, const Fp8Tensor& t, const std::string& role, const Tensor& like,
                      const char* like_role) {
  check_cast_target(op, t, role, like, like_role);
  FT_CHECK(!t.data_t.defined()) << op << ": " << role << ".data_t " << t.data_t.describe()
                                << " is defined, but the fused forward writes no transposed copy (cast_to_fp8 does)";
}

// The parts of a descriptor every FP8 GEMM reads: fp8 data and its
// dequantisation factor scale_inv.
void require_fp8_operand(const char* op, const Fp8Tensor& t, const std::string& role) {
  require_fp8_data(op, t.data, role + ".data");
  require_f32_scalar(op, t.scale_inv, role + ".scale_inv");
}

// x.data [..., in], w.data [out, in], and an activation [rows, out] with the rows of x.
LinearDims check_fp8_linear(const char* op, const Fp8Tensor& x, const Fp8Tensor& w, const Tensor& y_like,
                            const char* y_role) {
  require_fp8_operand(op, x, "x");
  require_fp8_operand(op, w, "w");
  FT_CHECK(w.data.ndim() == 2) << op << ": w.data " << w.data.describe() << " must be [out, in]";
  const std::int64_t in = w.data.dim(1), out = w.data.dim(0);
  FT_CHECK(x.data.ndim() >= 1 && x.data.dim(-1) == in)
      << op << ": x.data " << x.data.describe() << " must be [..., " << in << "] to match w.data "
      << w.data.describe();
  const LinearDims d = linear_dims(x.data, w.data);
  FT_CHECK(y_like.ndim() >= 1 && y_like.dim(-1) == out && y_like.numel() == d.rows * out)
      << op << ": " << y_role << " " << y_like.describe() << " must be [" << d.rows << " rows, " << out << "]";
  return d;
}

}  // namespace

void cast_to_fp8(const Tensor& x, Fp8Tensor& out) {
  constexpr const char* op = "cast_to_fp8";
  require_float(op, x, "x");
  check_cast_target(op, out, "out", x, "x");
  if (out.data_t.defined()) {
    FT_CHECK(out.data_t.dtype() == out.data.dtype() && out.data_t.numel() == out.data.numel() &&
             out.data_t.ndim() == 2 && out.data.ndim() >= 1 && out.data_t.dim(0) == out.data.dim(-1))
        << op << ": out.data_t " << out.data_t.describe() << " must be the transposed copy [cols, rows] of out.data "
        << out.data.describe() << " in its dtype";
  }
}

void fp8_transpose(const Tensor& data, Tensor& data_t) {
  constexpr const char* op = "fp8_transpose";
  checks::require_defined(op, data, "data");
  checks::require_defined(op, data_t, "data_t");
  FT_CHECK(is_fp8(data.dtype()) && data_t.dtype() == data.dtype() && data.ndim() >= 1 && data_t.ndim() == 2 &&
           data_t.numel() == data.numel() && data_t.dim(0) == data.dim(-1))
      << op << ": data_t " << data_t.describe() << " must be the transposed copy [cols, rows] of the fp8 codes "
      << data.describe() << " in their dtype";
}

void rmsnorm_forward_fp8(const Tensor& x, const Tensor& w, float /*eps*/, Tensor& y, Tensor& rstd, Fp8Casts& casts) {
  constexpr const char* op = "rmsnorm_forward_fp8";
  check_norm(op, x, w, {{&rstd, "rstd"}});
  check_activation_like_x(op, x, y, "y");
  FT_CHECK(casts.count >= 1 && casts.count <= Fp8Casts::kMax)
      << op << ": " << casts.count << " casts (1 to " << Fp8Casts::kMax << ")";
  for (int c = 0; c < casts.count; ++c)
    check_fused_cast(op, casts.out[c], "casts.out[" + std::to_string(c) + "]", y, "y");
}

void swiglu_forward_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Tensor& cast) {
  constexpr const char* op = "swiglu_forward_fp8";
  check_elementwise(op, {{&gate, "gate"}, {&up, "up"}, {&out, "out"}});
  check_fused_cast(op, cast, "cast", out, "out");
}

void fp8_linear_forward(const Fp8Tensor& x, const Fp8Tensor& w, const Tensor* b, Tensor& y) {
  constexpr const char* op = "fp8_linear_forward";
  require_float(op, y, "y");
  const LinearDims d = check_fp8_linear(op, x, w, y, "y");
  if (b != nullptr) {
    require_float(op, *b, "b");
    require_numel(op, *b, "b", d.out, "one per output feature of w");
  }
}

void fp8_linear_backward(const Fp8Tensor& x, const Fp8Tensor& w, const Fp8Tensor& dy, const Tensor& dy_source,
                         Tensor* dx, Tensor& dw, Tensor* db) {
  constexpr const char* op = "fp8_linear_backward";
  require_fp8_operand(op, dy, "dy");
  const LinearDims d = check_fp8_linear(op, x, w, dy.data, "dy.data");
  checks::require_dtype(op, dw, "dw", DType::f32);
  require_same_shape(op, w.data, "w.data", dw, "dw");
  if (dx != nullptr) {
    require_float(op, *dx, "dx");
    require_same_shape(op, x.data, "x.data", *dx, "dx");
  }
  if (db != nullptr) {
    require_float(op, dy_source, "dy_source");
    require_same_shape(op, dy.data, "dy.data", dy_source, "dy_source");
    checks::require_dtype(op, *db, "db", DType::f32);
    require_numel(op, *db, "db", d.out, "one per output feature of w");
  }
}

void fp8_update_scales(Tensor& amax_history, Tensor& scale, Tensor& scale_inv, DType forward_format,
                       DType backward_format, std::int64_t margin, Fp8AmaxAlgo /*algo*/) {
  constexpr const char* op = "fp8_update_scales";
  checks::require_dtype(op, amax_history, "amax_history", DType::f32);
  FT_CHECK(amax_history.ndim() == 2 && amax_history.dim(1) == kFp8NumOperands && amax_history.dim(0) >= 1)
      << op << ": amax_history " << amax_history.describe() << " must be [L >= 1, " << kFp8NumOperands << "]";
  checks::require_dtype(op, scale, "scale", DType::f32);
  require_numel(op, scale, "scale", kFp8NumOperands, "one per FP8 operand: input, weight, grad_output");
  checks::require_dtype(op, scale_inv, "scale_inv", DType::f32);
  require_numel(op, scale_inv, "scale_inv", kFp8NumOperands, "one per FP8 operand: input, weight, grad_output");
  FT_CHECK(is_fp8(forward_format) && is_fp8(backward_format))
      << op << ": formats " << dtype_name(forward_format) << ", " << dtype_name(backward_format)
      << " must be fp8_e4m3 or fp8_e5m2";
  FT_CHECK(margin >= 0 && margin <= 64) << op << ": margin " << margin << " must be in [0, 64]";
}

}  // namespace ftrain::op_checks
