// FP8 all-gather of a unit's linear weights; see fp8_all_gather.hpp.
#include "fsdp/fp8_all_gather.hpp"

#include <algorithm>
#include <exception>

#include "base/error.hpp"
#include "fsdp/engine.hpp"
#include "kernels/ops.hpp"

namespace ftrain {

Fp8AllGatherDecision decide_fp8_all_gather(const FsdpOptions& o, int shard_group_size) {
  if (!o.fp8) return {false, "off (precision is not fp8)"};
  if (!o.fp8_all_gather) return {false, "off (fp8 all_gather off in the deck)"};
  if (o.strategy == ShardingStrategy::no_shard || o.strategy == ShardingStrategy::shard_grad_op)
    return {false, std::string("off (") + sharding_strategy_name(o.strategy) +
                       " keeps gathered units across steps' evaluations; full_shard and hybrid_shard only)"};
  if (shard_group_size <= 1) return {false, "off (one-rank shard group: nothing is gathered)"};
  return {true, "on (FP8 linear weights gathered as FP8 bytes)"};
}

namespace {

// Completes when both collectives did; an error of either is rethrown by
// wait(), after both finished (test() never throws: Request::Impl).
class BothRequests final : public Request::Impl {
 public:
  BothRequests(Request a, Request b) : a_(std::move(a)), b_(std::move(b)) {}
  void wait() override {
    finish(a_, a_error_);
    finish(b_, b_error_);
    if (a_error_) std::rethrow_exception(a_error_);
    if (b_error_) std::rethrow_exception(b_error_);
  }
  bool test() override { return poll(a_, a_error_) && poll(b_, b_error_); }
  // b was issued after a on the same communicator, whose collectives run in
  // issue order (communicator.hpp "Stream order"): b's end is both ends.
  Event completion() const override { return b_.completion(); }

 private:
  static void finish(Request& r, std::exception_ptr& error) {
    try {
      r.wait();
    } catch (...) {
      error = std::current_exception();
    }
  }
  static bool poll(Request& r, std::exception_ptr& error) {
    try {
      return r.test();
    } catch (...) {
      error = std::current_exception();  // complete, failed: wait() rethrows it
      return true;
    }
  }
  Request a_, b_;
  std::exception_ptr a_error_, b_error_;
};

}  // namespace

Fp8AllGather::Fp8AllGather(const FlatParameter& flat, std::vector<Weight> weights, int shard_group_size,
                           int shard_rank) {
  const auto& entries = flat.entries();
  fp8_state_.assign(entries.size(), nullptr);
  for (const Weight& w : weights) {
    FT_CHECK(w.entry >= 0 && static_cast<std::size_t>(w.entry) < entries.size() && w.state != nullptr)
        << "fp8 all-gather of unit " << flat.unit_name() << ": bad weight entry " << w.entry;
    FT_CHECK(fp8_state_[static_cast<std::size_t>(w.entry)] == nullptr)
        << "fp8 all-gather of unit " << flat.unit_name() << ": '" << entries[static_cast<std::size_t>(w.entry)].name
        << "' listed twice";
    fp8_state_[static_cast<std::size_t>(w.entry)] = w.state;
  }
  // Segment offsets: each entry's place among the elements of its kind, in
  // flat order (entries are consecutive in the flat buffer).
  segment_offset_.assign(entries.size(), 0);
  for (std::size_t e = 0; e < entries.size(); ++e) {
    FT_CHECK(e == 0 || entries[e].offset == entries[e - 1].offset + entries[e - 1].numel)
        << "fp8 all-gather: unit " << flat.unit_name() << " entries are not consecutive";
    std::int64_t& n = fp8_state_[e] ? fp8_numel_ : rest_numel_;
    segment_offset_[e] = n;
    n += entries[e].numel;
  }
  rest_numel_ += flat.padded_numel() - flat.numel();  // the padding travels with the rest
  // Per rank: its shard restricted to each segment (contiguous there).
  const std::int64_t shard = flat.shard_numel();
  for (int r = 0; r < shard_group_size; ++r) {
    const std::int64_t lo = r * shard, hi = lo + shard;
    std::int64_t fp8 = 0;
    for (std::size_t e = 0; e < entries.size(); ++e)
      if (fp8_state_[e]) fp8 += std::max<std::int64_t>(0, std::min(hi, entries[e].offset + entries[e].numel) -
                                                              std::max(lo, entries[e].offset));
    fp8_counts_.push_back(fp8);
    rest_counts_.push_back(shard - fp8);
  }
  // This rank's FP8 pieces, in flat order, and the rest as runs between them.
  std::int64_t fp8_sent = 0, rest_sent = 0, cursor = 0;
  flat.for_each_shard_piece([&](int e, std::int64_t /*first*/, std::int64_t count, std::int64_t at) {
    if (!fp8_state_[static_cast<std::size_t>(e)]) return;
    if (at > cursor) {
      runs_.push_back({cursor, at - cursor, rest_sent});
      rest_sent += at - cursor;
    }
    pieces_.push_back({e, at, count, fp8_sent});
    fp8_sent += count;
    cursor = at + count;
  });
  if (shard > cursor) {
    runs_.push_back({cursor, shard - cursor, rest_sent});
    rest_sent += shard - cursor;
  }
  FT_CHECK(fp8_sent == fp8_counts_[static_cast<std::size_t>(shard_rank)] &&
           rest_sent == rest_counts_[static_cast<std::size_t>(shard_rank)])
      << "fp8 all-gather of unit " << flat.unit_name() << ": rank " << shard_rank << " sends " << fp8_sent << " + "
      << rest_sent << " elements, its counts say " << fp8_counts_[static_cast<std::size_t>(shard_rank)] << " + "
      << rest_counts_[static_cast<std::size_t>(shard_rank)];
}

Request Fp8AllGather::start(ExecutionContext& exec, Communicator& comm, FlatParameter& flat, const Tensor& source,
                            DType param_dtype, DType fp8_dtype, bool record) const {
  FT_CHECK(comm.size() == static_cast<int>(fp8_counts_.size()))
      << "fp8 all-gather of unit " << flat.unit_name() << ": made for " << fp8_counts_.size()
      << " ranks, shard group has " << comm.size();
  FT_CHECK(source.numel() == flat.shard_numel() && source.device() == exec.device() &&
           (source.dtype() == DType::f32 || source.dtype() == param_dtype))
      << "fp8 all-gather of unit " << flat.unit_name() << ": source shard " << source.describe() << " is not "
      << flat.shard_numel() << " f32 or " << dtype_name(param_dtype) << " elements on " << device_name(exec.device());
  const Device device = exec.device();
  // The param-dtype shard: what the plain gather sends, so the FP8 bytes are
  // those the local cast of the gathered copy would make.
  Tensor shard = source;
  if (source.dtype() != param_dtype) {
    shard = Tensor::empty({flat.shard_numel()}, param_dtype, device, flat.unit_name() + ".gather_shard");
    ops::cast(exec, source, shard);
  }
  const int me = comm.rank();
  Tensor send_fp8 = Tensor::empty({fp8_counts_[static_cast<std::size_t>(me)]}, fp8_dtype, device,
                                  flat.unit_name() + ".gather_send_fp8");
  Tensor send_rest = Tensor::empty({rest_counts_[static_cast<std::size_t>(me)]}, param_dtype, device,
                                   flat.unit_name() + ".gather_send");
  for (const Piece& p : pieces_) {
    fp8::LinearState& state = *fp8_state_[static_cast<std::size_t>(p.entry)];
    // States made on the host before the first step (a resume) move to the
    // training device once, as layers::LinearLayers moves them.
    if (state.amax_history.device() != exec.device()) state = state.to(exec.device());
    Fp8Tensor q = state.operand(fp8::kWeight, send_fp8.view({p.count}, p.send_offset), record);
    ops::cast_to_fp8(exec, shard.view({p.count}, p.shard_offset), q);
  }
  for (const Run& r : runs_) {
    Tensor dst = send_rest.view({r.count}, r.send_offset);
    ops::cast(exec, shard.view({r.count}, r.shard_offset), dst);
  }
  flat.gathered_fp8 = Tensor::empty({fp8_numel_}, fp8_dtype, device, flat.unit_name() + ".gathered_fp8");
  flat.gathered = Tensor::empty({rest_numel_}, param_dtype, device, flat.unit_name() + ".gathered");
  flat.gather_send = send_rest;  // the lambdas of the collectives hold both sends too
  // The collectives read what the casts wrote: they start after this event.
  const Event cast_done = exec.compute().record();
  Request fp8_part = comm.all_gather_v(send_fp8, flat.gathered_fp8, fp8_counts_, cast_done);
  Request rest_part = comm.all_gather_v(send_rest, flat.gathered, rest_counts_, cast_done);
  return Request(std::make_unique<BothRequests>(std::move(fp8_part), std::move(rest_part)));
}

Tensor Fp8AllGather::gathered_view(const FlatParameter& flat, int entry) const {
  const FlatEntry& e = flat.entries()[static_cast<std::size_t>(entry)];
  const Tensor& segment = is_fp8(entry) ? flat.gathered_fp8 : flat.gathered;
  return segment.view(e.shape, segment_offset_[static_cast<std::size_t>(entry)], e.name);
}

}  // namespace ftrain
