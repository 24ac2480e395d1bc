// A would-be plugin that forgot the entry point: the loader must say so.
#include "plugin/ftrain_plugin.h"

extern "C" FTRAIN_PLUGIN_EXPORT int ftrain_plugin_entry_misspelled(void) { return 0; }
