// The deck command table and the table-driven argument parser (see
// commands.hpp). To add a command or keyword, add it to command_table():
// parsing, validation, errors with suggestions and the reference page
// follow from the entry.
#include "deck/commands.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <system_error>

#include "base/error.hpp"
#include "deck/diagnostics.hpp"
#include "deck/lexer.hpp"

namespace ftrain::deck {

std::string format_number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  // to_chars writes "1e-04"; people write "1e-4".
  const std::size_t e = text.find('e');
  if (e != std::string::npos) {
    std::size_t digits = e + 1;
    if (digits < text.size() && (text[digits] == '-' || text[digits] == '+')) ++digits;
    while (digits + 1 < text.size() && text[digits] == '0') text.erase(digits, 1);
  }
  return text;
}

namespace {

std::string on_off(bool value) { return value ? "on" : "off"; }

// "0.485,0.456,0.406" -> numbers; the deck's location in every error.
std::vector<double> number_list(const ParsedCommand& p, std::string_view keyword, bool positive) {
  const Value* v = p.find(keyword);
  std::vector<double> out;
  std::string_view text = v->text;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string item(text.substr(0, comma));
    double x = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || !std::isfinite(x) ||
        (positive && x <= 0)) {
      FT_USER_ERROR() << p.where.str() << ": '" << keyword << "' expects comma-separated "
                      << (positive ? "positive " : "") << "numbers (one per channel, e.g. 0.5,0.5,0.5), got '"
                      << v->text << "'";
    }
    out.push_back(x);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

void apply_normalisation(ImageDataSection& images, const ParsedCommand& p) {
  if (p.find("mean") != nullptr) images.mean = number_list(p, "mean", false);
  if (p.find("std") != nullptr) images.std = number_list(p, "std", true);
}
std::string integer_text(std::int64_t value) { return std::to_string(value); }

void set_lora_targets(LoraSection& lora, const std::string& text, const DeckLocation& where) {
  if (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos ||
      (text.find("all-linear") != std::string::npos && text != "all-linear"))
    FT_USER_ERROR() << where.str() << ": 'lora' targets '" << text
                    << "': expected comma-separated module names (q_proj,v_proj) or all-linear";
  lora.all_linear = text == "all-linear";
  lora.targets.clear();
  if (lora.all_linear) return;
  for (std::size_t start = 0;;) {
    const std::size_t comma = text.find(',', start);
    lora.targets.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
}
template <DeckChoice E>
std::string word_text(E value) { return std::string(word(value)); }

// ---- the table ----------------------------------------------------------------

// Keywords that several forms share (one definition, one help text).
Param data_shuffle_param() {
  return Param{.name = "shuffle", .kind = ValueKind::on_off,
               .help = "shuffle sample order each epoch (seeded)",
               .maps_to = "`DataLoader(shuffle=...)`",
               .set = [](RunConfig& c, const Value& v) { c.data.shuffle = v.flag; },
               .default_of = [](const RunConfig& c) { return on_off(c.data.shuffle); }};
}
Param eval_every_param() {
  return Param{.name = "every", .kind = ValueKind::positive_int,
               .help = "evaluate every N optimizer steps",
               .maps_to = "`eval_steps`",
               .required = true,
               .set = [](RunConfig& c, const Value& v) { c.eval.every = v.integer; }};
}
// Read by apply_normalisation (the values are lists, parsed there).
Param normalise_mean_param() {
  return Param{.name = "mean", .kind = ValueKind::text,
               .help = "per-channel mean, comma-separated (one value for all channels)",
               .maps_to = "`transforms.Normalize(mean=...)`",
               .default_of = [](const RunConfig&) { return std::string("0"); }};
}
Param normalise_std_param() {
  return Param{.name = "std", .kind = ValueKind::text,
               .help = "per-channel standard deviation, comma-separated (one value for all channels)",
               .maps_to = "`transforms.Normalize(std=...)`",
               .default_of = [](const RunConfig&) { return std::string("1"); }};
}

std::vector<Command> build_table() {
  std::vector<Command> table;

  table.push_back(Command{
      .name = "variable",
      .help = "Defines `${NAME}` for the rest of the deck and the files it includes. "
              "`-var NAME VALUE` on the command line overrides the deck's definition; "
              "defining the same name twice in the deck is an error. A reference is looked up "
              "on the command line, then in the deck, then in the environment.",
      .maps_to = "",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {
                         Param{.name = "NAME", .kind = ValueKind::name, .help = "variable name"},
                         Param{.name = "VALUE", .kind = ValueKind::text,
                               .help = "its value (quote it to keep blanks)"}}}},
      .repeatable = true,
      .example = "variable data_dir /scratch/tokens",
  });

  table.push_back(Command{
      .name = "include",
      .help = "Reads another deck file in place. A relative FILE is taken from the directory of "
              "the including file (from the current directory for a deck given as a string). "
              "An include loop is an error.",
      .maps_to = "",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{.name = "FILE", .kind = ValueKind::path,
                                           .help = "deck file to read"}}}},
      .repeatable = true,
      .example = "include common.in",
  });

  table.push_back(Command{
      .name = "model",
      .help = "The model architecture: the plugin NAME (loaded as a shared library), a preset "
              "size, and hyperparameter overrides passed to the plugin as raw strings (the "
              "plugin validates them).",
      .maps_to = "AutoModel config (`from_pretrained` name / config overrides)",
      .forms = {Form{
          .word = "",
          .help = "",
          .positionals = {Param{.name = "NAME", .kind = ValueKind::name,
                                .help = "plugin name, e.g. llama or vit",
                                .set = [](RunConfig& c, const Value& v) { c.model.name = v.text; }}},
          .keywords = {Param{.name = "preset", .kind = ValueKind::text,
                             .help = "preset size defined by the plugin (e.g. llama2-7b, tiny)",
                             .set = [](RunConfig& c, const Value& v) { c.model.preset = v.text; },
                             .default_of = [](const RunConfig&) {
                               return std::string("(the plugin's default)");
                             }}},
          .passthrough_keywords = true,
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.model.overrides = p.extra;
            c.model.where = p.where;
          }}},
      .required = true,
      .example = "model llama preset tiny",
  });

  table.push_back(Command{
      .name = "precision",
      .help = "Compute precision. Master weights, gradients shards and optimizer state stay fp32.",
      .maps_to = "Accelerate `mixed_precision`",
      .forms = {Form{
          .word = "",
          .help = "",
          .positionals = {Param{.name = "MODE", .kind = ValueKind::choice,
                                .help = "compute precision",
                                .choices = choices_of<Precision>({"no", "bf16", "fp8"}),
                                .set = [](RunConfig& c, const Value& v) { c.precision = v.as<Precision>(); },
                                .default_of = [](const RunConfig& c) { return word_text(c.precision); }}}}},
      .example = "precision bf16",
  });

  table.push_back(Command{
      .name = "device",
      .help = "Where the ops run. `host`: the CPU backend. `cuda`: the CUDA backend (libftrain_cuda.so); "
              "without a usable GPU (no driver, no device, too old a driver, no CUDA build) the run stops "
              "before anything else with the cause; with one, the training engine runs there (an op the CUDA "
              "backend has no kernel for yet stops the run naming it; share/doc/status.md). `auto`: the host "
              "until the CUDA backend has trained on a multi-GPU node (decisions.md), CUDA after; it asks only the driver (libcuda), never "
              "loading the CUDA libraries into a host run, and the run header says what was chosen and why.",
      .maps_to = "Accelerate `cpu` / `TrainingArguments.use_cpu`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{.name = "KIND", .kind = ValueKind::choice,
                                           .help = "backend for the ops",
                                           .choices = choices_of<DeviceKind>({"", "use_cpu=True", "use_cpu=False"}),
                                           .set = [](RunConfig& c, const Value& v) { c.device = v.as<DeviceKind>(); },
                                           .default_of = [](const RunConfig& c) { return word_text(c.device); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.device_where = p.where; }}},
      .example = "device auto",
  });

  table.push_back(Command{
      .name = "attention_backend",
      .help = "Which attention the CUDA backend runs. `cudnn`: the fused cuDNN SDPA graphs (bf16, an "
              "execution plan built once per shape and cached); a shape cuDNN cannot run (f32 storage, or "
              "no engine/plan for it) stops the run naming the shape and cuDNN's reason. `reference`: the "
              "plain CUDA reference kernel (the on-device oracle; slow). `auto`: cuDNN where its plan builds, "
              "else the reference kernel; which one runs is logged once per shape. The host backend has one "
              "attention kernel (tiled flash attention): there the setting has no effect, and the run header "
              "says so.",
      .maps_to = "transformers `attn_implementation` (\"sdpa\" / \"eager\")",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{.name = "KIND", .kind = ValueKind::choice,
                                           .help = "attention implementation on CUDA",
                                           .choices = choices_of<AttentionBackend>({"", "\"sdpa\"", "\"eager\""}),
                                           .set = [](RunConfig& c, const Value& v) {
                                             c.attention_backend = v.as<AttentionBackend>();
                                           },
                                           .default_of = [](const RunConfig& c) { return word_text(c.attention_backend); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.attention_backend_where = p.where; }}},
      .example = "attention_backend auto",
  });

  table.push_back(Command{
      .name = "device_comm",
      .help = "How ranks exchange device (GPU) buffers. `nccl`: NCCL on the context's communication stream, "
              "one GPU per rank (NCCL refuses two ranks on one GPU: more ranks than GPUs on a node stops the "
              "run naming the counts). `mpi`: the staged communicator: device buffers are copied to host "
              "memory, moved with MPI and copied back, so several ranks may share a GPU (tests on one GPU; "
              "slower). Never chosen silently: the run header names the communicator. On the host backend "
              "collectives are MPI on host buffers and the setting has no effect (the header says so).",
      .maps_to = "`torch.distributed` backend \"nccl\" / \"gloo\"",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{.name = "KIND", .kind = ValueKind::choice,
                                           .help = "device communicator",
                                           .choices = choices_of<DeviceComm>({"backend=\"nccl\"", "backend=\"gloo\""}),
                                           .set = [](RunConfig& c, const Value& v) { c.device_comm = v.as<DeviceComm>(); },
                                           .default_of = [](const RunConfig& c) { return word_text(c.device_comm); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.device_comm_where = p.where; }}},
      .example = "device_comm nccl",
  });

  table.push_back(Command{
      .name = "collective_timeout",
      .help = "How long one collective may take before the job is ended. A collective (or a blocking "
              "reduction) not complete within it aborts every rank (MPI_Abort; ncclCommAbort first on NCCL) "
              "with a message naming the rank, the collective and the FSDP unit it was issued for: a rank "
              "that stopped calling collectives or a hung network ends the job instead of holding the "
              "allocation. Default 10 minutes. Set it well above the slowest step's communication (a "
              "checkpoint written between collectives does not count: only a collective in flight is "
              "timed). A rank that dies is detected by mpirun regardless.",
      .maps_to = "`init_process_group(timeout=...)`",
      .forms = {Form{.word = "minutes",
                     .help = "the timeout in minutes",
                     .positionals = {Param{.name = "X", .kind = ValueKind::positive_number,
                                           .help = "minutes",
                                           .set = [](RunConfig& c, const Value& v) {
                                             c.collective_timeout_seconds = v.number * 60;
                                           },
                                           .default_of = [](const RunConfig& c) {
                                             return format_number(c.collective_timeout_seconds / 60);
                                           }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.collective_timeout_where = p.where; }},
                Form{.word = "seconds",
                     .help = "the timeout in seconds",
                     .positionals = {Param{.name = "X", .kind = ValueKind::positive_number,
                                           .help = "seconds",
                                           .set = [](RunConfig& c, const Value& v) {
                                             c.collective_timeout_seconds = v.number;
                                           },
                                           .default_of = [](const RunConfig& c) {
                                             return format_number(c.collective_timeout_seconds);
                                           }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.collective_timeout_where = p.where; }}},
      .example = "collective_timeout minutes 10",
  });

  table.push_back(Command{
      .name = "host_streams",
      .help = "How the host backend runs its compute and communication streams. `sync`: ops run inline "
              "on the rank's thread (the default; fastest on the CPU). `async`: each stream runs on a worker "
              "thread of its own and events are real completion points, as on a GPU, so the FSDP engine's "
              "ordering (event waits, prefetch, reduce-scatter overlap, stream-ordered buffer release) is "
              "exercised: results are the same bit for bit. Without this line the environment variable "
              "FTRAIN_HOST_STREAM=sync|async decides; the line wins over it, and the run header says which "
              "mode runs and what chose it. No effect on the CUDA backend.",
      .maps_to = "(none: CUDA streams are always asynchronous)",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{.name = "MODE", .kind = ValueKind::choice,
                                           .help = "stream mode on the host",
                                           .choices = choices_of<HostStreams>({"", ""}),
                                           .set = [](RunConfig& c, const Value& v) { c.host_streams = v.as<HostStreams>(); },
                                           .default_of = [](const RunConfig& c) { return word_text(c.host_streams); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.host_streams_where = p.where; }}},
      .example = "host_streams async",
  });

  table.push_back(Command{
      .name = "fp8",
      .help = "The FP8 delayed-scaling recipe used under `precision fp8`: the linear layers inside "
              "the blocks quantise input, weight and output gradient with per-tensor scales from an "
              "amax history (scale = fp8_max / amax / 2^margin); embeddings, norms, attention and "
              "the head stay bf16. share/doc/fp8.md explains the recipe.",
      .maps_to = "Transformer Engine `DelayedScaling(fp8_format, amax_history_len, margin, amax_compute_algo)`",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {
              Param{.name = "format", .kind = ValueKind::choice,
                    .help = "FP8 formats: E4M3 forward and E5M2 gradients, or E4M3 for both",
                    .maps_to = "`fp8_format`",
                    .choices = choices_of<Fp8Format>({"Format.HYBRID", "Format.E4M3"}),
                    .set = [](RunConfig& c, const Value& v) { c.fp8.format = v.as<Fp8Format>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.fp8.format); }},
              Param{.name = "amax_history", .kind = ValueKind::positive_int,
                    .help = "iterations of amax remembered per tensor",
                    .maps_to = "`amax_history_len`",
                    .set = [](RunConfig& c, const Value& v) { c.fp8.amax_history = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.fp8.amax_history); }},
              Param{.name = "margin", .kind = ValueKind::non_negative_int,
                    .help = "headroom: the scale is divided by 2^margin",
                    .maps_to = "`margin`",
                    .set = [](RunConfig& c, const Value& v) { c.fp8.margin = static_cast<std::int64_t>(v.unsigned_integer); },
                    .default_of = [](const RunConfig& c) { return integer_text(c.fp8.margin); }},
              Param{.name = "amax_algo", .kind = ValueKind::choice,
                    .help = "amax from the history: its maximum, or the latest entry",
                    .maps_to = "`amax_compute_algo`",
                    .choices = choices_of<AmaxAlgo>({"\"max\"", "\"most_recent\""}),
                    .set = [](RunConfig& c, const Value& v) { c.fp8.amax_algo = v.as<AmaxAlgo>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.fp8.amax_algo); }},
              Param{.name = "all_gather", .kind = ValueKind::on_off,
                    .help = "full_shard / hybrid_shard: each rank casts its shard of the FP8 linear weights "
                            "with the layer's current weight scale and the all-gather moves FP8 bytes (half of "
                            "bf16's); the GEMMs use them as gathered. Same results as off (share/doc/fsdp.md); "
                            "the run header says whether it acts",
                    .maps_to = "torchao Float8 `enable_fsdp_float8_all_gather` (delayed scaling)",
                    .set = [](RunConfig& c, const Value& v) { c.fp8.all_gather = v.flag; },
                    .default_of = [](const RunConfig& c) { return on_off(c.fp8.all_gather); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            if (c.fp8.margin > 64) {
              FT_USER_ERROR() << p.where.str() << ": 'fp8' margin " << c.fp8.margin
                              << " is too large (the scale would be divided by 2^" << c.fp8.margin
                              << "); use 0 to a few";
            }
            c.fp8.where = p.where;
          }}},
      .example = "fp8 format hybrid amax_history 1024 margin 0 amax_algo max all_gather on",
  });

  table.push_back(Command{
      .name = "seed",
      .help = "Seed of every random stream (initialisation, data order, dropout).",
      .maps_to = "`TrainingArguments.seed` / Accelerate `set_seed`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "N", .kind = ValueKind::non_negative_int, .help = "seed",
                         .set = [](RunConfig& c, const Value& v) { c.seed = v.unsigned_integer; },
                         .default_of = [](const RunConfig& c) { return std::to_string(c.seed); }}}}},
      .example = "seed 42",
  });

  table.push_back(Command{
      .name = "data",
      .help = "Training data: a file of token ids (made by the data preparation scripts). A "
              "relative PATH is taken from the current directory.",
      .maps_to = "`train_dataset`",
      .forms = {Form{
          .word = "tokens",
          .help = "pre-tokenized token file",
          .positionals = {Param{.name = "PATH", .kind = ValueKind::existing_path,
                                .help = "token file",
                                .set = [](RunConfig& c, const Value& v) { c.data.path = v.text; }}},
          .keywords = {Param{.name = "packing", .kind = ValueKind::on_off,
                             .help = "pack documents into full seq_len windows",
                             .maps_to = "TRL `SFTConfig.packing`",
                             .set = [](RunConfig& c, const Value& v) { c.data.packing = v.flag; },
                             .default_of = [](const RunConfig& c) { return on_off(c.data.packing); }},
                       Param{.name = "document_mask", .kind = ValueKind::on_off,
                             .help = "on: attention in a packed window is causal and limited to each token's own "
                                     "document (needs packing on and a token file with a document index, as "
                                     "ftrain-prep writes for instruction data)",
                             .maps_to = "TRL `SFTConfig.padding_free`",
                             .set = [](RunConfig& c, const Value& v) { c.data.document_mask = v.flag; },
                             .default_of = [](const RunConfig& c) { return on_off(c.data.document_mask); }},
                       Param{.name = "positions", .kind = ValueKind::choice,
                             .help = "with document_mask on: `restart` gives each document RoPE positions from 0, "
                                     "as it has alone (and as Hugging Face's padding-free packing does); "
                                     "`continue` runs them on across the window (scores depend only on i - j, so "
                                     "they differ from the document alone by rounding only)",
                             .maps_to = "`position_ids` of `DataCollatorWithFlattening`",
                             .choices = choices_of<RopePositions>({"per-document position_ids", "arange(T)"}),
                             .set = [](RunConfig& c, const Value& v) { c.data.positions = v.as<RopePositions>(); },
                             .default_of = [](const RunConfig& c) { return word_text(c.data.positions); }},
                       data_shuffle_param(),
                       Param{.name = "allow_untrained_steps", .kind = ValueKind::on_off,
                             .help = "off: a step with no trained target token (instruction data whose "
                                     "responses seq_len cuts off entirely) stops the run naming the step; on: "
                                     "such a step runs with zero loss and only weight decay changes the weights",
                             .set = [](RunConfig& c, const Value& v) { c.data.allow_untrained_steps = v.flag; },
                             .default_of = [](const RunConfig& c) { return on_off(c.data.allow_untrained_steps); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            if (p.find("positions") != nullptr && !c.data.document_mask)
              FT_USER_ERROR() << p.where.str() << ": 'positions' is only meaningful with 'document_mask on' (without "
                              << "the mask a window's positions run 0..seq_len-1 across it)";
            c.data.kind = DataKind::tokens;
            c.data.where = p.where;
          }},
                Form{
          .word = "images synthetic",
          .help = "seeded learnable synthetic images: a fixed random template per class plus noise "
                  "(shape from the model's image_size / num_channels)",
          .keywords = {Param{.name = "classes", .kind = ValueKind::positive_int,
                             .help = "number of classes",
                             .set = [](RunConfig& c, const Value& v) { c.data.images.classes = v.integer; },
                             .default_of = [](const RunConfig&) { return std::string("(the model's num_classes)"); }},
                       Param{.name = "samples", .kind = ValueKind::positive_int,
                             .help = "number of distinct images (an epoch)",
                             .set = [](RunConfig& c, const Value& v) { c.data.images.samples = v.integer; },
                             .default_of = [](const RunConfig& c) { return integer_text(c.data.images.samples); }},
                       Param{.name = "noise", .kind = ValueKind::non_negative_number,
                             .help = "noise standard deviation (the class template has std 0.5)",
                             .set = [](RunConfig& c, const Value& v) { c.data.images.noise = v.number; },
                             .default_of = [](const RunConfig& c) { return format_number(c.data.images.noise); }},
                       data_shuffle_param()},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.data.kind = DataKind::images;
            c.data.images.source = ImageSource::synthetic;
            c.data.path = "(synthetic)";
            c.data.where = p.where;
          }},
                Form{
          .word = "images hdf5",
          .help = "HDF5 file with `images` uint8 [N, H, W, C] and `labels` int [N]; pixels become "
                  "(u8/255 - mean) / std per channel",
          .positionals = {Param{.name = "PATH", .kind = ValueKind::existing_path,
                                .help = "HDF5 file",
                                .set = [](RunConfig& c, const Value& v) { c.data.path = v.text; }}},
          .keywords = {normalise_mean_param(), normalise_std_param(),
                       data_shuffle_param()},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.data.kind = DataKind::images;
            c.data.images.source = ImageSource::hdf5;
            apply_normalisation(c.data.images, p);
            c.data.where = p.where;
          }}},
      .example = "data tokens ${data_dir}/train.bin packing on",
  });

  table.push_back(Command{
      .name = "eval",
      .help = "Evaluation data and interval. Without this command there is no evaluation.",
      .maps_to = "`eval_dataset`, `eval_strategy=\"steps\"`",
      .forms = {Form{
          .word = "tokens",
          .help = "pre-tokenized token file",
          .positionals = {Param{.name = "PATH", .kind = ValueKind::existing_path,
                                .help = "token file",
                                .set = [](RunConfig& c, const Value& v) { c.eval.path = v.text; }}},
          .keywords = {eval_every_param()},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.eval.kind = DataKind::tokens;
            c.eval.where = p.where;
          }},
                Form{
          .word = "images synthetic",
          .help = "held-out images of the training data's synthetic task (same seed and classes)",
          .keywords = {eval_every_param(),
                       Param{.name = "samples", .kind = ValueKind::positive_int,
                             .help = "number of evaluation images",
                             .set = [](RunConfig& c, const Value& v) { c.eval.images.samples = v.integer; },
                             .default_of = [](const RunConfig& c) { return integer_text(c.eval.images.samples); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.eval.kind = DataKind::images;
            c.eval.images.source = ImageSource::synthetic;
            c.eval.path = "(synthetic)";
            c.eval.where = p.where;
          }},
                Form{
          .word = "images hdf5",
          .help = "HDF5 file as for `data images hdf5`, read in file order",
          .positionals = {Param{.name = "PATH", .kind = ValueKind::existing_path,
                                .help = "HDF5 file",
                                .set = [](RunConfig& c, const Value& v) { c.eval.path = v.text; }}},
          .keywords = {eval_every_param(),
                       normalise_mean_param(), normalise_std_param()},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            c.eval.kind = DataKind::images;
            c.eval.images.source = ImageSource::hdf5;
            apply_normalisation(c.eval.images, p);
            c.eval.where = p.where;
          }}},
      .example = "eval tokens val.bin every 100",
  });

  table.push_back(Command{
      .name = "batch",
      .help = "Batch shape. Tokens per optimizer step = micro x accumulate x seq_len x data-parallel ranks.",
      .maps_to = "",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {
              Param{.name = "micro", .kind = ValueKind::positive_int,
                    .help = "sequences per rank per micro-step",
                    .maps_to = "`per_device_train_batch_size`",
                    .required = true,
                    .set = [](RunConfig& c, const Value& v) { c.batch.micro_batch = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.batch.micro_batch); }},
              Param{.name = "accumulate", .kind = ValueKind::positive_int,
                    .help = "micro-steps per optimizer step",
                    .maps_to = "`gradient_accumulation_steps`",
                    .set = [](RunConfig& c, const Value& v) { c.batch.grad_accum = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.batch.grad_accum); }},
              Param{.name = "seq_len", .kind = ValueKind::positive_int,
                    .help = "tokens per sequence",
                    .maps_to = "`max_seq_length`",
                    .set = [](RunConfig& c, const Value& v) { c.batch.seq_len = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.batch.seq_len); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) { c.batch.where = p.where; }}},
      .example = "batch micro 4 accumulate 8 seq_len 2048",
  });

  table.push_back(Command{
      .name = "optimizer",
      .help = "The optimizer. AdamW with decoupled weight decay; state is sharded like the "
              "parameters.",
      .maps_to = "`optim=\"adamw_torch\"`",
      .forms = {Form{
          .word = "adamw",
          .help = "torch.optim.AdamW",
          .keywords = {
              Param{.name = "lr", .kind = ValueKind::positive_number, .help = "peak learning rate",
                    .maps_to = "`learning_rate` (HF default 5e-5, a fine-tuning rate; ftrain's 3e-4 is a "
                               "pre-training rate for small models)",
                    .set = [](RunConfig& c, const Value& v) { c.optimizer.lr = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.optimizer.lr); }},
              Param{.name = "beta1", .kind = ValueKind::fraction, .help = "first-moment decay",
                    .maps_to = "`adam_beta1`",
                    .set = [](RunConfig& c, const Value& v) { c.optimizer.beta1 = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.optimizer.beta1); }},
              Param{.name = "beta2", .kind = ValueKind::fraction, .help = "second-moment decay",
                    .maps_to = "`adam_beta2` (HF and torch default 0.999; ftrain's 0.95 is the LLM pre-training "
                               "value of Llama 2 and 3)",
                    .set = [](RunConfig& c, const Value& v) { c.optimizer.beta2 = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.optimizer.beta2); }},
              Param{.name = "eps", .kind = ValueKind::positive_number,
                    .help = "denominator epsilon", .maps_to = "`adam_epsilon`",
                    .set = [](RunConfig& c, const Value& v) { c.optimizer.eps = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.optimizer.eps); }},
              Param{.name = "weight_decay", .kind = ValueKind::non_negative_number,
                    .help = "decoupled weight decay", .maps_to = "`weight_decay`",
                    .set = [](RunConfig& c, const Value& v) { c.optimizer.weight_decay = v.number; },
                    .default_of = [](const RunConfig& c) {
                      return format_number(c.optimizer.weight_decay);
                    }}},
          .apply = [](RunConfig& c, const ParsedCommand&) { c.optimizer.name = OptimizerKind::adamw; }}},
      .example = "optimizer adamw lr 3e-4 weight_decay 0.1",
  });

  table.push_back(Command{
      .name = "schedule",
      .help = "Learning-rate schedule: linear warmup from 0 to lr, then constant, or linear / "
              "cosine decay to min_lr at max_steps. warmup_ratio, when given, replaces "
              "warmup_steps by round(ratio x max_steps); giving both is an error.",
      .maps_to = "`lr_scheduler_type` (HF default linear; ftrain's constant = no scheduler, as plain torch)",
      .forms = {Form{
          .word = "",
          .help = "",
          .positionals = {Param{.name = "KIND", .kind = ValueKind::choice, .help = "schedule shape",
                                .choices = choices_of<ScheduleKind>({"constant_with_warmup", "linear", "cosine_with_min_lr"}),
                                .set = [](RunConfig& c, const Value& v) { c.schedule.kind = v.as<ScheduleKind>(); },
                                .default_of = [](const RunConfig& c) { return word_text(c.schedule.kind); }}},
          .keywords = {
              Param{.name = "warmup_steps", .kind = ValueKind::non_negative_int,
                    .help = "optimizer steps of linear warmup", .maps_to = "`warmup_steps`",
                    .set = [](RunConfig& c, const Value& v) {
                      c.schedule.warmup_steps = v.integer;
                    },
                    .default_of = [](const RunConfig& c) {
                      return integer_text(c.schedule.warmup_steps);
                    }},
              Param{.name = "warmup_ratio", .kind = ValueKind::fraction,
                    .help = "warmup as a fraction of max_steps", .maps_to = "`warmup_ratio`",
                    .set = [](RunConfig& c, const Value& v) { c.schedule.warmup_ratio = v.number; },
                    .default_of = [](const RunConfig&) { return std::string("(unset)"); }},
              Param{.name = "min_lr", .kind = ValueKind::non_negative_number,
                    .help = "learning rate at the end of the decay (at most lr)",
                    .maps_to = "`lr_scheduler_kwargs={\"min_lr\": ...}`",
                    .set = [](RunConfig& c, const Value& v) { c.schedule.min_lr = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.schedule.min_lr); }}}}},
      .example = "schedule cosine warmup_steps 100 min_lr 3e-5",
  });

  table.push_back(Command{
      .name = "clip_grad_norm",
      .help = "Clip the global gradient norm (one reduction across all shards); 0 turns clipping off.",
      .maps_to = "`max_grad_norm` (HF default 1.0; ftrain's 0 = off, as plain torch: clipping is asked for)",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "X", .kind = ValueKind::non_negative_number, .help = "maximum norm",
                         .set = [](RunConfig& c, const Value& v) { c.clip_grad_norm = v.number; },
                         .default_of = [](const RunConfig& c) { return format_number(c.clip_grad_norm); }}}}},
      .example = "clip_grad_norm 1.0",
  });

  table.push_back(Command{
      .name = "max_steps",
      .help = "Number of optimizer steps to train.",
      .maps_to = "`max_steps`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "N", .kind = ValueKind::positive_int, .help = "optimizer steps",
                         .set = [](RunConfig& c, const Value& v) { c.max_steps = v.integer; }}}}},
      .required = true,
      .example = "max_steps 1000",
  });

  table.push_back(Command{
      .name = "init",
      .help = "Initial weights: random (normal with the given std; the plugin may scale output "
              "projections), a Hugging Face safetensors file/directory, or a consolidated HDF5 file "
              "(save_final); each rank reads only its own shard's slices.",
      .maps_to = "`initializer_range` / `from_pretrained`",
      .forms = {Form{.word = "random",
                     .help = "normal(0, std) initialisation",
                     .keywords = {Param{
                                      .name = "std", .kind = ValueKind::positive_number,
                                      .help = "standard deviation", .maps_to = "`initializer_range`",
                                      .set = [](RunConfig& c, const Value& v) { c.init.std = v.number; },
                                      .default_of = [](const RunConfig& c) { return format_number(c.init.std); }},
                                  Param{
                                      .name = "test_perturb_by_rank", .kind = ValueKind::positive_number,
                                      .help = "TEST ONLY, never for training: world rank r adds r x X x normal(0, 1) "
                                              "to the values it initialises locally, so ranks start from "
                                              "different initialisations (the regression tests use it to prove "
                                              "that sync_module_states makes every rank start from rank 0's)",
                                      .set = [](RunConfig& c, const Value& v) { c.init.test_perturb_by_rank = v.number; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) {
                       c.init.kind = InitKind::random;
                       c.init.where = p.where;
                     }},
                Form{.word = "safetensors",
                     .help = "load Hugging Face weights",
                     .positionals = {Param{
                         .name = "PATH", .kind = ValueKind::existing_path,
                         .help = "model.safetensors, or a directory with model.safetensors.index.json",
                         .set = [](RunConfig& c, const Value& v) { c.init.path = v.text; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) {
                       c.init.kind = InitKind::safetensors;
                       c.init.where = p.where;
                     }},
                Form{.word = "hdf5",
                     .help = "load a consolidated HDF5 state dict (what save_final writes)",
                     .positionals = {Param{
                         .name = "PATH", .kind = ValueKind::existing_path,
                         .help = "consolidated .h5 file, one dataset per parameter",
                         .set = [](RunConfig& c, const Value& v) { c.init.path = v.text; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) {
                       c.init.kind = InitKind::hdf5;
                       c.init.where = p.where;
                     }},
                Form{.word = "adapter",
                     .help = "LoRA only, beside the base's init line: start the adapters from a Hugging Face "
                             "PEFT adapter directory (adapter_config.json + adapter_model.safetensors; r, "
                             "lora_alpha, use_rslora and target_modules must match the lora line)",
                     .positionals = {Param{
                         .name = "DIR", .kind = ValueKind::existing_path,
                         .help = "what PeftModel.save_pretrained (or save_adapter) wrote",
                         .set = [](RunConfig& c, const Value& v) { c.lora.adapter_path = v.text; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.lora.adapter_where = p.where; }}},
      .example = "init random std 0.02",
  });

  table.push_back(Command{
      .name = "fsdp",
      .help = "Fully sharded data parallelism. Wrapping is always transformer-based: one FSDP "
              "unit per model block (embedding and head are units too).",
      .maps_to = "FSDP `sharding_strategy`; `auto_wrap_policy` = TRANSFORMER_BASED_WRAP",
      .forms = {Form{
          .word = "",
          .help = "",
          .positionals = {Param{.name = "STRATEGY", .kind = ValueKind::choice,
                                .help = "what is sharded",
                                .maps_to = "`ShardingStrategy`",
                                .choices = choices_of<ShardingStrategy>({"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"}),
                                .set = [](RunConfig& c, const Value& v) { c.fsdp.strategy = v.as<ShardingStrategy>(); },
                                .default_of = [](const RunConfig& c) { return word_text(c.fsdp.strategy); }}},
          .keywords = {
              Param{.name = "backward_prefetch", .kind = ValueKind::choice,
                    .help = "when to gather the next unit's parameters in backward",
                    .maps_to = "`BackwardPrefetch`",
                    .choices = choices_of<BackwardPrefetch>({"BACKWARD_PRE", "BACKWARD_POST", "None"}),
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.backward_prefetch = v.as<BackwardPrefetch>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.fsdp.backward_prefetch); }},
              Param{.name = "forward_prefetch", .kind = ValueKind::on_off,
                    .help = "gather the next unit during the current unit's forward",
                    .maps_to = "`forward_prefetch`",
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.forward_prefetch = v.flag; },
                    .default_of = [](const RunConfig& c) { return on_off(c.fsdp.forward_prefetch); }},
              Param{.name = "limit_all_gathers", .kind = ValueKind::positive_int,
                    .help = "most units gathered at once (bounds memory)",
                    .maps_to = "`limit_all_gathers` (True = 2)",
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.limit_all_gathers = v.integer; },
                    .default_of = [](const RunConfig& c) {
                      return integer_text(c.fsdp.limit_all_gathers);
                    }},
              Param{.name = "shard_group_size", .kind = ValueKind::positive_int,
                    .help = "ranks per shard group (hybrid_shard replicates across groups)",
                    .maps_to = "HYBRID_SHARD `device_mesh` inner size",
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.shard_group_size = v.integer; },
                    .default_of = [](const RunConfig&) {
                      return std::string("(ranks on one node)");
                    }},
              Param{.name = "param_dtype", .kind = ValueKind::choice,
                    .help = "dtype of gathered parameters",
                    .maps_to = "`MixedPrecision(param_dtype=...)`",
                    .choices = choices_of<CommDtype>({"torch.bfloat16", "torch.float32"}),
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.param_dtype = v.as<CommDtype>(); },
                    .default_of = [](const RunConfig&) { return std::string("(follows precision)"); }},
              Param{.name = "reduce_dtype", .kind = ValueKind::choice,
                    .help = "dtype of gradient reduce-scatter",
                    .maps_to = "`MixedPrecision(reduce_dtype=...)`",
                    .choices = choices_of<CommDtype>({"torch.bfloat16", "torch.float32"}),
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.reduce_dtype = v.as<CommDtype>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.fsdp.reduce_dtype); }},
              Param{.name = "sync_module_states", .kind = ValueKind::on_off,
                    .help = "broadcast rank 0's initial weights to all ranks",
                    .maps_to = "`sync_module_states`",
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.sync_module_states = v.flag; },
                    .default_of = [](const RunConfig& c) {
                      return on_off(c.fsdp.sync_module_states);
                    }},
              Param{.name = "no_sync", .kind = ValueKind::on_off,
                    .help = "gradient accumulation: reduce once per step, at the last micro-step, instead of at "
                            "every micro-step (keeps a full f32 gradient per unit; no_shard and shard_grad_op "
                            "only)",
                    .maps_to = "`model.no_sync()` around the non-final micro-steps (Accelerate's `accumulate`)",
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.no_sync = v.flag; },
                    .default_of = [](const RunConfig& c) { return on_off(c.fsdp.no_sync); }},
              Param{.name = "offload", .kind = ValueKind::choice,
                    .help = "ZeRO-Offload on a device backend: `optimizer` keeps the f32 master shard, its "
                            "gradient shard and the AdamW moments in host memory (AdamW runs on the CPU); `all` "
                            "the compute-dtype parameter shard too. No effect on the host backend (the run "
                            "header says so); --check --device-memory plans each setting (share/doc/fsdp.md "
                            "\"Offload\"); the host buffers are pinned on a GPU",
                    .maps_to = "PyTorch FSDP `CPUOffload(offload_params=...)`, FSDP2 `CPUOffloadPolicy`; DeepSpeed "
                               "`offload_optimizer` / `offload_param`",
                    .choices = choices_of<Offload>(
                        {"`CPUOffload(offload_params=False)`; DeepSpeed no offload",
                         "DeepSpeed `offload_optimizer: {device: cpu}` (PyTorch FSDP has no optimizer-only form)",
                         "`CPUOffload(offload_params=True)` / `CPUOffloadPolicy()`; DeepSpeed `offload_optimizer` + "
                         "`offload_param` `{device: cpu}`"}),
                    .set = [](RunConfig& c, const Value& v) { c.fsdp.offload = v.as<Offload>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.fsdp.offload); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) { c.fsdp.where = p.where; }}},
      .example = "fsdp full_shard backward_prefetch backward_pre limit_all_gathers 2",
  });

  table.push_back(Command{
      .name = "parallel",
      .help = "Model parallelism composed with FSDP: the world is data x context x tensor ranks, tensor "
              "innermost (consecutive ranks, so a node holds whole tensor groups), then context, then data. "
              "`tensor T` splits each block's matrices over T ranks (Megatron: q/k/v and gate/up by "
              "columns, o and down by rows; heads and KV heads divided by T); `context C` splits each "
              "sequence over C ranks with ring attention. The fsdp strategy shards each tensor rank's "
              "slice over the data x context ranks. --check plans any T and C (share/doc/parallelism.md).",
      .maps_to = "torchtitan `parallelism.tensor_parallel_degree` / `context_parallel_degree`; Megatron "
                 "`--tensor-model-parallel-size` / `--context-parallel-size`",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {
              Param{.name = "tensor", .kind = ValueKind::positive_int,
                    .help = "tensor-parallel ranks T (divides the heads, KV heads, intermediate size and "
                            "vocabulary)",
                    .maps_to = "`tensor_parallel_degree`",
                    .set = [](RunConfig& c, const Value& v) { c.parallel.tensor = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.parallel.tensor); }},
              Param{.name = "context", .kind = ValueKind::positive_int,
                    .help = "context-parallel ranks C (each holds 2 of the sequence's 2C chunks)",
                    .maps_to = "`context_parallel_degree`",
                    .set = [](RunConfig& c, const Value& v) { c.parallel.context = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.parallel.context); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) { c.parallel.where = p.where; }}},
      .example = "parallel tensor 8 context 1",
  });

  table.push_back(Command{
      .name = "activation_checkpointing",
      .help = "Recompute unit activations in backward instead of storing them: `on` for every "
              "unit, `every N` for every N-th block.",
      .maps_to = "FSDP `activation_checkpointing` / `gradient_checkpointing`",
      .forms = {Form{.word = "on", .help = "checkpoint every unit",
                     .apply = [](RunConfig& c, const ParsedCommand&) {
                       c.activation_checkpointing = ActivationCheckpointing::on;
                       c.activation_checkpointing_every = 1;
                     }},
                Form{.word = "off", .help = "store all activations (the default)",
                     .apply = [](RunConfig& c, const ParsedCommand&) {
                       c.activation_checkpointing = ActivationCheckpointing::off;
                       c.activation_checkpointing_every = 0;
                     }},
                Form{.word = "every", .help = "checkpoint every N-th block",
                     .positionals = {Param{.name = "N", .kind = ValueKind::positive_int,
                                           .help = "interval in blocks"}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) {
                       c.activation_checkpointing = ActivationCheckpointing::every;
                       c.activation_checkpointing_every = p.find("N")->integer;
                     }}},
      .example = "activation_checkpointing every 2",
  });

  table.push_back(Command{
      .name = "log",
      .help = "Progress line and metrics record interval (rank 0), and optional per-rank log files "
              "in run_dir.",
      .maps_to = "`logging_steps`",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {Param{.name = "every", .kind = ValueKind::positive_int,
                             .help = "log every N optimizer steps", .maps_to = "`logging_steps`",
                             .required = true,
                             .set = [](RunConfig& c, const Value& v) { c.log_every = v.integer; },
                             .default_of = [](const RunConfig& c) { return integer_text(c.log_every); }},
                       Param{.name = "rank_files", .kind = ValueKind::on_off,
                             .help = "one log file per rank",
                             .set = [](RunConfig& c, const Value& v) { c.per_rank_logs = v.flag; },
                             .default_of = [](const RunConfig& c) { return on_off(c.per_rank_logs); }}}}},
      .example = "log every 10",
  });

  table.push_back(Command{
      .name = "progress",
      .help = "The progress line that rank 0 redraws in place between log lines (`\\r`, `\\033[K`). "
              "`auto` draws it only for a person at a terminal: not under SLURM or PBS (SLURM_JOB_ID, "
              "PBS_JOBID), not when stdout is a file or pipe, and not when mpirun relays the output "
              "through a pseudo-terminal to a file. The environment variable FTRAIN_PROGRESS "
              "(auto|on|off) overrides the deck. The run header says which applied and why.",
      .maps_to = "`disable_tqdm`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "MODE", .kind = ValueKind::choice, .help = "when to draw the progress line",
                         .choices = choices_of<Progress>({"", "False", "True"}),
                         .set = [](RunConfig& c, const Value& v) { c.progress = v.as<Progress>(); },
                         .default_of = [](const RunConfig& c) { return word_text(c.progress); }}}}},
      .example = "progress off",
  });

  table.push_back(Command{
      .name = "run_dir",
      .help = "Directory for metrics.jsonl, logs and checkpoints (created if missing).",
      .maps_to = "`output_dir`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "PATH", .kind = ValueKind::path, .help = "output directory",
                         .set = [](RunConfig& c, const Value& v) { c.run_dir = v.text; },
                         .default_of = [](const RunConfig& c) { return c.run_dir; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.run_dir_where = p.where; }}},
      .example = "run_dir runs/${name}",
  });

  table.push_back(Command{
      .name = "peak_tflops",
      .help = "Peak dense TFLOP/s of one device at the compute precision, for the MFU column. Without it: "
              "FTRAIN_PEAK_TFLOPS from the environment, else the host benchmark recorded once per machine "
              "(FTRAIN_PEAK_FILE, default ~/.cache/ftrain/host_peak.json). The header names the source; a run "
              "faster than the peak prints MFU n/a and says the peak is wrong.",
      .maps_to = "",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "X", .kind = ValueKind::positive_number, .help = "TFLOP/s per device",
                         .set = [](RunConfig& c, const Value& v) { c.peak_tflops = v.number; },
                         .default_of = [](const RunConfig&) {
                           return std::string("(environment, else recorded benchmark)");
                         }}}}},
      .example = "peak_tflops 989",
  });

  table.push_back(Command{
      .name = "cross_entropy",
      .help = "Cross-entropy over the vocabulary in chunks, so the full logits matrix is never "
              "stored at once.",
      .maps_to = "",
      .forms = {Form{.word = "",
                     .help = "",
                     .keywords = {Param{
                         .name = "vocab_chunk", .kind = ValueKind::positive_int,
                         .help = "vocabulary entries per chunk", .required = true,
                         .set = [](RunConfig& c, const Value& v) { c.vocab_chunk = v.integer; },
                         .default_of = [](const RunConfig& c) { return integer_text(c.vocab_chunk); }}}}},
      .example = "cross_entropy vocab_chunk 4096",
  });

  table.push_back(Command{
      .name = "checkpoint",
      .help = "Sharded checkpoints: every N optimizer steps each rank writes its shard state "
              "(master weights, AdamW moments) to PATH/step_<N>/rank_<r>.h5; the step is committed "
              "atomically and PATH/latest names the newest. On SIGTERM/SIGUSR1 (preemption) or SIGINT the run "
              "finishes its step, checkpoints and exits 0. share/doc/checkpoints.md has the schema.",
      .maps_to = "`save_steps`, `output_dir` checkpoints, FSDP SHARDED_STATE_DICT",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {
              Param{.name = "every", .kind = ValueKind::positive_int,
                    .help = "checkpoint every N optimizer steps", .maps_to = "`save_steps`",
                    .required = true,
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.every = v.integer; }},
              Param{.name = "dir", .kind = ValueKind::path, .help = "checkpoint directory",
                    .required = true,
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.dir = v.text; }},
              Param{.name = "keep", .kind = ValueKind::positive_int,
                    .help = "keep the newest K checkpoints", .maps_to = "`save_total_limit`",
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.keep = v.integer; },
                    .default_of = [](const RunConfig&) { return std::string("(all)"); }},
              Param{.name = "stop_after", .kind = ValueKind::positive_int,
                    .help = "stop after optimizer step S as on preemption (checkpoint, exit 0); "
                            "the schedule still spans max_steps",
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.stop_after = v.integer; },
                    .default_of = [](const RunConfig&) { return std::string("(never)"); }},
              Param{.name = "consolidated", .kind = ValueKind::on_off,
                    .help = "also write step_<N>/model.h5, the full state dict (as save_final), in the same commit",
                    .maps_to = "FSDP FULL_STATE_DICT checkpoints",
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.consolidated = v.flag; },
                    .default_of = [](const RunConfig& c) { return on_off(c.checkpoint.consolidated); }},
              Param{.name = "async", .kind = ValueKind::on_off,
                    .help = "copy the shard state to a host buffer and write the rank files on a background "
                            "thread while training continues (one save in flight; the commit is unchanged; "
                            "needs host memory for one more copy of the shard state)",
                    .maps_to = "PyTorch DCP `async_save`",
                    .set = [](RunConfig& c, const Value& v) { c.checkpoint.async = v.flag; },
                    .default_of = [](const RunConfig& c) { return on_off(c.checkpoint.async); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) { c.checkpoint.where = p.where; }}},
      .example = "checkpoint every 500 dir runs/llama/ckpt keep 3",
  });

  table.push_back(Command{
      .name = "lora",
      .help = "LoRA fine-tuning: freeze the base model (no weight gradients, no optimizer state) and "
              "train low-rank adapters y += (alpha/r) B A dropout(x) on the targeted linears, "
              "A kaiming-uniform (or gaussian), B zero. Targets use PEFT's matching (a module whose "
              "name is or ends with .TARGET); Llama's linears are q_proj k_proj v_proj o_proj "
              "gate_proj up_proj down_proj, ViT's qkv proj fc1 fc2; all-linear takes all of them "
              "(never the output head). The line may be repeated; each sets what it names "
              "(e.g. `lora init gaussian` on its own line). share/doc/fsdp.md \"LoRA\".",
      .maps_to = "PEFT `LoraConfig(r, lora_alpha, lora_dropout, target_modules, init_lora_weights)`",
      .forms = {Form{
          .word = "",
          .help = "",
          .keywords = {
              Param{.name = "rank", .kind = ValueKind::positive_int, .help = "adapter rank r", .maps_to = "`r`",
                    .set = [](RunConfig& c, const Value& v) { c.lora.rank = v.integer; },
                    .default_of = [](const RunConfig& c) { return integer_text(c.lora.rank); }},
              Param{.name = "alpha", .kind = ValueKind::positive_number, .help = "scaling numerator: scale alpha / r",
                    .maps_to = "`lora_alpha`",
                    .set = [](RunConfig& c, const Value& v) { c.lora.alpha = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.lora.alpha); }},
              Param{.name = "dropout", .kind = ValueKind::fraction,
                    .help = "dropout on the adapter input (the run's seed; the same mask on any rank count)",
                    .maps_to = "`lora_dropout`",
                    .set = [](RunConfig& c, const Value& v) { c.lora.dropout = v.number; },
                    .default_of = [](const RunConfig& c) { return format_number(c.lora.dropout); }},
              Param{.name = "targets", .kind = ValueKind::text,
                    .help = "comma-separated module names, or all-linear", .maps_to = "`target_modules`",
                    .default_of = [](const RunConfig& c) { return lora_targets_text(c.lora); }},
              Param{.name = "init", .kind = ValueKind::choice, .help = "initialisation of A (B starts at zero)",
                    .maps_to = "`init_lora_weights`",
                    .choices = choices_of<LoraInit>({"True", "\"gaussian\""}),
                    .set = [](RunConfig& c, const Value& v) { c.lora.init = v.as<LoraInit>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.lora.init); }},
              Param{.name = "base_dtype", .kind = ValueKind::choice,
                    .help = "storage of the frozen base's shards: compute keeps them in the dtype they are "
                            "gathered in (fsdp param_dtype: bf16 under precision bf16, 2 bytes per parameter; "
                            "f32 under fp32); f32 keeps 4 bytes per parameter (a merge_adapter then adds the "
                            "adapters to f32 weights instead of bf16 ones). The forward and backward are the "
                            "same either way: they compute with the gathered copy",
                    .maps_to = "`from_pretrained(torch_dtype=...)` of the base model",
                    .choices = choices_of<LoraBaseDtype>({"the compute dtype", "torch.float32"}),
                    .set = [](RunConfig& c, const Value& v) { c.lora.base_dtype = v.as<LoraBaseDtype>(); },
                    .default_of = [](const RunConfig& c) { return word_text(c.lora.base_dtype); }}},
          .apply = [](RunConfig& c, const ParsedCommand& p) {
            if (!c.lora.enabled) c.lora.where = p.where;
            c.lora.enabled = true;
            if (const Value* targets = p.find("targets")) set_lora_targets(c.lora, targets->text, p.where);
          }}},
      .repeatable = true,
      .example = "lora rank 8 alpha 16 dropout 0.05 targets q_proj,v_proj",
  });

  table.push_back(Command{
      .name = "save_adapter",
      .help = "LoRA: at the end of training, write the adapters as Hugging Face PEFT writes them "
              "(DIR/adapter_model.safetensors with keys base_model.model.<module>.lora_A.weight, and "
              "DIR/adapter_config.json), loadable with PeftModel.from_pretrained. The adapters are "
              "gathered shard group by shard group; rank 0 writes.",
      .maps_to = "`PeftModel.save_pretrained(DIR)`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "DIR", .kind = ValueKind::path, .help = "output directory",
                         .set = [](RunConfig& c, const Value& v) { c.lora.save_adapter_path = v.text; }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.lora.save_adapter_where = p.where; }}},
      .example = "save_adapter runs/llama70b_lora/adapter",
  });

  table.push_back(Command{
      .name = "merge_adapter",
      .help = "LoRA: at the end of training (after save_adapter), fold the adapters into the base "
              "weights, W += scale B A (scale alpha/r, or alpha/sqrt(r) with rslora), so that save_final "
              "writes a plain model (no lora tensors) that ftrain-convert turns into safetensors.",
      .maps_to = "PEFT `merge_and_unload()`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "on|off", .kind = ValueKind::on_off, .help = "on or off",
                         .set = [](RunConfig& c, const Value& v) { c.lora.merge = v.flag; },
                         .default_of = [](const RunConfig& c) { return on_off(c.lora.merge); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.lora.merge_where = p.where; }}},
      .example = "merge_adapter on",
  });

  table.push_back(Command{
      .name = "rslora",
      .help = "Rank-stabilised LoRA: adapters scale by alpha / sqrt(r) instead of alpha / r.",
      .maps_to = "PEFT `LoraConfig(use_rslora=True)`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "on|off", .kind = ValueKind::on_off, .help = "on or off",
                         .set = [](RunConfig& c, const Value& v) { c.lora.rslora = v.flag; },
                         .default_of = [](const RunConfig& c) { return on_off(c.lora.rslora); }}}}},
      .example = "rslora on",
  });

  table.push_back(Command{
      .name = "save_final",
      .help = "At the end of training, write the full state dict as one HDF5 file: one f32 dataset "
              "per parameter in Hugging Face naming and shape, the model config as attributes. "
              "Written collectively with parallel HDF5; each rank writes only its own shard's slices.",
      .maps_to = "`save_model()` with FSDP FULL_STATE_DICT",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "PATH", .kind = ValueKind::path, .help = "output .h5 file",
                         .set = [](RunConfig& c, const Value& v) { c.save_final.path = v.text; }}},
                     .keywords = {Param{
                         .name = "dtype", .kind = ValueKind::choice,
                         .help = "stored type: f32, or bf16 (uint16 bfloat16 bits with attribute "
                                 "ftrain_dtype = \"bfloat16\"; init hdf5 reads both)",
                         .maps_to = "`torch_dtype` of the saved state dict",
                         .choices = choices_of<SavedDtype>({"torch.float32", "torch.bfloat16"}),
                         .set = [](RunConfig& c, const Value& v) { c.save_final.dtype = v.as<SavedDtype>(); },
                         .default_of = [](const RunConfig& c) { return word_text(c.save_final.dtype); }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.save_final.where = p.where; }}},
      .example = "save_final runs/llama/model.h5 dtype bf16",
  });

  table.push_back(Command{
      .name = "resume",
      .help = "Continue from a sharded checkpoint: `auto` takes the checkpoint `latest` names in the "
              "checkpoint dir, falling back along its lineage past damaged ones (a fresh start when "
              "there is none; checkpoints.md), PATH a step_<N> directory. Any "
              "world size or fsdp strategy may resume any checkpoint (shards are re-partitioned).",
      .maps_to = "`resume_from_checkpoint`",
      .forms = {Form{.word = "",
                     .help = "",
                     .positionals = {Param{
                         .name = "FROM", .kind = ValueKind::path,
                         .help = "auto, or a checkpoint step directory",
                         .set = [](RunConfig& c, const Value& v) {
                           c.resume.from = v.text;
                           c.resume.automatic = v.text == "auto";
                         }}},
                     .apply = [](RunConfig& c, const ParsedCommand& p) { c.resume.where = p.where; }}},
      .example = "resume auto",
  });

  return table;
}

// ---- value conversion -----------------------------------------------------------

std::string_view skip_plus(std::string_view word) {
  // from_chars rejects a leading '+'; decks may reasonably write "+1e-3".
  if (word.size() > 1 && word[0] == '+' && word[1] != '-' && word[1] != '+') word.remove_prefix(1);
  return word;
}

template <class Int>
std::errc parse_integer(std::string_view word, Int& out) {
  word = skip_plus(word);
  const char* end = word.data() + word.size();
  const auto result = std::from_chars(word.data(), end, out);
  if (result.ec != std::errc{}) return result.ec;
  return result.ptr == end ? std::errc{} : std::errc::invalid_argument;
}

std::errc parse_double(std::string_view word, double& out) {
  word = skip_plus(word);
  const char* end = word.data() + word.size();
  const auto result = std::from_chars(word.data(), end, out, std::chars_format::general);
  if (result.ec != std::errc{}) return result.ec;
  if (result.ptr != end) return std::errc::invalid_argument;
  if (!std::isfinite(out)) return std::errc::invalid_argument;  // inf, nan
  return std::errc{};
}

std::string choice_list(const Param& param) {
  std::string out;
  for (const Choice& c : param.choices) {
    if (!out.empty()) out += '|';
    out += c.word;
  }
  return out;
}

std::vector<std::string_view> choice_words(const Param& param) {
  std::vector<std::string_view> out;
  for (const Choice& c : param.choices) out.push_back(c.word);
  return out;
}

std::string label_of(const Command& command, const Form& form) {
  std::string label(command.name);
  if (!form.word.empty()) label += " " + std::string(form.word);
  return label;
}

[[noreturn]] void fail_value(const DeckLocation& where, std::string_view label, const Param& param,
                             std::string_view word, std::string_view why = {}) {
  std::string message = "'" + std::string(label) + "' expects " + describe_kind(param) + ", got " +
                        quote_word(word);
  if (!why.empty()) message += " (" + std::string(why) + ")";
  fail_at(where, message);
}

Value convert(const Param& param, const std::string& word, std::string_view label,
              const DeckLocation& where) {
  Value value;
  value.text = word;
  auto integer_error = [&](std::errc ec) {
    fail_value(where, label, param, word, ec == std::errc::result_out_of_range ? "out of range" : "");
  };
  switch (param.kind) {
    case ValueKind::positive_int: {
      const std::errc ec = parse_integer(word, value.integer);
      if (ec != std::errc{}) integer_error(ec);
      if (value.integer < 1) fail_value(where, label, param, word);
      break;
    }
    case ValueKind::non_negative_int: {
      if (!word.empty() && word[0] == '-') fail_value(where, label, param, word);
      const std::errc ec = parse_integer(word, value.unsigned_integer);
      if (ec != std::errc{}) integer_error(ec);
      // Keep the signed copy usable for counts; seeds use the unsigned one.
      value.integer = value.unsigned_integer > static_cast<std::uint64_t>(
                                                    std::numeric_limits<std::int64_t>::max())
                          ? std::numeric_limits<std::int64_t>::max()
                          : static_cast<std::int64_t>(value.unsigned_integer);
      break;
    }
    case ValueKind::positive_number:
    case ValueKind::non_negative_number:
    case ValueKind::fraction: {
      const std::errc ec = parse_double(word, value.number);
      if (ec != std::errc{}) integer_error(ec);
      const double x = value.number;
      const bool ok = param.kind == ValueKind::positive_number       ? x > 0.0
                      : param.kind == ValueKind::non_negative_number ? x >= 0.0
                                                                     : (x >= 0.0 && x < 1.0);
      if (!ok) fail_value(where, label, param, word);
      break;
    }
    case ValueKind::choice: {
      bool found = false;
      for (const Choice& c : param.choices) {
        if (c.word != word) continue;
        found = true;
        value.choice = c.value;
      }
      if (!found) {
        fail_at(where, "'" + std::string(label) + "' expects " + describe_kind(param) + ", got " +
                           quote_word(word) + did_you_mean(word, choice_words(param)));
      }
      break;
    }
    case ValueKind::on_off: {
      if (word != "on" && word != "off") {
        fail_at(where, "'" + std::string(label) + "' expects on or off, got " + quote_word(word) +
                           did_you_mean(word, {"on", "off"}));
      }
      value.flag = word == "on";
      break;
    }
    case ValueKind::existing_path:  // whether it exists: parse_command, which collects every missing one
    case ValueKind::path:
      if (word.empty()) fail_value(where, label, param, word);
      break;
    case ValueKind::name:
      if (!is_variable_name(word)) fail_value(where, label, param, word);
      break;
    case ValueKind::text:
      break;
  }
  return value;
}

// A path that must exist and does not is not a parse error: the parse goes
// on, so `ftrain --check` names every missing file of a deck at once.
void note_missing_path(const Param& param, const std::string& word, std::string_view label, ParsedCommand& parsed) {
  if (param.kind != ValueKind::existing_path) return;
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::path(word), ec)) return;
  parsed.missing_paths.push_back(parsed.where.str() + ": file " + quote_word(word) + " given to '" +
                                 std::string(label) +
                                 "' does not exist (a relative path starts from the current directory)");
}

}  // namespace

// ---- public helpers ---------------------------------------------------------------

const Value* ParsedCommand::find(std::string_view param_name) const {
  for (const auto& [param, value] : values) {
    if (param->name == param_name) return &value;
  }
  return nullptr;
}

std::string lora_targets_text(const LoraSection& lora) {
  if (lora.all_linear) return "all-linear";
  std::string out;
  for (const std::string& t : lora.targets) out += (out.empty() ? "" : ",") + t;
  return out;
}

const std::vector<Command>& command_table() {
  static const std::vector<Command> table = build_table();
  return table;
}

const Command* find_command(std::string_view name) {
  for (const Command& command : command_table()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

std::vector<std::string_view> command_names() {
  std::vector<std::string_view> names;
  for (const Command& command : command_table()) names.push_back(command.name);
  return names;
}

std::string describe_kind(const Param& param) {
  switch (param.kind) {
    case ValueKind::positive_int: return "a positive integer";
    case ValueKind::non_negative_int: return "a non-negative integer";
    case ValueKind::positive_number: return "a positive number";
    case ValueKind::non_negative_number: return "a non-negative number";
    case ValueKind::fraction: return "a number in [0, 1)";
    case ValueKind::choice: return "one of " + choice_list(param);
    case ValueKind::on_off: return "on or off";
    case ValueKind::existing_path: return "the path of an existing file";
    case ValueKind::path: return "a non-empty path";
    case ValueKind::name: return "a name (letters, digits and '_', not starting with a digit)";
    case ValueKind::text: return "a value";
  }
  return "a value";
}

std::string value_placeholder(const Param& param) {
  switch (param.kind) {
    case ValueKind::positive_int:
    case ValueKind::non_negative_int: return "N";
    case ValueKind::positive_number:
    case ValueKind::non_negative_number:
    case ValueKind::fraction: return "X";
    case ValueKind::choice: return choice_list(param);
    case ValueKind::on_off: return "on|off";
    case ValueKind::existing_path:
    case ValueKind::path: return "PATH";
    case ValueKind::name: return "NAME";
    case ValueKind::text: return "VALUE";
  }
  return "VALUE";
}

std::string synopsis(const Command& command, const Form& form) {
  std::string out(command.name);
  if (!form.word.empty()) out += " " + std::string(form.word);
  for (const Param& p : form.positionals) {
    out += " ";
    out += p.kind == ValueKind::choice ? choice_list(p) : std::string(p.name);
  }
  for (const Param& p : form.keywords) {
    const std::string pair = std::string(p.name) + " " + value_placeholder(p);
    out += p.required ? " " + pair : " [" + pair + "]";
  }
  if (form.passthrough_keywords) out += " [KEY VALUE]...";
  return out;
}

ParsedCommand parse_command(const Command& command, const std::vector<std::string>& words,
                            const DeckLocation& where) {
  ParsedCommand parsed;
  parsed.command = &command;
  parsed.where = where;
  std::size_t next = 1;

  // Pick the form.
  if (command.forms.size() == 1 && command.forms[0].word.empty()) {
    parsed.form = &command.forms[0];
  } else {
    std::vector<std::string_view> selectors;
    std::string expected;
    for (const Form& form : command.forms) {
      selectors.push_back(form.word);
      if (!expected.empty()) expected += '|';
      expected += form.word;
    }
    if (words.size() <= next) {
      fail_at(where, "'" + std::string(command.name) + "' expects " + expected + ", got nothing");
    }
    // A selector may be two words ("images synthetic"): they must all match.
    std::size_t selector_words = 1;
    for (const Form& form : command.forms) {
      std::string joined = words[next];
      std::size_t n = 1;
      for (std::size_t blank = 0; (blank = form.word.find(' ', blank)) != std::string_view::npos; ++blank) {
        if (next + n >= words.size()) break;
        joined += " " + words[next + n];
        ++n;
      }
      if (form.word == joined) {
        parsed.form = &form;
        selector_words = n;
      }
    }
    if (parsed.form == nullptr) {
      // Show the second word only when the first began a two-word selector.
      std::string shown = words[next];
      for (std::string_view selector : selectors) {
        const std::size_t blank = selector.find(' ');
        if (blank != std::string_view::npos && selector.substr(0, blank) == words[next] && next + 1 < words.size()) {
          shown += " " + words[next + 1];
          break;
        }
      }
      fail_at(where, "'" + std::string(command.name) + "' expects " + expected + ", got " + quote_word(shown) +
                         did_you_mean(shown, selectors));
    }
    next += selector_words;
  }
  const Form& form = *parsed.form;
  const std::string label = label_of(command, form);

  for (const Param& param : form.positionals) {
    if (words.size() <= next) {
      std::string shown = param.kind == ValueKind::choice ? choice_list(param) : std::string(param.name);
      fail_at(where, "'" + label + "' expects " + shown + " (" + describe_kind(param) +
                         "), got nothing");
    }
    parsed.values.emplace_back(&param, convert(param, words[next], label, where));
    note_missing_path(param, words[next], label, parsed);
    ++next;
  }

  std::vector<std::string_view> keyword_names;
  for (const Param& param : form.keywords) keyword_names.push_back(param.name);
  while (next < words.size()) {
    const std::string& keyword = words[next];
    const Param* param = nullptr;
    for (const Param& candidate : form.keywords) {
      if (candidate.name == keyword) param = &candidate;
    }
    if (param == nullptr && !form.passthrough_keywords) {
      if (form.keywords.empty()) {
        fail_at(where, "unexpected word " + quote_word(keyword) + " after '" +
                           std::string(words[next - 1]) + "': '" + label +
                           "' takes no further arguments");
      }
      std::string expected;
      for (std::string_view name : keyword_names) {
        if (!expected.empty()) expected += ", ";
        expected += name;
      }
      fail_at(where, "unknown keyword " + quote_word(keyword) + " for '" + label + "'" +
                         did_you_mean(keyword, keyword_names) + "; expected one of: " + expected);
    }
    const bool repeated =
        param != nullptr ? parsed.find(param->name) != nullptr
                         : std::any_of(parsed.extra.begin(), parsed.extra.end(),
                                       [&](const auto& kv) { return kv.first == keyword; });
    if (repeated) fail_at(where, "keyword " + quote_word(keyword) + " given twice");
    if (words.size() <= next + 1) {
      const std::string expects = param != nullptr ? describe_kind(*param) : "a value";
      fail_at(where, quote_word(keyword) + " expects " + expects + ", got nothing");
    }
    const std::string& word = words[next + 1];
    if (param != nullptr) {
      parsed.values.emplace_back(param, convert(*param, word, param->name, where));
      note_missing_path(*param, word, param->name, parsed);
    } else {
      if (!is_variable_name(keyword)) {
        fail_at(where, "'" + label + "' expects KEY VALUE pairs with KEY a name (letters, digits "
                       "and '_'), got " + quote_word(keyword));
      }
      parsed.extra.emplace_back(keyword, word);
    }
    next += 2;
  }

  for (const Param& param : form.keywords) {
    if (param.required && parsed.find(param.name) == nullptr) {
      fail_at(where, "'" + label + "' needs '" + std::string(param.name) + " " +
                         value_placeholder(param) + "' (" + describe_kind(param) + ")");
    }
  }
  return parsed;
}

void apply_command(const ParsedCommand& parsed, RunConfig& config) {
  for (const auto& [param, value] : parsed.values) {
    if (param->set != nullptr) param->set(config, value);
  }
  if (parsed.form->apply != nullptr) parsed.form->apply(config, parsed);
}

}  // namespace ftrain::deck
