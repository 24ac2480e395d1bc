// ftrain: the executable. `mpirun -np N ftrain [options] DECK`.
//
// Order of things: MPI first, Kokkos second; finalised in
// reverse. Errors come in two phases:
//  * before training (command line, deck, plugin, data files, output
//    directories): every rank decides, ranks agree with one all-reduce, and
//    the lowest failing rank prints ONE message, then all exit 1. It takes
//    two agreements: reading the command line and the deck (no collective at
//    all), then Trainer::prepare(), which starts with a collective
//    (split_node) and so may only begin once every rank has read its deck:
//    a rank that failed to would otherwise sit in the agreement while the
//    others sit in split_node, two different collectives on one
//    communicator (MPI_ERR_TRUNCATE or a hang, and the message is lost);
//  * during training: a failing rank prints its message with its rank and
//    aborts the job (MPI_Abort), so no rank hangs in a collective.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "base/error.hpp"
#include "deck/parser.hpp"
#include "ftrain_build_paths.hpp"
#include "plugin/loader.hpp"
#include "train/gpu_models.hpp"
#include "train/plan_budget.hpp"
#include "train/plan_fit.hpp"
#include "train/trainer.hpp"

namespace {

constexpr const char* kUsage =
    "usage: ftrain [options] DECK\n"
    "       mpirun -np N ftrain [options] DECK\n"
    "\n"
    "Trains the model an input deck describes (see share/doc/deck.md).\n"
    "\n"
    "options:\n"
    "  -var NAME VALUE     set deck variable NAME (repeatable; overrides the deck and the environment)\n"
    "  --check             validate the deck, load the model plugin, print the plan, and exit\n"
    "    --ranks N           plan for N ranks without starting them (e.g. the cluster job, from a laptop)\n"
    "    --ranks-per-node M  ranks per node of that job (default: all N on one node, and --check says so)\n"
    "    --gpu NAME          plan for this GPU (memory and dense peak), no GPU needed: h100-80gb,\n"
    "                        h100-94gb (h100-nvl), h200-141gb, a100-80gb, a100-40gb\n"
    "    --device-memory S   memory of one target device, e.g. 80GB or 80GiB (overrides --gpu's):\n"
    "                        says whether the plan fits, activations and CUDA/NCCL allowance included,\n"
    "                        and which `fsdp ... offload` settings fit\n"
    "    --host-memory S     host memory of one node, e.g. 2TiB: checks the offloaded state against it\n"
    "    --job-script FILE   read the stop window from FILE (#SBATCH --signal=B:USR1@120, or a PBS\n"
    "                        script's FTRAIN_WARNING_S) and warn when a step plus a save do not fit it\n"
    "    --fs-bandwidth R    checkpoint write rate per node for the save time (default 2GB/s)\n"
    "    --mfu F             model FLOPs utilisation for the step time (default 0.4)\n"
    "  --list-models       list the model plugins found and their presets\n"
    "  --deck-reference    print the deck command reference (Markdown)\n"
    "  --version           print the version\n"
    "  -h, --help          print this help\n"
    "\n"
    "environment:\n"
    "  FTRAIN_PLUGIN_PATH  colon-separated directories searched first for model plugins\n"
    "  FTRAIN_PROGRESS     auto|on|off: the in-place progress line (overrides the deck's `progress`)\n"
    "  FTRAIN_PEAK_TFLOPS  peak TFLOP/s per device for MFU (the deck's peak_tflops wins)\n"
    "  FTRAIN_PEAK_FILE    where the host benchmark is recorded (default ~/.cache/ftrain/host_peak.json)\n"
    "\n"
    "stopping: SIGINT (Ctrl-C), SIGTERM or SIGUSR1 finish the step, checkpoint and exit 0; under\n"
    "Open MPI's mpirun send SIGUSR1 to mpirun (its Ctrl-C kills the ranks). The header says how.\n";

struct CommandLine {
  std::string deck;
  ftrain::DeckVariables vars;
  bool check = false, list_models = false, deck_reference = false, version = false, help = false;
  int ranks = 0, ranks_per_node = 0;  // --check --ranks N [--ranks-per-node M]
  std::string device_memory;          // --check --device-memory 80GB
  std::string host_memory;            // --check --host-memory 2TiB
  std::string gpu, fs_bandwidth, mfu, job_script;  // --check --gpu h100-80gb --fs-bandwidth 5GB/s --mfu 0.35 --job-script F
};

std::string text_option(int argc, char** argv, int i, const char* example) {
  if (i + 1 >= argc) FT_USER_ERROR() << "command line: " << argv[i] << " needs a value, e.g. " << example;
  return argv[i + 1];
}

double parse_mfu(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0 && v <= 1))
    FT_USER_ERROR() << "command line: --mfu expects a fraction in (0, 1], e.g. 0.4, got '" << text << "'";
  return v;
}

int positive_option(int argc, char** argv, int i) {
  const std::string a = argv[i];
  if (i + 1 >= argc) FT_USER_ERROR() << "command line: " << a << " needs a number";
  const std::string v = argv[i + 1];
  std::size_t used = 0;
  long n = 0;
  try {
    n = std::stol(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < 1 || n > 1 << 20)
    FT_USER_ERROR() << "command line: " << a << " expects a positive number of ranks, got '" << v << "'";
  return static_cast<int>(n);
}

CommandLine parse_command_line(int argc, char** argv) {
  CommandLine cl;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--kokkos-", 0) == 0) continue;  // handled by Kokkos::initialize
    if (a == "-var" || a == "--var") {
      if (i + 2 >= argc) FT_USER_ERROR() << "command line: " << a << " needs NAME VALUE";
      cl.vars.emplace_back(argv[i + 1], argv[i + 2]);
      i += 2;
    } else if (a == "--check") {
      cl.check = true;
    } else if (a == "--ranks") {
      cl.ranks = positive_option(argc, argv, i++);
    } else if (a == "--ranks-per-node") {
      cl.ranks_per_node = positive_option(argc, argv, i++);
    } else if (a == "--device-memory") {
      if (i + 1 >= argc) FT_USER_ERROR() << "command line: --device-memory needs a size, e.g. 80GB";
      cl.device_memory = argv[++i];
    } else if (a == "--host-memory") {
      cl.host_memory = text_option(argc, argv, i++, "2TiB");
    } else if (a == "--gpu") {
      cl.gpu = text_option(argc, argv, i++, "h100-80gb");
    } else if (a == "--fs-bandwidth") {
      cl.fs_bandwidth = text_option(argc, argv, i++, "5GB/s");
    } else if (a == "--mfu") {
      cl.mfu = text_option(argc, argv, i++, "0.4");
    } else if (a == "--job-script") {
      cl.job_script = text_option(argc, argv, i++, "jobs/slurm/llama70b.sbatch");
    } else if (a == "--list-models") {
      cl.list_models = true;
    } else if (a == "--deck-reference") {
      cl.deck_reference = true;
    } else if (a == "--version") {
      cl.version = true;
    } else if (a == "-h" || a == "--help") {
      cl.help = true;
    } else if (!a.empty() && a[0] == '-') {
      FT_USER_ERROR() << "command line: unknown option '" << a << "' (see ftrain --help)";
    } else if (cl.deck.empty()) {
      cl.deck = a;
    } else {
      FT_USER_ERROR() << "command line: more than one deck given ('" << cl.deck << "' and '" << a << "')";
    }
  }
  if (!cl.check && (cl.ranks > 0 || cl.ranks_per_node > 0 || !cl.device_memory.empty() || !cl.gpu.empty() ||
                    !cl.host_memory.empty() || !cl.fs_bandwidth.empty() || !cl.mfu.empty() || !cl.job_script.empty()))
    FT_USER_ERROR() << "command line: --ranks, --ranks-per-node, --gpu, --device-memory, --host-memory, "
                       "--job-script, --fs-bandwidth and --mfu plan a run: use them with --check";
  if (!cl.host_memory.empty() && cl.device_memory.empty() && cl.gpu.empty())
    FT_USER_ERROR() << "command line: --host-memory checks the offload plan, which needs the device's memory: "
                       "give --device-memory S or --gpu NAME too";
  if (cl.ranks_per_node > 0 && cl.ranks == 0)
    FT_USER_ERROR() << "command line: --ranks-per-node needs --ranks N";
  if (!cl.help && !cl.version && !cl.list_models && !cl.deck_reference && cl.deck.empty())
    FT_USER_ERROR() << "command line: no input deck given (see ftrain --help)";
  return cl;
}

int list_models() {
  auto plugins = ftrain::PluginLoader().list_plugins();
  if (plugins.empty()) {
    std::cout << "no model plugins found in:";
    for (const auto& d : ftrain::default_plugin_search_path()) std::cout << " " << d;
    std::cout << "\n";
    return 1;
  }
  for (const auto& p : plugins) {
    if (!p.error.empty()) {
      std::cout << p.name << "  (unusable: " << p.error << ")\n";
      continue;
    }
    std::cout << p.name << "  " << p.description << "\n  presets:";
    for (const auto& preset : p.presets) std::cout << " " << preset;
    std::cout << "\n  " << p.path << "\n";
  }
  return 0;
}

// Phase-1 agreement: returns true if any rank failed; the lowest failing rank
// prints its message. Every rank must call it the same number of times.
bool any_rank_failed(const std::string& message, int rank, int size) {
  const int mine = message.empty() ? size : rank;
  int first = size;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == size) return false;
  if (rank == first) {
    std::cerr << ("ftrain: error: " + std::string(message) + "\n");
    if (size > 1 && rank != 0) std::cerr << "(reported by rank " << rank << ")\n";
  }
  return true;
}

// A failure during training: no agreement is possible any more (the other
// ranks may sit in a collective), so the failing rank reports and aborts the
// job. A failure that strikes every rank at once (a full checkpoint disk)
// would then print once per rank, interleaved. To have the lowest failing
// rank heard alone, rank r first gives the ranks below it a head start of
// 0.5 s x min(r, 8): a lower rank's MPI_Abort ends this process within it.
// A rank failing alone (the others wait for it in a collective) loses only
// that delay. SIGTERM, which the run loop catches to checkpoint on
// preemption, must kill again: it is how mpirun ends the ranks on an abort.
[[noreturn]] void report_and_abort(const std::string& message, int rank) {
  std::signal(SIGTERM, SIG_DFL);
  std::this_thread::sleep_for(std::chrono::milliseconds(500) * std::min(rank, 8));
  std::cerr << ("ftrain: error on rank " + std::to_string(rank) + ": " + std::string(message) + "\n") << std::flush;
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; the compiler cannot know
}

}  // namespace

int main(int argc, char** argv) {
  // SERIALIZED: the communicators' progress thread calls MPI while the main
  // thread computes, never both at once (comm/mpi_progress.hpp).
  int thread_level = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &thread_level);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // Kokkos sees only its own --kokkos-* arguments: it would otherwise answer
  // --help itself. ftrain in turn skips them.
  std::vector<char*> kokkos_argv{argv[0]};
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--kokkos-", 9) == 0) kokkos_argv.push_back(argv[i]);
  int kokkos_argc = static_cast<int>(kokkos_argv.size());
  Kokkos::initialize(kokkos_argc, kokkos_argv.data());
  int code = 0;
  {
    std::string failure;
    CommandLine cl;
    ftrain::RunConfig config;
    ftrain::MpiCommunicator world(MPI_COMM_WORLD);
    std::unique_ptr<ftrain::Trainer> trainer;
    auto attempt = [&failure](auto&& step) {
      try {
        step();
      } catch (const ftrain::UserError& e) {
        failure = e.what();
      } catch (const std::exception& e) {
        failure = std::string("internal error: ") + e.what();
      }
    };
    attempt([&] {
      cl = parse_command_line(argc, argv);
      if (!cl.help && !cl.version && !cl.list_models && !cl.deck_reference) {
        // Missing input files go to the trainer, which reports them with
        // every other problem it finds (--check: all of them in one pass).
        config = ftrain::parse_deck_file(cl.deck, cl.vars, ftrain::MissingPaths::defer);
        ftrain::TrainerOptions options;
        options.check_only = cl.check;
        options.plan_ranks = cl.ranks;
        options.plan_ranks_per_node = cl.ranks_per_node;
        if (!cl.gpu.empty()) {
          options.plan_gpu = cl.gpu;
          options.device_memory_bytes = ftrain::find_gpu_model(cl.gpu).memory_bytes;
        }
        if (!cl.device_memory.empty())
          options.device_memory_bytes = ftrain::parse_memory_size(cl.device_memory, "--device-memory");
        if (!cl.host_memory.empty())
          options.host_memory_bytes = ftrain::parse_memory_size(cl.host_memory, "--host-memory");
        if (!cl.fs_bandwidth.empty())
          options.fs_bandwidth_bytes_per_s = ftrain::parse_bandwidth(cl.fs_bandwidth, "--fs-bandwidth");
        if (!cl.mfu.empty()) options.plan_mfu = parse_mfu(cl.mfu);
        options.job_script = cl.job_script;
        trainer = std::make_unique<ftrain::Trainer>(config, world, options);
      }
    });
    bool failed = any_rank_failed(failure, rank, size);
    if (!failed && trainer) {
      attempt([&] { trainer->prepare(); });
      failed = any_rank_failed(failure, rank, size);
    }
    if (failed) {
      code = 1;
    } else if (cl.help) {
      if (rank == 0) std::cout << kUsage;
    } else if (cl.version) {
      if (rank == 0) std::cout << "ftrain " << FTRAIN_VERSION_STRING << " (plugin ABI " << FTRAIN_PLUGIN_ABI_VERSION << ")\n";
    } else if (cl.deck_reference) {
      if (rank == 0) std::cout << ftrain::deck_reference_markdown();
    } else if (cl.list_models) {
      code = rank == 0 ? list_models() : 0;
    } else {
      try {
        code = trainer->run();
      } catch (const std::exception& e) {
        report_and_abort(e.what(), rank);
      }
    }
  }
  Kokkos::finalize();
  MPI_Finalize();
  return code;
}
