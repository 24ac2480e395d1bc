// A deliberately bad plugin for the no-backend-code check: it calls a host
// kernel directly, as every plugin did while the op dispatch was inline code
// compiled into it (before ABI 2). no_backend_code.sh must reject it (the
// CTest plugin_no_backend_code_rejects_inline_dispatch is WILL_FAIL).
#include "kernels/host/host_ops.hpp"
#include "plugin/ftrain_plugin.h"

namespace {
void* create(ftrain_model_args*) {
  ftrain::Tensor t = ftrain::Tensor::zeros({4}, ftrain::DType::f32);
  ftrain::host::fill(t, 1.0f);  // bypasses ftrain::ops: bound to the host backend forever
  return nullptr;
}
void destroy(void*) {}
const char* const kPresets[] = {"default", nullptr};
const ftrain_plugin_descriptor kDescriptor = {FTRAIN_PLUGIN_ABI_VERSION,
                                              sizeof(ftrain_plugin_descriptor),
                                              "loader_test_inline_backend",
                                              "calls a host kernel directly",
                                              kPresets,
                                              &create,
                                              &destroy};
}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) { return &kDescriptor; }
