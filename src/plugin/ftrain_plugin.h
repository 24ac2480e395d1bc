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
 *      InitKind::uniform, Batch::first_sample, StepContext::lora. Issue 16.
 *   4  Hugging Face config.json conversion provided by the plugin
 *      (export_hf_config, import_hf_config; ftrain-convert);
 *      Model::image_shape; the linear
 *      layer and LoRA in layers/ (ftrain::layers::LinearLayers), Batch in
 *      data/batch.hpp.
 *   5  Batch::documents (a packed window's per-token document ids) and the
 *      attention ops' optional `documents` argument (kernels/op_list.hpp).
 *      Issue 39.
 *   6  Batch::positions (per-token RoPE positions restarting at each
 *      document) and the rope ops' optional `positions` argument;
 *      Model::attention_training_flops (MFU counts only the attention a
 *      document mask leaves).
 *   7  StepContext::parallel (plugin/parallel_group.hpp): the tensor and
 *      context groups a unit communicates with (parallel tensor/context);
 *      ParamSpec::tensor_split_dim and full_shape (a tensor rank's slice of
 *      a Hugging Face tensor) and Model::split_for_tensor_parallel;
 *      Tensor::pinned_host, and the pinned-host members appended to
 *      DeviceAllocator and AllocatorStats (runtime/allocator.hpp).
 *   8  Batch::sequence_index (each token's index in the whole window when
 *      the sequence is split over a context group) and
 *      Model::use_context_parallel (parallel context C). */
#define FTRAIN_PLUGIN_ABI_VERSION 8
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

/* Receives text a plugin produces (called once, with NUL-terminated text
 * that is only valid during the call). */
typedef void (*ftrain_text_sink_fn)(void* sink, const char* text);

/* The model's Hugging Face config.json <-> ftrain, for ftrain-convert.
 * export: `config` holds the model's configuration as the consolidated
 *   checkpoint stores it (the root attributes: the keys the plugin's model
 *   reports, as text) and `torch_dtype` the dtype of the exported tensors
 *   ("float32", "bfloat16"); the plugin writes the config.json text.
 * import: `json` is a config.json's text, `source` names where it came
 *   from; the plugin writes the deck's `model ...` line that builds the
 *   same model.
 * Both return 1 on success and -1 on failure with a one-line message in
 * `error`; import returns 0, writing nothing, when the config is not one of
 * this plugin's models (the next plugin is asked). */
typedef struct ftrain_hf_config_args {
  const ftrain_kv* config;     /* export */
  int n_config;
  const char* torch_dtype;     /* export */
  const char* json;            /* import */
  const char* source;          /* import */
  void* sink;                  /* out: the text, through write */
  ftrain_text_sink_fn write;
  char* error;                 /* out: message on failure */
  size_t error_capacity;
} ftrain_hf_config_args;

typedef struct ftrain_plugin_descriptor {
  uint32_t abi_version;        /* FTRAIN_PLUGIN_ABI_VERSION the plugin was built with */
  uint32_t struct_size;        /* sizeof(ftrain_plugin_descriptor) */
  const char* name;            /* "llama" */
  const char* description;     /* one line for --list-models */
  const char* const* presets;  /* NULL-terminated, first is the default */
  void* (*create_model)(ftrain_model_args* args);
  void (*destroy_model)(void* model);
  /* NULL: the plugin offers no Hugging Face config conversion. */
  int (*export_hf_config)(ftrain_hf_config_args* args);
  int (*import_hf_config)(ftrain_hf_config_args* args);
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
