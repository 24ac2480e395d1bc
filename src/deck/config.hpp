// RunConfig: everything a deck can say, resolved, with defaults.
//
// The deck parser (deck/parser.*) fills it; the app, trainer and engine only
// read it. Each field notes the deck command that sets it; share/doc/deck.md
// is generated from the parser's command table, not from this file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ftrain {

// Where a value came from, so later validation errors can still name the deck
// file and line ("tiny.in:12: ...").
struct DeckLocation {
  std::string file;
  int line = 0;
  std::string str() const { return file + ":" + std::to_string(line); }
};

struct ModelSection {  // model NAME [preset P] [KEY VALUE]...
  std::string name;                                         // plugin name, e.g. "llama"
  std::string preset;                                       // empty = the plugin's default
  std::vector<std::pair<std::string, std::string>> overrides;  // passed to the plugin as-is
  DeckLocation where;
};

struct DataSection {  // data tokens PATH [packing on|off] [shuffle on|off]
  std::string kind = "tokens";
  std::string path;
  bool packing = true;
  bool shuffle = false;
  DeckLocation where;
};

struct EvalSection {  // eval tokens PATH every N
  std::string kind = "tokens";
  std::string path;  // empty = no eval
  std::int64_t every = 0;
  DeckLocation where;
};

struct BatchSection {  // batch micro M [accumulate A] seq_len T
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  std::int64_t seq_len = 128;
};

struct OptimizerSection {  // optimizer adamw lr X [beta1 B] [beta2 B] [eps E] [weight_decay W]
  std::string name = "adamw";
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

struct ScheduleSection {  // schedule constant|linear|cosine [warmup_steps N | warmup_ratio R] [min_lr X]
  std::string kind = "constant";
  std::int64_t warmup_steps = 0;
  std::optional<double> warmup_ratio;  // overrides warmup_steps when set: round(ratio * max_steps)
  double min_lr = 0.0;
};

struct InitSection {  // init random [std S] | init safetensors PATH
  std::string kind = "random";
  double std = 0.02;
  std::string path;
  DeckLocation where;
};

struct FsdpSection {  // fsdp STRATEGY [keyword value]...
  std::string strategy = "full_shard";     // full_shard | shard_grad_op | no_shard | hybrid_shard
  std::string backward_prefetch = "backward_pre";  // backward_pre | backward_post | none
  bool forward_prefetch = false;
  std::int64_t limit_all_gathers = 2;
  std::int64_t shard_group_size = 0;       // 0 = the node (MPI_COMM_TYPE_SHARED)
  std::string param_dtype;                 // empty = follows precision
  std::string reduce_dtype = "fp32";
  bool sync_module_states = false;
  DeckLocation where;
};

struct RunConfig {
  ModelSection model;
  std::string precision = "fp32";  // precision fp32|bf16
  std::uint64_t seed = 1234;       // seed N
  DataSection data;
  EvalSection eval;
  BatchSection batch;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  double clip_grad_norm = 0.0;     // clip_grad_norm X (0 = off)
  std::int64_t max_steps = 0;      // max_steps N (required)
  InitSection init;
  FsdpSection fsdp;
  std::string activation_checkpointing = "off";  // activation_checkpointing on|off|every N
  std::int64_t activation_checkpointing_every = 0;
  std::int64_t log_every = 1;      // log every N
  std::string run_dir = "run";     // run_dir PATH (metrics.jsonl and per-rank logs go here)
  bool per_rank_logs = false;      // log ... rank_files on
  std::optional<double> peak_tflops;  // peak_tflops X (per device, for MFU); default from a table
  std::int64_t vocab_chunk = 4096;    // cross_entropy vocab_chunk N

  // Every line of the deck after variable substitution and continuation
  // joining, "file:line: text", for echoing the resolved configuration.
  std::vector<std::string> resolved_lines;
  std::string deck_path;
};

}  // namespace ftrain
