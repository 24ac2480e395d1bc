// The deck's choice words and the enum values they stand for.
//
// Each choice enum lists its words once, in enum order (ChoiceWords<E>):
// the command table builds its choices from them (commands.cpp,
// choices_of), RunConfig stores the enum, and word() / operator<< give the
// word back for the run header and the generated reference. Code outside
// src/deck/ compares enum values, never words
// (tests/source_rules/deck_choices_are_enums.py fails otherwise).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace ftrain::deck {

enum class Precision : std::uint8_t { fp32, bf16, fp8 };
enum class DeviceKind : std::uint8_t { automatic, host, cuda };
enum class AttentionBackend : std::uint8_t { automatic, cudnn, reference };
enum class DeviceComm : std::uint8_t { nccl, mpi };
enum class HostStreams : std::uint8_t { sync, async };
enum class Progress : std::uint8_t { automatic, on, off };
enum class DataKind : std::uint8_t { tokens, images };
enum class RopePositions : std::uint8_t { restart, run_on };  // data ... positions
enum class ImageSource : std::uint8_t { none, synthetic, hdf5 };
enum class ScheduleKind : std::uint8_t { constant, linear, cosine };
enum class InitKind : std::uint8_t { random, safetensors, hdf5 };
enum class OptimizerKind : std::uint8_t { adamw };
enum class ShardingStrategy : std::uint8_t { full_shard, shard_grad_op, no_shard, hybrid_shard };
enum class BackwardPrefetch : std::uint8_t { backward_pre, backward_post, none };
enum class CommDtype : std::uint8_t { bf16, fp32 };  // fsdp param_dtype / reduce_dtype
enum class Offload : std::uint8_t { none, optimizer, all };  // fsdp offload
enum class SavedDtype : std::uint8_t { f32, bf16 };  // save_final dtype
enum class Fp8Format : std::uint8_t { hybrid, e4m3 };
enum class AmaxAlgo : std::uint8_t { max, most_recent };
enum class ActivationCheckpointing : std::uint8_t { off, on, every };
enum class LoraInit : std::uint8_t { kaiming, gaussian };
enum class LoraBaseDtype : std::uint8_t { compute, f32 };  // lora base_dtype

template <class E>
struct ChoiceWords;  // static constexpr std::array<std::string_view, N> words, in enum order

#define FTRAIN_DECK_CHOICE_WORDS(Enum, ...)                                   \
  template <>                                                                 \
  struct ChoiceWords<Enum> {                                                  \
    static constexpr std::string_view list[] = {__VA_ARGS__};                 \
    static constexpr std::size_t size = sizeof list / sizeof list[0];         \
  }

FTRAIN_DECK_CHOICE_WORDS(Precision, "fp32", "bf16", "fp8");
FTRAIN_DECK_CHOICE_WORDS(DeviceKind, "auto", "host", "cuda");
FTRAIN_DECK_CHOICE_WORDS(AttentionBackend, "auto", "cudnn", "reference");
FTRAIN_DECK_CHOICE_WORDS(DeviceComm, "nccl", "mpi");
FTRAIN_DECK_CHOICE_WORDS(HostStreams, "sync", "async");
FTRAIN_DECK_CHOICE_WORDS(Progress, "auto", "on", "off");
FTRAIN_DECK_CHOICE_WORDS(DataKind, "tokens", "images");
FTRAIN_DECK_CHOICE_WORDS(RopePositions, "restart", "continue");
FTRAIN_DECK_CHOICE_WORDS(ImageSource, "", "synthetic", "hdf5");
FTRAIN_DECK_CHOICE_WORDS(ScheduleKind, "constant", "linear", "cosine");
FTRAIN_DECK_CHOICE_WORDS(InitKind, "random", "safetensors", "hdf5");
FTRAIN_DECK_CHOICE_WORDS(OptimizerKind, "adamw");
FTRAIN_DECK_CHOICE_WORDS(ShardingStrategy, "full_shard", "shard_grad_op", "no_shard", "hybrid_shard");
FTRAIN_DECK_CHOICE_WORDS(BackwardPrefetch, "backward_pre", "backward_post", "none");
FTRAIN_DECK_CHOICE_WORDS(CommDtype, "bf16", "fp32");
FTRAIN_DECK_CHOICE_WORDS(Offload, "none", "optimizer", "all");
FTRAIN_DECK_CHOICE_WORDS(SavedDtype, "f32", "bf16");
FTRAIN_DECK_CHOICE_WORDS(Fp8Format, "hybrid", "e4m3");
FTRAIN_DECK_CHOICE_WORDS(AmaxAlgo, "max", "most_recent");
FTRAIN_DECK_CHOICE_WORDS(ActivationCheckpointing, "off", "on", "every");
FTRAIN_DECK_CHOICE_WORDS(LoraInit, "kaiming", "gaussian");
FTRAIN_DECK_CHOICE_WORDS(LoraBaseDtype, "compute", "f32");

#undef FTRAIN_DECK_CHOICE_WORDS

template <class E>
concept DeckChoice = requires { ChoiceWords<E>::size; };

// The deck word of a choice ("fp8" for Precision::fp8).
template <DeckChoice E>
constexpr std::string_view word(E value) {
  return ChoiceWords<E>::list[static_cast<std::size_t>(value)];
}

// Streams the deck word, so the run header reads as the deck does.
template <DeckChoice E>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << word(value);
}

}  // namespace ftrain::deck
