// The multi-tensor AdamW's plan (op_list.hpp: adamw_update_chunks): from the
// segments of a flat shard that the optimizer updates (each parameter
// tensor's piece in this rank's shard, with its weight-decay flag) to the
// chunk table both backends walk, as apex's multi_tensor_apply builds its
// chunk lists. Pure host code, so the table is tested without a device.
//
// Rules:
//  * segments are given in increasing offset order and do not overlap; gaps
//    between them (the flat's padding) belong to no chunk, so the kernels
//    never touch them;
//  * adjacent segments with the same flag are merged first (AdamW is
//    element-wise, so a merged range gets the same bits), then cut into
//    chunks of at most chunk_elements; a chunk never spans two flags or a gap;
//  * the table depends only on the flat's layout and the rank's shard: the
//    engine builds it once per flat and keeps it on the device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "core/tensor.hpp"
#include "kernels/math/adamw.hpp"

namespace ftrain {

struct AdamwSegment {
  std::int64_t offset = 0;  // first element in the flat shard
  std::int64_t count = 0;   // elements; an empty segment adds nothing
  bool weight_decay = true;
};

// The table's rows, row-major, math::kAdamwChunkColumns values each.
inline std::vector<std::int64_t> adamw_chunk_rows(const std::vector<AdamwSegment>& segments,
                                                  std::int64_t chunk_elements = math::kAdamwChunkElements) {
  FT_CHECK(chunk_elements >= 1) << "adamw_chunk_rows: chunk size " << chunk_elements << " must be >= 1";
  std::vector<AdamwSegment> merged;
  std::int64_t end_of_previous = 0;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const AdamwSegment& s = segments[i];
    FT_CHECK(s.offset >= 0 && s.count >= 0)
        << "adamw_chunk_rows: segment " << i << " {offset " << s.offset << ", count " << s.count
        << "} must have a non-negative offset and count";
    FT_CHECK(s.offset >= end_of_previous)
        << "adamw_chunk_rows: segment " << i << " starts at " << s.offset << ", before the end of the one before it ("
        << end_of_previous << "): segments must be in increasing order and must not overlap";
    if (s.count == 0) continue;
    end_of_previous = s.offset + s.count;
    if (!merged.empty() && merged.back().weight_decay == s.weight_decay &&
        merged.back().offset + merged.back().count == s.offset) {
      merged.back().count += s.count;
    } else {
      merged.push_back(s);
    }
  }
  std::vector<std::int64_t> rows;
  for (const AdamwSegment& s : merged)
    for (std::int64_t at = 0; at < s.count; at += chunk_elements) {
      rows.push_back(s.offset + at);
      rows.push_back(std::min(chunk_elements, s.count - at));
      rows.push_back(s.weight_decay ? 1 : 0);
    }
  return rows;
}

// The table as an i64 tensor [chunks, math::kAdamwChunkColumns] on `device`
// (copied there once); undefined when no segment holds an element (a shard
// of padding only: nothing to launch).
inline Tensor adamw_chunk_table(const std::vector<AdamwSegment>& segments, Device device, const std::string& name,
                                std::int64_t chunk_elements = math::kAdamwChunkElements) {
  const std::vector<std::int64_t> rows = adamw_chunk_rows(segments, chunk_elements);
  if (rows.empty()) return Tensor();
  const auto chunks = static_cast<std::int64_t>(rows.size()) / math::kAdamwChunkColumns;
  Tensor table = Tensor::empty({chunks, math::kAdamwChunkColumns}, DType::i64, Device::host, name);
  std::copy(rows.begin(), rows.end(), table.data_as<std::int64_t>());
  return device == Device::host ? table : to_device(table, device);
}

}  // namespace ftrain
