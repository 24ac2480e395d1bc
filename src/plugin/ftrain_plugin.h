/* The ftrain model plugin ABI: one C entry point, one versioned descriptor.
 *
 * A plugin is a shared library (CMake MODULE) named ftrain_<name>.so that
 * exports exactly one symbol, FTRAIN_PLUGIN_ENTRY_SYMBOL, returning a pointer
 * to a static descriptor. The loader refuses a descriptor whose abi_version
 * differs from FTRAIN_PLUGIN_ABI_VERSION (the C++ SDK types in
 * plugin/model.hpp are part of the ABI: bump the version when they change).
 *
 * create_model returns an opaque handle that is a `ftrain::Model*` built
 * against the same SDK; destroy_model releases it. On failure create_model
 * returns NULL and writes a one-line, user-facing message into `error`
 * (e.g. "unknown key 'hiden_size' (did you mean 'hidden_size'?)").
 */
#ifndef FTRAIN_PLUGIN_H
#define FTRAIN_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version history (a plugin built for another version is refused):
 *   1  first SDK
 *   2  ops take an ExecutionContext (kernels/ops.hpp); StepContext carries it
 *      (plugin/model.hpp); Tensor storage comes from stream-ordered
 *      allocators (runtime/allocator.hpp). Issue 12.
 *   3  LoRA (layers/lora.hpp): ParamSpec::adaptable and init_bound,
 *      InitKind::uniform, Batch::first_sample, StepContext::lora. Issue 16. */
#define FTRAIN_PLUGIN_ABI_VERSION 3
#define FTRAIN_PLUGIN_ENTRY_SYMBOL "ftrain_plugin_entry"

typedef struct ftrain_kv {
  const char* key;
  const char* value;
} ftrain_kv;

typedef struct ftrain_model_args {
  const char* preset;          /* never NULL; a name from the descriptor's presets */
  const ftrain_kv* overrides;  /* hyperparameter overrides from the deck, in deck order */
  int n_overrides;
  char* error;                 /* out: message on failure */
  size_t error_capacity;
} ftrain_model_args;

typedef struct ftrain_plugin_descriptor {
  uint32_t abi_version;        /* FTRAIN_PLUGIN_ABI_VERSION the plugin was built with */
  uint32_t struct_size;        /* sizeof(ftrain_plugin_descriptor) */
  const char* name;            /* "llama" */
  const char* description;     /* one line for --list-models */
  const char* const* presets;  /* NULL-terminated, first is the default */
  void* (*create_model)(ftrain_model_args* args);
  void (*destroy_model)(void* model);
} ftrain_plugin_descriptor;

typedef const ftrain_plugin_descriptor* (*ftrain_plugin_entry_fn)(void);

#if defined(_WIN32)
#define FTRAIN_PLUGIN_EXPORT __declspec(dllexport)
#else
#define FTRAIN_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
}
#endif

#endif /* FTRAIN_PLUGIN_H */
