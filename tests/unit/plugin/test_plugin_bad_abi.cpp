// A plugin built against a future plugin ABI: the loader must refuse it
// before touching anything but abi_version.
#include "plugin/ftrain_plugin.h"

namespace {
void* create(ftrain_model_args*) { return nullptr; }
void destroy(void*) {}
const char* const kPresets[] = {"default", nullptr};
const ftrain_plugin_descriptor kDescriptor = {FTRAIN_PLUGIN_ABI_VERSION + 1,
                                              sizeof(ftrain_plugin_descriptor),
                                              "loader_test_badabi",
                                              "built for another ABI",
                                              kPresets,
                                              &create,
                                              &destroy};
}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) { return &kDescriptor; }
