#include "train/batch_sources.hpp"

#include <sstream>

#include "base/error.hpp"
#include "data/image_source.hpp"
#include "data/token_batch_source.hpp"

namespace ftrain {

void check_label_space(const RunConfig& c, DataRole role, std::int64_t label_space, const Model& model) {
  const std::int64_t outputs = model.output_size();
  if (label_space <= outputs) return;
  std::ostringstream m;
  m << (role == DataRole::evaluation ? c.eval.where : c.data.where).str() << ": the data has " << label_space
    << " token ids / classes but the model's output size is " << outputs;
  if (model.data_kind() == DataKind::tokens && model.config().count("vocab_size") != 0)
    m << "; set `vocab_size " << label_space << "` on the model line (" << c.model.where.str() << ")";
  FT_USER_ERROR() << m.str();
}

std::unique_ptr<data::BatchSource> make_batch_source(const RunConfig& c, DataRole role, std::int64_t global_batch,
                                                     Model& model) {
  const bool eval = role == DataRole::evaluation;
  const deck::DataKind kind = eval ? c.eval.kind : c.data.kind;
  const std::string& path = eval ? c.eval.path : c.data.path;
  const DeckLocation& where = eval ? c.eval.where : c.data.where;
  const bool shuffle = !eval && c.data.shuffle;  // evaluation always reads in file order
  if (kind == deck::DataKind::tokens) {
    if (model.data_kind() != DataKind::tokens)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' trains on images, not tokens";
    data::TokenDatasetOptions d;
    d.seq_len = c.batch.seq_len;
    d.global_batch = global_batch;
    d.packing = c.data.packing;
    d.document_mask = c.data.document_mask;
    d.restart_positions = c.data.positions == deck::RopePositions::restart;
    d.shuffle = shuffle;
    d.seed = c.seed;
    try {
      return std::make_unique<data::TokenBatchSource>(path, d);
    } catch (const UserError& e) {  // deck.md: data errors name the file and the deck line
      FT_USER_ERROR() << where.str() << ": " << e.what();
    }
  }
  if (kind == deck::DataKind::images) {
    if (model.data_kind() != DataKind::images)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' trains on tokens, not images";
    const std::vector<std::int64_t> image = model.image_shape();
    if (image.size() != 3)
      FT_USER_ERROR() << where.str() << ": model '" << c.model.name << "' does not report its image shape";
    const ImageDataSection& images = eval ? c.eval.images : c.data.images;
    data::ImageSourceOptions o;
    o.height = image[0];
    o.width = image[1];
    o.channels = image[2];
    o.global_batch = global_batch;
    o.shuffle = shuffle;
    o.seed = c.seed;
    o.eval = eval;
    // Evaluation images are held-out draws of the training task: same classes.
    o.classes = c.data.images.classes > 0 ? c.data.images.classes : model.output_size();
    o.samples = images.samples;
    o.noise = c.data.images.noise;
    o.mean = images.mean;
    o.std = images.std;
    try {
      if (images.source == deck::ImageSource::synthetic) {
        return std::make_unique<data::ImageBatchSource>(data::make_synthetic_images(o), o);
      }
      return std::make_unique<data::ImageBatchSource>(data::make_hdf5_images(path, o), o);
    } catch (const UserError& e) {
      FT_USER_ERROR() << where.str() << ": " << e.what();
    }
  }
  // Both kinds return above; the deck parser admits no other.
  FT_THROW() << where.str() << ": data kind " << static_cast<int>(kind) << " is not one the deck parser admits";
}

void report_example_truncation(const RunConfig& c, const data::TokenFile& file, std::vector<std::string>& warnings) {
  if (c.data.packing || !file.has_document_index()) return;
  const data::ExampleTruncation n = data::count_example_truncation(file, c.batch.seq_len);
  if (n.truncated == 0) return;
  std::ostringstream m;
  m << c.data.where.str() << ": " << n.truncated << " of " << n.examples << " examples in " << file.path()
    << " are longer than seq_len+1 = " << c.batch.seq_len + 1 << " tokens (the longest has " << n.longest_tokens
    << ") and packing off cuts them; " << n.untrained << " of them " << (n.untrained == 1 ? "loses" : "lose")
    << " every response token and train" << (n.untrained == 1 ? "s" : "") << " nothing (seq_len " << n.longest_tokens - 1
    << " keeps every example whole; packing on trains every response token)";
  if (n.untrained == n.examples && !c.data.allow_untrained_steps)
    FT_USER_ERROR() << m.str() << ". No step would train; `allow_untrained_steps on` on the data line runs it anyway";
  warnings.push_back(m.str());
}

std::int64_t count_targets(const Tensor& targets) {
  const auto* t = targets.data_as<std::int32_t>();
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < targets.numel(); ++i) n += t[i] != -100;
  return n;
}

}  // namespace ftrain
