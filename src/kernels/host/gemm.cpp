// Host GEMM providers (gemm.hpp): OpenBLAS for f32, oneDNN matmul for bf16.
//
// oneDNN primitives are created once per (shape, layout, beta) and kept for
// the life of the process: a training step repeats the same few shapes, and
// creating a matmul primitive costs far more than a small GEMM. Transposed
// operands are described by strides, so nothing is copied. The scratchpad is
// user-managed (one growing buffer per thread) so oneDNN never allocates in
// the step.
#include "kernels/host/gemm.hpp"

#include <cblas.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/error.hpp"
#include "kernels/blas_threads.hpp"

#if defined(FTRAIN_HAVE_ONEDNN)
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace ftrain::host::gemm {

namespace {

int blas_int(std::int64_t v) {
  FT_CHECK(v >= 0 && v <= 0x7fffffff) << "GEMM dimension " << v << " exceeds OpenBLAS's 32-bit int";
  return static_cast<int>(v);
}

CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::none ? CblasNoTrans : CblasTrans; }

// What FTRAIN_HOST_GEMM asks for: "auto" (default) or "openblas" (never oneDNN).
bool onednn_disabled_by_user() {
  const char* v = std::getenv("FTRAIN_HOST_GEMM");
  if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "auto") return false;
  if (std::string_view(v) == "openblas") return true;
  FT_THROW() << "FTRAIN_HOST_GEMM=" << v << " is not one of: auto, openblas";
}

#if defined(FTRAIN_HAVE_ONEDNN)

struct Key {
  Op op_a, op_b;
  std::int64_t m, n, k, lda, ldb, ldc;
  bool accumulate;
  bool bf16_out = false;  // C stored as bf16: oneDNN rounds the f32 accumulator once
  auto tie() const { return std::tie(op_a, op_b, m, n, k, lda, ldb, ldc, accumulate, bf16_out); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c, scratchpad;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc operand_desc(Op op, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                                dnnl::memory::data_type type) {
  // op(X) is [rows, cols]; X as stored is [rows, cols] (ld per row) or its transpose.
  const dnnl::memory::dims strides = op == Op::none ? dnnl::memory::dims{ld, 1} : dnnl::memory::dims{1, ld};
  return dnnl::memory::desc({rows, cols}, type, strides);
}

const Plan& plan_for(const Key& key) {
  static std::mutex mutex;
  static std::map<Key, Plan> plans;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  using dt = dnnl::memory::data_type;
  Plan p;
  p.a = operand_desc(key.op_a, key.m, key.k, key.lda, dt::bf16);
  p.b = operand_desc(key.op_b, key.k, key.n, key.ldb, dt::bf16);
  p.c = dnnl::memory::desc({key.m, key.n}, key.bf16_out ? dt::bf16 : dt::f32, dnnl::memory::dims{key.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops post;
    post.append_sum(1.0f);
    attr.set_post_ops(post);
  }
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p.a, p.b, p.c), attr, cpu_engine());
    p.scratchpad = pd.scratchpad_desc();
    p.primitive = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    FT_THROW() << "oneDNN refused the bf16 matmul [" << key.m << ", " << key.k << "] x [" << key.k << ", " << key.n
               << "] (A " << (key.op_a == Op::none ? "N" : "T") << ", B " << (key.op_b == Op::none ? "N" : "T")
               << "): " << e.what();
  }
  return plans.emplace(key, std::move(p)).first->second;
}

bool cpu_has_native_bf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  std::ostringstream s;
  s << v->major << '.' << v->minor << '.' << v->patch;
  return s.str();
}

#endif  // FTRAIN_HAVE_ONEDNN

std::atomic<std::uint64_t> bf16_call_count{0};
std::atomic<std::uint64_t> bf16_rounded_call_count{0};

enum class Bf16Route : std::uint8_t { onednn, no_onednn_in_build, cpu_lacks_bf16, user_chose_openblas, run_chose_widened };

// Why the run asked for the widened route (use_widened_bf16), or null.
std::atomic<const char*> widened_by_run{nullptr};

Bf16Route bf16_route() {
  if (widened_by_run.load(std::memory_order_acquire) != nullptr) return Bf16Route::run_chose_widened;
  static const Bf16Route route = [] {
    if (onednn_disabled_by_user()) return Bf16Route::user_chose_openblas;
#if defined(FTRAIN_HAVE_ONEDNN)
    return cpu_has_native_bf16() ? Bf16Route::onednn : Bf16Route::cpu_lacks_bf16;
#else
    return Bf16Route::no_onednn_in_build;
#endif
  }();
  return route;
}

}  // namespace

void f32(const Dims& d, const float* a, const float* b, float beta, float* c) {
  if (d.m == 0 || d.n == 0) return;
  cblas_sgemm(CblasRowMajor, cblas_op(d.op_a), cblas_op(d.op_b), blas_int(d.m), blas_int(d.n), blas_int(d.k), 1.0f,
              a, blas_int(d.lda), b, blas_int(d.ldb), beta, c, blas_int(d.ldc));
}

std::uint64_t bf16_calls() { return bf16_call_count.load(std::memory_order_relaxed); }
std::uint64_t bf16_rounded_calls() { return bf16_rounded_call_count.load(std::memory_order_relaxed); }

bool bf16_native() { return bf16_route() == Bf16Route::onednn; }

void use_widened_bf16(const char* why) {
  FT_CHECK(why != nullptr && *why != '\0') << "gemm::use_widened_bf16 needs the reason the run header gives";
  // Switching after a bf16 GEMM ran would mix two roundings in one run.
  FT_CHECK(bf16_calls() == 0) << "gemm::use_widened_bf16(\"" << why << "\") after " << bf16_calls()
                              << " bf16 GEMMs already ran on oneDNN: call it before the first one";
  widened_by_run.store(why, std::memory_order_release);
}

#if defined(FTRAIN_HAVE_ONEDNN)
namespace {

// One oneDNN matmul into C of the plan's dtype (k > 0, m, n > 0).
void execute(const Key& key, const ftrain::bf16* a, const ftrain::bf16* b, void* c) {
  const Plan& p = plan_for(key);
  thread_local std::vector<std::uint8_t> scratch;
  if (scratch.size() < p.scratchpad.get_size()) scratch.resize(p.scratchpad.get_size());
  dnnl::engine& engine = cpu_engine();
  thread_local dnnl::stream stream(engine);
  // oneDNN takes non-const handles; inputs are only read.
  dnnl::memory a_mem(p.a, engine, const_cast<ftrain::bf16*>(a));
  dnnl::memory b_mem(p.b, engine, const_cast<ftrain::bf16*>(b));
  dnnl::memory c_mem(p.c, engine, c);
  dnnl::memory s_mem(p.scratchpad, engine, scratch.data());
  p.primitive.execute(stream, {{DNNL_ARG_SRC, a_mem},
                               {DNNL_ARG_WEIGHTS, b_mem},
                               {DNNL_ARG_DST, c_mem},
                               {DNNL_ARG_SCRATCHPAD, s_mem}});
  stream.wait();
}

}  // namespace
#endif

void bf16(const Dims& d, const ftrain::bf16* a, const ftrain::bf16* b, float beta, float* c) {
  FT_CHECK(beta == 0.0f || beta == 1.0f) << "gemm::bf16: beta " << beta << " must be 0 or 1";
  FT_CHECK(bf16_native()) << "gemm::bf16 called where BF16 GEMMs are not native (" << describe() << ")";
#if defined(FTRAIN_HAVE_ONEDNN)
  bf16_call_count.fetch_add(1, std::memory_order_relaxed);
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    // oneDNN refuses empty reductions; the product is zero.
    if (beta == 0.0f)
      for (std::int64_t r = 0; r < d.m; ++r) std::fill(c + r * d.ldc, c + r * d.ldc + d.n, 0.0f);
    return;
  }
  execute(Key{d.op_a, d.op_b, d.m, d.n, d.k, d.lda, d.ldb, d.ldc, beta != 0.0f}, a, b, c);
#else
  (void)d, (void)a, (void)b, (void)c;
#endif
}

void bf16_rounded(const Dims& d, const ftrain::bf16* a, const ftrain::bf16* b, ftrain::bf16* c) {
  FT_CHECK(bf16_native()) << "gemm::bf16_rounded called where BF16 GEMMs are not native (" << describe() << ")";
#if defined(FTRAIN_HAVE_ONEDNN)
  bf16_call_count.fetch_add(1, std::memory_order_relaxed);
  bf16_rounded_call_count.fetch_add(1, std::memory_order_relaxed);
  if (d.m == 0 || d.n == 0) return;
  if (d.k == 0) {
    for (std::int64_t r = 0; r < d.m; ++r) std::fill(c + r * d.ldc, c + r * d.ldc + d.n, ftrain::bf16{0});
    return;
  }
  execute(Key{d.op_a, d.op_b, d.m, d.n, d.k, d.lda, d.ldb, d.ldc, false, true}, a, b, c);
#else
  (void)d, (void)a, (void)b, (void)c;
#endif
}

std::string describe() {
  std::string s = "f32 " + blas_kernel_description() + "; bf16 ";
  switch (bf16_route()) {
#if defined(FTRAIN_HAVE_ONEDNN)
    case Bf16Route::onednn: return s + "oneDNN " + onednn_version() + " matmul (native BF16, f32 accumulation)";
    case Bf16Route::cpu_lacks_bf16:
      return s + "widened to f32 on OpenBLAS (this CPU has no AVX512-BF16/AMX for oneDNN " + onednn_version() + ")";
#else
    case Bf16Route::onednn:
    case Bf16Route::cpu_lacks_bf16:
#endif
    case Bf16Route::no_onednn_in_build: return s + "widened to f32 on OpenBLAS (built without oneDNN)";
    case Bf16Route::user_chose_openblas: return s + "widened to f32 on OpenBLAS (FTRAIN_HOST_GEMM=openblas)";
    case Bf16Route::run_chose_widened:
      return s + "widened to f32 on OpenBLAS (" + widened_by_run.load(std::memory_order_acquire) + ")";
  }
  return s;
}

void set_threads(int threads) {
#if defined(FTRAIN_HAVE_ONEDNN)
  if (std::getenv("OMP_NUM_THREADS") == nullptr) omp_set_num_threads(threads > 0 ? threads : 1);
#else
  (void)threads;
#endif
}

}  // namespace ftrain::host::gemm
