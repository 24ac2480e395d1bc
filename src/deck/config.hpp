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

#include "deck/choices.hpp"

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

// data images synthetic ... | data images hdf5 PATH ... (and the same for eval)
struct ImageDataSection {
  deck::ImageSource source = deck::ImageSource::none;
  std::int64_t classes = 0;        // synthetic: 0 = the model's output size
  std::int64_t samples = 1024;     // synthetic: distinct images
  double noise = 1.0;              // synthetic: noise std (class templates have std 0.5)
  std::vector<double> mean = {0.0};  // hdf5: per channel (or one for all), on u8/255
  std::vector<double> std = {1.0};
};

struct DataSection {  // data tokens PATH [packing on|off] [document_mask on|off [positions restart|continue]] [shuffle on|off] | data images ...
  deck::DataKind kind = deck::DataKind::tokens;
  std::string path;                // token file, HDF5 file, or "(synthetic)"
  ImageDataSection images;
  bool packing = true;
  // Attention within a packed window stays inside each token's document.
  bool document_mask = false;
  // With the document mask: RoPE positions restart at each document.
  deck::RopePositions positions = deck::RopePositions::restart;
  bool shuffle = false;
  // A step whose targets are all masked (every response cut off by seq_len)
  // trains nothing; it stops the run unless the deck says it may happen.
  bool allow_untrained_steps = false;
  DeckLocation where;
};

struct EvalSection {  // eval tokens PATH every N | eval images synthetic|hdf5 ...
  deck::DataKind kind = deck::DataKind::tokens;
  std::string path;  // empty = no eval; "(synthetic)" for synthetic images
  ImageDataSection images = {.source = deck::ImageSource::none, .classes = 0, .samples = 256, .noise = 1.0, .mean = {0.0}, .std = {1.0}};
  std::int64_t every = 0;
  DeckLocation where;
};

struct BatchSection {  // batch micro M [accumulate A] seq_len T
  std::int64_t micro_batch = 1;
  std::int64_t grad_accum = 1;
  std::int64_t seq_len = 128;
  DeckLocation where;
};

struct OptimizerSection {  // optimizer adamw lr X [beta1 B] [beta2 B] [eps E] [weight_decay W]
  deck::OptimizerKind name = deck::OptimizerKind::adamw;
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

struct ScheduleSection {  // schedule constant|linear|cosine [warmup_steps N | warmup_ratio R] [min_lr X]
  deck::ScheduleKind kind = deck::ScheduleKind::constant;
  std::int64_t warmup_steps = 0;
  std::optional<double> warmup_ratio;  // overrides warmup_steps when set: round(ratio * max_steps)
  double min_lr = 0.0;
};

struct InitSection {  // init random [std S] | init safetensors PATH | init hdf5 PATH
  deck::InitKind kind = deck::InitKind::random;
  double std = 0.02;
  double test_perturb_by_rank = 0.0;  // test only: rank r adds r x this x N(0,1) to its local init
  std::string path;
  DeckLocation where;
};

struct FsdpSection {  // fsdp STRATEGY [keyword value]...
  deck::ShardingStrategy strategy = deck::ShardingStrategy::full_shard;
  deck::BackwardPrefetch backward_prefetch = deck::BackwardPrefetch::backward_pre;
  bool forward_prefetch = false;
  std::int64_t limit_all_gathers = 2;
  std::int64_t shard_group_size = 0;       // 0 = the node (MPI_COMM_TYPE_SHARED)
  std::optional<deck::CommDtype> param_dtype;  // unset = follows precision
  deck::CommDtype reduce_dtype = deck::CommDtype::fp32;
  bool sync_module_states = false;
  bool no_sync = false;                    // no_sync on: reduce once per step (no_shard, shard_grad_op)
  deck::Offload offload = deck::Offload::none;  // what lives in host memory on a device backend
  DeckLocation where;
};

// parallel [tensor T] [context C]: the world is data x context x tensor
// (comm/process_grid.hpp); the FSDP strategy shards over data x context.
struct ParallelSection {
  std::int64_t tensor = 1;   // T: tensor (Megatron) parallel ranks, consecutive (inside a node)
  std::int64_t context = 1;  // C: context (sequence) parallel ranks, ring attention
  DeckLocation where;        // empty file: no parallel line
};

struct CheckpointSection {  // checkpoint every N dir PATH [keep K] [stop_after S] [consolidated on|off] [async on|off]
  std::int64_t every = 0;       // 0 = no periodic checkpoints
  std::string dir;              // empty = checkpoints off (preemption then just stops)
  std::int64_t keep = 0;        // newest K kept; 0 = all
  std::int64_t stop_after = 0;  // stop as on preemption after this optimizer step; 0 = never
  bool consolidated = false;    // also write step_<N>/model.h5 (the consolidated state dict)
  bool async = false;           // write rank files on a background thread (ckpt/checkpoint_writer.hpp)
  DeckLocation where;
};

struct SaveFinalSection {  // save_final PATH [dtype f32|bf16]
  std::string path;  // empty = no consolidated file at the end
  deck::SavedDtype dtype = deck::SavedDtype::f32;  // bf16: datasets hold bfloat16 bits (ckpt/consolidated.hpp)
  DeckLocation where;
};

struct ResumeSection {  // resume auto|PATH
  std::string from;  // as written: empty = fresh start, "auto", or a step directory
  bool automatic = false;  // resume auto: the newest complete checkpoint in the checkpoint dir
  DeckLocation where;
};

struct Fp8Section {  // fp8 [format hybrid|e4m3] [amax_history N] [margin M] [amax_algo max|most_recent] [all_gather on|off]
  deck::Fp8Format format = deck::Fp8Format::hybrid;  // fp8/recipe.hpp: E4M3 forward + E5M2 gradients, or E4M3 everywhere
  std::int64_t amax_history = 1024;  // Transformer Engine DelayedScaling defaults
  std::int64_t margin = 0;
  deck::AmaxAlgo amax_algo = deck::AmaxAlgo::max;
  bool all_gather = true;  // FP8 linear weights all-gathered as FP8 bytes (fsdp/fp8_all_gather.hpp)
  DeckLocation where;
};

// lora [rank R] [alpha A] [dropout P] [targets LIST|all-linear] [init kaiming|gaussian] [base_dtype compute|f32]
// (repeatable: later lines set what they name) and rslora on|off.
struct LoraSection {
  bool enabled = false;  // any lora line
  std::int64_t rank = 8;                 // PEFT LoraConfig defaults
  double alpha = 8.0;
  double dropout = 0.0;
  std::vector<std::string> targets = {"q_proj", "v_proj"};  // module names (targets LIST)
  bool all_linear = false;                // targets all-linear
  deck::LoraInit init = deck::LoraInit::kaiming;  // kaiming is PEFT init_lora_weights=True
  bool rslora = false;                    // rslora on
  // The frozen base's storage: compute = fsdp param_dtype (bf16 under
  // precision bf16, f32 under fp32), f32 = always f32 (4 bytes per parameter).
  deck::LoraBaseDtype base_dtype = deck::LoraBaseDtype::compute;
  DeckLocation where;                     // the first lora line
  std::string adapter_path;               // init adapter DIR: start from a PEFT adapter
  DeckLocation adapter_where;
  std::string save_adapter_path;          // save_adapter DIR: write a PEFT adapter at the end
  DeckLocation save_adapter_where;
  bool merge = false;                     // merge_adapter on: W += scale B A before save_final
  DeckLocation merge_where;
};

struct RunConfig {
  ModelSection model;
  deck::DeviceKind device = deck::DeviceKind::automatic;  // device auto|host|cuda (train/device_choice.hpp decides)
  DeckLocation device_where;
  deck::AttentionBackend attention_backend = deck::AttentionBackend::automatic;  // attention_backend auto|cudnn|reference (CUDA only; runtime/attention_backend.hpp)
  DeckLocation attention_backend_where;
  deck::DeviceComm device_comm = deck::DeviceComm::nccl;  // device_comm nccl|mpi: collectives on device buffers (comm/device_communicator.hpp)
  DeckLocation device_comm_where;
  double collective_timeout_seconds = 600;  // collective_timeout minutes|seconds X (comm/collective_watchdog.hpp)
  DeckLocation collective_timeout_where;
  deck::HostStreams host_streams = deck::HostStreams::sync;  // host_streams sync|async (the host backend's streams; runtime/stream.hpp)
  DeckLocation host_streams_where;    // empty file: not in the deck (FTRAIN_HOST_STREAM decides)
  deck::Precision precision = deck::Precision::fp32;  // precision fp32|bf16|fp8 (fp8: block linears FP8, the rest bf16)
  std::uint64_t seed = 1234;       // seed N
  Fp8Section fp8;                  // used when precision is fp8
  DataSection data;
  EvalSection eval;
  BatchSection batch;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  double clip_grad_norm = 0.0;     // clip_grad_norm X (0 = off)
  std::int64_t max_steps = 0;      // max_steps N (required)
  InitSection init;
  FsdpSection fsdp;
  ParallelSection parallel;        // parallel tensor T context C
  deck::ActivationCheckpointing activation_checkpointing = deck::ActivationCheckpointing::off;  // activation_checkpointing on|off|every N
  std::int64_t activation_checkpointing_every = 0;
  std::int64_t log_every = 1;      // log every N
  std::string run_dir = "run";     // run_dir PATH (metrics.jsonl and per-rank logs go here)
  DeckLocation run_dir_where;      // empty file: the default
  bool per_rank_logs = false;      // log ... rank_files on
  deck::Progress progress = deck::Progress::automatic;  // progress auto|on|off (train/console.hpp decides what auto means)
  std::optional<double> peak_tflops;  // peak_tflops X (per device, for MFU); default from a table
  std::int64_t vocab_chunk = 4096;    // cross_entropy vocab_chunk N
  CheckpointSection checkpoint;       // checkpoint ...
  ResumeSection resume;               // resume ...
  SaveFinalSection save_final;        // save_final ...
  LoraSection lora;                   // lora ..., rslora ...

  // Every line of the deck after variable substitution and continuation
  // joining, "file:line: text", for echoing the resolved configuration.
  std::vector<std::string> resolved_lines;
  std::string deck_path;
  // Things that are not errors but likely mistakes (a -var the deck never
  // reads); the run header and --check print them.
  std::vector<std::string> warnings;
  // Input paths the deck names that do not exist, one "FILE:LINE: ..."
  // message each; filled only when the parse was asked to defer them
  // (MissingPaths::defer), for the trainer to report with its own checks.
  std::vector<std::string> missing_paths;
};

}  // namespace ftrain
