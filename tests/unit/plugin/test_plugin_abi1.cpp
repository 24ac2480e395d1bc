// A plugin as the ABI 1 SDK built it (before issue 12 changed the C++ SDK
// types: ops without an execution context). Its descriptor layout is the
// same; only abi_version says 1. The loader must refuse it, naming both
// versions and how to rebuild.
#include "plugin/ftrain_plugin.h"

namespace {
void* create(ftrain_model_args*) { return nullptr; }
void destroy(void*) {}
const char* const kPresets[] = {"default", nullptr};
const ftrain_plugin_descriptor kDescriptor = {1,
                                              sizeof(ftrain_plugin_descriptor),
                                              "loader_test_abi1",
                                              "built with the ABI 1 SDK",
                                              kPresets,
                                              &create,
                                              &destroy};
}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) { return &kDescriptor; }
