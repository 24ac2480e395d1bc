// The ops backend registry: one table of function pointers per device.
//
// ops::<op>(ctx, ...) (kernels/dispatch.cpp) finds the table registered for
// the device of the op's tensors and calls the entry. The host backend
// registers itself (kernels/host_backend.cpp). The CUDA backend is a
// separate shared library, libftrain_cuda.so, loaded only when present
// (runtime/backend_library.hpp): its entry point registers its OpTable here,
// and its allocator and streams in runtime/. Nothing else changes when it
// appears: a plugin built once runs on either.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/op_list.hpp"
#include "base/device.hpp"

namespace ftrain {

class ExecutionContext;

// Bumped whenever the op list or a signature in it changes; a backend
// library built against another table is refused.
inline constexpr std::uint32_t kOpTableVersion = 13;  // 2: ViT token ops, 3: the FP8 ops, 4: clipping ops,
                                                     // 5: Fp8Tensor::data_t (the transposed copy),
                                                     // 6: rmsnorm_forward_fp8, swiglu_forward_fp8,
                                                     // 7: fp8_transpose,
                                                     // 8: adamw_update_chunks(_guarded), the
                                                     //    multi-tensor AdamW (one launch per flat shard),
                                                     // 9: patchify_backward and adamw_update_guarded
                                                     //    removed (no caller)
                                                     // 10: attention_forward/backward take the
                                                     //    optional per-token document ids
                                                     // 11: rope_forward/backward take the optional
                                                     //    per-token positions
                                                     // 12: the vocabulary-parallel embedding and
                                                     //    cross entropy (tensor parallelism)
                                                     // 13: attention_block_forward/merge/backward
                                                     //    (ring attention)

struct OpTable {
  std::uint32_t version = kOpTableVersion;
  const char* name = nullptr;  // "host", "cuda"
  Device device = Device::host;
#define FTRAIN_OP_TABLE_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) \
  R (*NAME)(ExecutionContext & ctx, FTRAIN_UNPAREN PARAMS) = nullptr;
  FTRAIN_OP_LIST(FTRAIN_OP_TABLE_ENTRY)
#undef FTRAIN_OP_TABLE_ENTRY
};

// Installs `table` for its device (replacing any earlier one; it must
// outlive the process's use of it, a static). Refuses a table of another
// version or with a missing entry, naming it.
void register_backend(const OpTable& table);
// The table for `device`; for a device without one, the optional backend
// libraries are looked for once first. nullptr when there is none.
const OpTable* find_backend(Device device);
// Every registered table (host first): what the backend-parameterised op
// tests run over.
std::vector<const OpTable*> registered_backends();
// Removes the table of `device` (tests that register a fake backend).
void unregister_backend(Device device);

// The host backend's table.
const OpTable& host_op_table();

}  // namespace ftrain
