#include "kernels/cuda/cudnn_sdpa_graph.hpp"

#include <cudnn.h>

#include <functional>
#include <string>

#include "base/error.hpp"

namespace ftrain::cuda {

namespace {

// A failed cuDNN call throws naming the call and cuDNN's reason
// (cudnnGetLastErrorString says which dimension or attribute it refused).
#define FTRAIN_CUDNN_CHECK(call)                                                                        \
  do {                                                                                                  \
    const cudnnStatus_t ftrain_cudnn_status_ = (call);                                                  \
    if (ftrain_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                                 \
      char ftrain_cudnn_reason_[2048] = {};                                                             \
      cudnnGetLastErrorString(ftrain_cudnn_reason_, sizeof ftrain_cudnn_reason_);                       \
      FT_THROW() << "cuDNN call " #call " failed: " << cudnnGetErrorString(ftrain_cudnn_status_) << ": " \
                 << ftrain_cudnn_reason_;                                                               \
    }                                                                                                   \
  } while (0)
#define CK(x) FTRAIN_CUDNN_CHECK(x)

using Desc = cudnnBackendDescriptor_t;
Desc make(CudnnDescriptors& owner, cudnnBackendDescriptorType_t t) {
  Desc d = nullptr;
  CK(cudnnBackendCreateDescriptor(t, &d));
  owner.add(d);
  return d;
}

Desc tensor(CudnnDescriptors& o, int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims, std::vector<int64_t> strides, bool virt, bool by_value = false, Desc ragged_offsets = nullptr) {
  Desc d = make(o, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t align = 16;
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data()));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data()));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt));
  if (by_value) CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value));
  if (ragged_offsets)
    CK(cudnnBackendSetAttribute(d, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged_offsets));
  CK(cudnnBackendFinalize(d));
  return d;
}

// m, n, k: the per-sequence sizes of a ragged batch (document mask), which
// overrides the dims' rows (m), columns (n) or contraction (k); null = none.
Desc matmul(CudnnDescriptors& o, Desc a, Desc b, Desc c, Desc m_override = nullptr, Desc n_override = nullptr,
            Desc k_override = nullptr) {
  Desc m = make(o, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  CK(cudnnBackendSetAttribute(m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
  CK(cudnnBackendFinalize(m));
  Desc op = make(o, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m));
  if (m_override) CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_override));
  if (n_override) CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_override));
  if (k_override) CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_override));
  CK(cudnnBackendFinalize(op));
  return op;
}

// `precision`: the pointwise math type (float unless given).
Desc pointwise(CudnnDescriptors& o, cudnnPointwiseMode_t mode, Desc x, Desc b, Desc y, Desc t = nullptr, int64_t axis = -1,
               cudnnDataType_t precision = CUDNN_DATA_FLOAT) {
  Desc p = make(o, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t f = precision;
  CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
  CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f));
  if (axis >= 0) CK(cudnnBackendSetAttribute(p, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis));
  CK(cudnnBackendFinalize(p));
  Desc op = make(o, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  if (b) CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
  if (t) CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CK(cudnnBackendFinalize(op));
  return op;
}

Desc reduction(CudnnDescriptors& o, cudnnReduceTensorOp_t mode, Desc x, Desc y) {
  Desc r = make(o, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  CK(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode));
  CK(cudnnBackendSetAttribute(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f));
  CK(cudnnBackendFinalize(r));
  Desc op = make(o, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r));
  CK(cudnnBackendFinalize(op));
  return op;
}

Desc reshape(CudnnDescriptors& o, Desc x, Desc y) {
  Desc op = make(o, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
  CK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
  CK(cudnnBackendFinalize(op));
  return op;
}

// The graph's non-virtual tensors from the table the variant pack is bound
// from (cudnn_sdpa_plan.hpp), indexed by operand.
struct IoTensors {
  std::vector<SdpaTensor> table;
  Desc by_operand[32] = {};
  Desc operator[](SdpaOperand operand) const {
    Desc d = by_operand[static_cast<int>(operand)];
    FT_CHECK(d != nullptr) << "SDPA graph: the tensor table has no " << sdpa_operand_name(operand);
    return d;
  }
  Desc by_uid(int64_t uid) const {
    for (const SdpaTensor& t : table)
      if (t.uid == uid) return by_operand[static_cast<int>(t.operand)];
    return nullptr;
  }
};

cudnnDataType_t data_type(SdpaElement e) {
  switch (e) {
    case SdpaElement::bf16: return CUDNN_DATA_BFLOAT16;
    case SdpaElement::f32: return CUDNN_DATA_FLOAT;
    case SdpaElement::i32: return CUDNN_DATA_INT32;
  }
  return CUDNN_DATA_FLOAT;
}

// The ragged offsets (i32, referenced by other tensors) are created first.
IoTensors io_tensors(CudnnDescriptors& o, const SdpaShape& shape, SdpaDirection direction) {
  IoTensors io;
  io.table = sdpa_io_tensors(shape, direction);
  for (bool offsets_pass : {true, false})
    for (const SdpaTensor& t : io.table) {
      if ((t.element == SdpaElement::i32) != offsets_pass) continue;
      Desc ragged = nullptr;
      if (t.ragged_offset_uid != 0) {
        ragged = io.by_uid(t.ragged_offset_uid);
        FT_CHECK(ragged != nullptr) << "SDPA graph: " << sdpa_operand_name(t.operand) << " names ragged offsets uid "
                                    << t.ragged_offset_uid << ", which the tensor table lacks";
      }
      io.by_operand[static_cast<int>(t.operand)] =
          tensor(o, t.uid, data_type(t.element), {t.dims.begin(), t.dims.end()}, {t.strides.begin(), t.strides.end()},
                 false, t.by_value, ragged);
    }
  return io;
}

// The graph's batch and sequence dims: the window's, or under the document
// mask the ragged batch's (cudnn_sdpa_plan.hpp).
int64_t graph_batch(const SdpaShape& s) { return s.ragged() ? s.ragged_sequences : s.batch; }
int64_t graph_seq(const SdpaShape& s) { return s.ragged() ? s.ragged_length : s.seq; }

// Rows at or past their sequence's length (queries) or columns past it
// (keys) are masked, cudnn-frontend's padding mask (with its math types:
// i32 indices, boolean comparisons): each sequence of the ragged batch sees
// only itself. Both graphs apply it where cudnn-frontend does: to the
// scaled scores, before the statistics and the causal mask.
Desc padding_mask(CudnnDescriptors& o, std::vector<Desc>& ops, const IoTensors& io, Desc scores,
                  const std::function<Desc(cudnnDataType_t)>& virt) {
  using O = SdpaOperand;
  const cudnnDataType_t i32 = CUDNN_DATA_INT32, bo = CUDNN_DATA_BOOLEAN;
  Desc row = virt(i32), col = virt(i32), row_in = virt(bo);
  Desc col_in = virt(bo), keep = virt(bo), masked = virt(CUDNN_DATA_FLOAT);
  ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, row, nullptr, 2, i32));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, col, nullptr, 3, i32));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_CMP_LT, row, io[O::seq_len_q], row_in, nullptr, -1, bo));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_CMP_LT, col, io[O::seq_len_kv], col_in, nullptr, -1, bo));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_LOGICAL_AND, row_in, col_in, keep, nullptr, -1, bo));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_BINARY_SELECT, scores, io[O::neg_inf], masked, keep));
  return masked;
}

Desc finalize_graph(CudnnDescriptors& o, std::vector<Desc>& ops, void* handle) {
  Desc graph = make(o, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (handle != nullptr) {
    cudnnHandle_t h = static_cast<cudnnHandle_t>(handle);
    CK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h));
  }
  CK(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                              static_cast<int64_t>(ops.size()), ops.data()));
  CK(cudnnBackendFinalize(graph));
  return graph;
}

// H100 SXM (cuDNN 9.19 names the first one missing).
constexpr const char* kH100Json =
    "{\"maxGridSize\":[2147483647,65535,65535],\"maxBlockSize\":[1024,1024,64],\"regsPerBlock\":65536,"
    "\"multiProcessorCount\":132,\"warpSize\":32,\"maxSharedMemoryPerBlock\":49152,"
    "\"maxSharedMemoryPerBlockOptin\":232448,\"reservedSharedMemoryPerBlock\":1024,\"maxRegistersPerSM\":65536,"
    "\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,\"pciDeviceId\":9008,"
    "\"isTccDriver\":0,\"supportCoopLaunch\":1,\"smClockRateKHz\":1980000,\"memClockRateKHz\":2619000,"
    "\"l2CacheSize\":52428800,\"deviceName\":\"NVIDIA H100 80GB HBM3\",\"cudaDeviceId\":0,\"deviceVer\":900,"
    "\"driverVer\":13000,\"totalGlobalMem\":85017755648}";

}  // namespace

CudnnDescriptors::~CudnnDescriptors() {
  for (auto it = owned_.rbegin(); it != owned_.rend(); ++it) cudnnBackendDestroyDescriptor(static_cast<Desc>(*it));
}

void* CudnnDescriptors::add(void* descriptor) {
  owned_.push_back(descriptor);
  return descriptor;
}

CudnnDescriptors build_sdpa_forward_graph(const SdpaShape& shape, void* handle) {
  FT_CHECK(shape.batch > 0 && shape.q_heads > 0 && shape.kv_heads > 0 && shape.seq > 0 && shape.head_dim > 0)
      << "SDPA graph: every dimension must be positive";
  CudnnDescriptors o;
  const int64_t b = graph_batch(shape), h = shape.q_heads, s = graph_seq(shape);
  const bool ragged = shape.ragged();
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, fl = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bo = CUDNN_DATA_BOOLEAN;
  // Q, K (as K^T, by strides), V, O in BSHD memory; stats f32 [B, H, T, 1]; scale (and -inf) by value.
  const IoTensors io = io_tensors(o, shape, SdpaDirection::forward);
  using O = SdpaOperand;
  Desc q = io[O::q], kt = io[O::k], v = io[O::v], out = io[O::out], stats = io[O::stats], scale = io[O::scale];
  // Under the document mask the matmuls run each sequence at its own length.
  Desc len_q = ragged ? io[O::seq_len_q] : nullptr, len_kv = ragged ? io[O::seq_len_kv] : nullptr;
  const std::vector<int64_t> ss = {b, h, s, s}, ss_st = {h * s * s, s * s, s, 1}, r = {b, h, s, 1}, r_st = {h * s, s, 1, 1};
  int64_t id = 100;
  auto virt = [&](cudnnDataType_t t, const std::vector<int64_t>& dims, const std::vector<int64_t>& st) {
    return tensor(o, id++, t, dims, st, true);
  };
  std::vector<Desc> ops;
  Desc scores = virt(fl, ss, ss_st), scaled = virt(fl, ss, ss_st);
  ops.push_back(matmul(o, q, kt, scores, len_q, len_kv));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, scores, scale, scaled));
  Desc masked = scaled;
  if (ragged) masked = padding_mask(o, ops, io, scaled, [&](cudnnDataType_t t) { return virt(t, ss, ss_st); });
  if (shape.causal) {
    Desc row = virt(i32, ss, ss_st), col = virt(i32, ss, ss_st), keep = virt(bo, ss, ss_st);
    Desc unmasked = masked;
    masked = virt(fl, ss, ss_st);
    ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, unmasked, nullptr, row, nullptr, 2));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, unmasked, nullptr, col, nullptr, 3));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_CMP_GE, row, col, keep));  // key j visible to query i iff j <= i
    ops.push_back(pointwise(o, CUDNN_POINTWISE_BINARY_SELECT, unmasked, io[O::neg_inf], masked, keep));
  }
  Desc row_max = virt(fl, r, r_st), centred = virt(fl, ss, ss_st), e = virt(fl, ss, ss_st);
  Desc row_sum = virt(fl, r, r_st), log_sum = virt(fl, r, r_st), p = virt(bf, ss, ss_st);
  ops.push_back(reduction(o, CUDNN_REDUCE_TENSOR_MAX, masked, row_max));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_SUB, masked, row_max, centred));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_EXP, centred, nullptr, e));
  ops.push_back(reduction(o, CUDNN_REDUCE_TENSOR_ADD, e, row_sum));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_LOG, row_sum, nullptr, log_sum));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_ADD, row_max, log_sum, stats));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_DIV, e, row_sum, p));
  ops.push_back(matmul(o, p, v, out, len_q, nullptr, len_kv));
  finalize_graph(o, ops, handle);
  return o;
}

CudnnDescriptors build_sdpa_backward_graph(const SdpaShape& shape, void* handle) {
  FT_CHECK(shape.batch > 0 && shape.q_heads > 0 && shape.kv_heads > 0 && shape.seq > 0 && shape.head_dim > 0)
      << "SDPA backward graph: every dimension must be positive";
  FT_CHECK(shape.q_heads % shape.kv_heads == 0)
      << "SDPA backward graph: " << shape.q_heads << " query heads are not a multiple of " << shape.kv_heads
      << " KV heads";
  CudnnDescriptors o;
  const int64_t b = graph_batch(shape), h = shape.q_heads, hk = shape.kv_heads, s = graph_seq(shape), d = shape.head_dim;
  const int64_t dk = shape.key_head_dim > 0 ? shape.key_head_dim : d;
  const bool ragged = shape.ragged();
  auto bshd = [&](int64_t heads, int64_t dd) { return std::vector<int64_t>{s * heads * dd, dd, heads * dd, 1}; };
  // Per-query-head dK/dV before the GQA group sum: contiguous [B, H, T, D].
  auto bhsd = [&](int64_t heads, int64_t dd) { return std::vector<int64_t>{heads * s * dd, s * dd, dd, 1}; };
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, fl = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32, bo = CUDNN_DATA_BOOLEAN;
  // Graph inputs and outputs (the variant pack's uids, cudnn_sdpa_plan.hpp); the forward's 1..7 keep their
  // meaning. 13 and 14 are scratch cuDNN reads back in a later pass (the caller allocates them): sum_j dO.O
  // per row (f32 [B, H, T, 1]) and dQ accumulated in f32.
  const IoTensors io = io_tensors(o, shape, SdpaDirection::backward);
  using O = SdpaOperand;
  Desc q = io[O::q], kt = io[O::k], vt = io[O::v], out = io[O::out], stats = io[O::stats], scale = io[O::scale];
  Desc one = io[O::one], d_out = io[O::dout], d_q = io[O::dq], d_k = io[O::dk], d_v = io[O::dv];
  Desc softmax_sum = io[O::row_dot], d_q_accum = io[O::dq_accum];
  // Under the document mask the matmuls run each sequence at its own length.
  Desc len_q = ragged ? io[O::seq_len_q] : nullptr, len_kv = ragged ? io[O::seq_len_kv] : nullptr;
  const std::vector<int64_t> ss = {b, h, s, s}, ss_st = {h * s * s, s * s, s, 1};
  const std::vector<int64_t> ss_t_st = {h * s * s, s * s, 1, s};  // the same scores read transposed
  int64_t id = 100;
  auto virt = [&](cudnnDataType_t t, const std::vector<int64_t>& dims, const std::vector<int64_t>& st) {
    return tensor(o, id++, t, dims, st, true);
  };
  std::vector<Desc> ops;
  // softmax_sum = rowsum(dO * O): the "D" term of dS = P * (dP - D).
  Desc d_out_o = virt(fl, {b, h, s, d}, bshd(h, d)), row_dot = virt(fl, {b, h, s, 1}, {h * s, s, 1, 1});
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, d_out, out, d_out_o));
  ops.push_back(reduction(o, CUDNN_REDUCE_TENSOR_ADD, d_out_o, row_dot));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, row_dot, one, softmax_sum));  // (no dropout: scale 1)
  // P = exp(scale * Q.K^T - lse), masked: the forward's probabilities recomputed from the saved statistics.
  Desc scores = virt(fl, ss, ss_st), scaled = virt(fl, ss, ss_st), centred = virt(fl, ss, ss_st);
  ops.push_back(matmul(o, q, kt, scores, len_q, len_kv));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, scores, scale, scaled));
  Desc padded = scaled;
  if (ragged) padded = padding_mask(o, ops, io, scaled, [&](cudnnDataType_t t) { return virt(t, ss, ss_st); });
  ops.push_back(pointwise(o, CUDNN_POINTWISE_SUB, padded, stats, centred));
  Desc masked = centred;
  if (shape.causal) {
    Desc row = virt(i32, ss, ss_st), col = virt(i32, ss, ss_st), keep = virt(bo, ss, ss_st);
    Desc unmasked = masked;
    masked = virt(fl, ss, ss_st);
    ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, unmasked, nullptr, row, nullptr, 2));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_GEN_INDEX, unmasked, nullptr, col, nullptr, 3));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_CMP_GE, row, col, keep));
    ops.push_back(pointwise(o, CUDNN_POINTWISE_BINARY_SELECT, unmasked, io[O::neg_inf], masked, keep));
  }
  Desc p = virt(fl, ss, ss_st);
  ops.push_back(pointwise(o, CUDNN_POINTWISE_EXP, masked, nullptr, p));
  // dV = P^T.dO; under GQA per query head first, then summed over each KV head's group.
  Desc p_t = virt(bf, {b, h, s, s}, ss_t_st);
  ops.push_back(reshape(o, p, p_t));
  // Under the document mask the per-query-head dK/dV are ragged scratch (cudnn_sdpa_plan.hpp).
  if (h == hk) {
    ops.push_back(matmul(o, p_t, d_out, d_v, len_kv, nullptr, len_q));
  } else {
    Desc d_v_full = ragged ? io[O::dv_full] : virt(bf, {b, h, s, d}, bhsd(h, d));
    ops.push_back(matmul(o, p_t, d_out, d_v_full, len_kv, nullptr, len_q));
    ops.push_back(reduction(o, CUDNN_REDUCE_TENSOR_ADD, d_v_full, d_v));
  }
  // dS = scale * P * (dO.V^T - softmax_sum).
  Desc dp = virt(fl, ss, ss_st), dp_centred = virt(fl, ss, ss_st), ds_unscaled = virt(fl, ss, ss_st);
  Desc ds = virt(fl, ss, ss_st);
  ops.push_back(matmul(o, d_out, vt, dp, len_q, len_kv));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_centred));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, dp_centred, p, ds_unscaled));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds));
  // dK = dS^T.Q (GQA: per query head, then the group sum).
  Desc ds_t = virt(bf, {b, h, s, s}, ss_t_st);
  ops.push_back(reshape(o, ds, ds_t));
  if (h == hk) {
    ops.push_back(matmul(o, ds_t, q, d_k, len_kv, nullptr, len_q));
  } else {
    Desc d_k_full = ragged ? io[O::dk_full] : virt(bf, {b, h, s, d}, bhsd(h, d));
    ops.push_back(matmul(o, ds_t, q, d_k_full, len_kv, nullptr, len_q));
    ops.push_back(reduction(o, CUDNN_REDUCE_TENSOR_ADD, d_k_full, d_k));
  }
  // dQ = dS.K, accumulated in f32 and cast once; K is K^T's memory read
  // untransposed (the window's strides; ragged: K's offsets too).
  const int64_t w = shape.seq;
  Desc k = tensor(o, id++, bf, {b, hk, s, dk}, {w * hk * dk, dk, hk * dk, 1}, true, false,
                  ragged ? io[O::kv_offsets] : nullptr);
  ops.push_back(reshape(o, kt, k));
  ops.push_back(matmul(o, ds, k, d_q_accum, len_q, nullptr, len_kv));
  ops.push_back(pointwise(o, CUDNN_POINTWISE_IDENTITY, d_q_accum, nullptr, d_q));
  finalize_graph(o, ops, handle);
  return o;
}

CudnnDescriptors h100_device_description() {
  CudnnDescriptors o;
  Desc device = make(o, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  const std::string json = kH100Json;
  CK(cudnnBackendSetAttribute(device, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                              static_cast<int64_t>(json.size()), json.data()));
  CK(cudnnBackendFinalize(device));
  return o;
}

std::int64_t sdpa_engine_configurations(const CudnnDescriptors& graph, const CudnnDescriptors& device) {
  CudnnDescriptors o;
  Desc heuristics = make(o, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  Desc g = static_cast<Desc>(graph.last()), dev = static_cast<Desc>(device.last());
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
  CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dev));
  CK(cudnnBackendFinalize(heuristics));
  int64_t count = 0;
  CK(cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                              nullptr));
  return count;
}

SdpaExecutionPlan build_sdpa_execution_plan(const CudnnDescriptors& graph, void* handle,
                                            const CudnnDescriptors* device) {
  FT_CHECK((handle != nullptr) != (device != nullptr)) << "cuDNN execution plan: give a handle or a device description";
  SdpaExecutionPlan result;
  CudnnDescriptors& o = result.descriptors;
  Desc g = static_cast<Desc>(graph.last());
  Desc heuristics = make(o, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
  CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode));
  if (device != nullptr) {
    Desc dev = static_cast<Desc>(device->last());
    CK(cudnnBackendSetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dev));
  }
  CK(cudnnBackendFinalize(heuristics));
  int64_t count = 0;
  CK(cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                              nullptr));
  FT_CHECK(count > 0) << "cuDNN's heuristics offer no engine configuration for this graph";
  // The backend API fills descriptors the caller created.
  std::vector<Desc> configs(static_cast<std::size_t>(count));
  for (Desc& c : configs) c = make(o, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t returned = 0;
  CK(cudnnBackendGetAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                              &returned, configs.data()));
  result.engine_configurations = returned;
  // The first configuration (heuristics order: best first) whose plan
  // finalizes; each refusal's reason is kept for the error.
  std::string reasons;
  for (int64_t i = 0; i < returned; ++i) {
    Desc plan = nullptr;
    CK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan));
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    if (handle != nullptr) {
      cudnnHandle_t h = static_cast<cudnnHandle_t>(handle);
      status = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    } else {
      Desc dev = static_cast<Desc>(device->last());
      status = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                        &dev);
    }
    if (status == CUDNN_STATUS_SUCCESS)
      status = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                        1, &configs[static_cast<std::size_t>(i)]);
    if (status == CUDNN_STATUS_SUCCESS) status = cudnnBackendFinalize(plan);
    if (status == CUDNN_STATUS_SUCCESS) {
      o.add(plan);
      int64_t one = 0;
      CK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &one,
                                  &result.workspace_bytes));
      return result;
    }
    char reason[1024] = {};
    cudnnGetLastErrorString(reason, sizeof reason);
    cudnnBackendDestroyDescriptor(plan);
    if (i < 3) reasons += "; configuration " + std::to_string(i) + ": " + cudnnGetErrorString(status) + ": " + reason;
  }
  FT_THROW() << "none of cuDNN's " << returned << " engine configurations finalized an execution plan" << reasons;
}

#undef CK

}  // namespace ftrain::cuda
