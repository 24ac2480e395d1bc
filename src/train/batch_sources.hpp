// The run's data: the batch sources the deck's `data` (training) and `eval`
// commands name, checked against the model they feed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "data/batch_source.hpp"
#include "data/token_file.hpp"
#include "deck/config.hpp"
#include "plugin/model.hpp"

namespace ftrain {

enum class DataRole { training, evaluation };

// The data's id space against the model's outputs, with the fix spelled out
// (byte-token files have 257 ids: 256 bytes and the end-of-document id).
void check_label_space(const RunConfig& c, DataRole role, std::int64_t label_space, const Model& model);

// The data source the deck's `data` (training) or `eval` command names;
// errors name the deck line.
std::unique_ptr<data::BatchSource> make_batch_source(const RunConfig& c, DataRole role, std::int64_t global_batch,
                                                     Model& model);

// Packing off on instruction data (a document index): how many examples
// seq_len cuts, and how many it leaves without a trained token. A warning
// when any is cut; an error when no example trains at all, since every step
// would then be an untrained one (unless the deck allows those).
void report_example_truncation(const RunConfig& c, const data::TokenFile& file, std::vector<std::string>& warnings);

// The targets a loss is taken over (-100 marks an ignored one).
std::int64_t count_targets(const Tensor& targets);

}  // namespace ftrain
