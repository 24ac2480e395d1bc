#include "train/attention_flops.hpp"

#include "base/error.hpp"

namespace ftrain {

double document_attention_pairs(const Tensor& documents) {
  FT_CHECK(documents.defined() && documents.dtype() == DType::i32 && documents.ndim() == 2 &&
           documents.device() == Device::host)
      << "document_attention_pairs: documents " << documents.describe() << " must be host i32 [B, T]";
  const std::int64_t rows = documents.dim(0), time = documents.dim(1);
  const auto* ids = documents.data_as<std::int32_t>();
  double pairs = 0;
  for (std::int64_t b = 0; b < rows; ++b) {
    const std::int32_t* row = ids + b * time;
    std::int64_t begin = 0;
    for (std::int64_t t = 1; t <= time; ++t) {
      if (t < time && row[t] == row[begin]) continue;
      const auto length = static_cast<double>(t - begin);
      pairs += length * length;
      begin = t;
    }
  }
  return pairs;
}

double masked_step_flops(const Model& model, double planned_step_flops, std::int64_t windows, std::int64_t seq_len,
                         double attended_pairs) {
  const double full_pairs = static_cast<double>(windows) * static_cast<double>(seq_len) * static_cast<double>(seq_len);
  return planned_step_flops - model.attention_training_flops(full_pairs) +
         model.attention_training_flops(attended_pairs);
}

}  // namespace ftrain
