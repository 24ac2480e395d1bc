// MFU under the document mask: the (query, key) pairs a packed window's
// documents need, and a step's FLOPs with only those counted
// (train/attention_flops.hpp), against numbers worked out by hand.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "base/error.hpp"
#include "train/attention_flops.hpp"

using namespace ftrain;

namespace {

Tensor ids(const Shape& shape, const std::vector<std::int32_t>& values) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.data_as<std::int32_t>());
  return t;
}

// A model whose counts are easy to follow: 1000 FLOPs per token of matmuls
// and 10 per attended (query, key) pair.
class CountingModel final : public Model {
 public:
  std::string architecture() const override { return "counting"; }
  std::map<std::string, std::string> config() const override { return {}; }
  DataKind data_kind() const override { return DataKind::tokens; }
  int num_units() const override { return 0; }
  Unit& unit(int) override { throw std::logic_error("no units"); }
  double training_flops_per_sample(std::int64_t t) const override {
    return 1000.0 * static_cast<double>(t) + attention_training_flops(static_cast<double>(t * t));
  }
  double attention_training_flops(double pairs) const override { return 10.0 * pairs; }
  std::int64_t output_size() const override { return 2; }
};

}  // namespace

TEST(AttentionFlops, PairsAreTheSumOfSquaredDocumentLengths) {
  // Row 0: documents of 3, 2 and 3 tokens: 9 + 4 + 9 = 22. Row 1: one
  // document of 8 (no mask's count, 64). Row 2: 1 + 1 + 6^2 = 38.
  const Tensor documents = ids({3, 8}, {0, 0, 0, 1, 1, 2, 2, 2,  //
                                        0, 0, 0, 0, 0, 0, 0, 0,  //
                                        0, 1, 2, 2, 2, 2, 2, 2});
  EXPECT_EQ(document_attention_pairs(documents), 22.0 + 64.0 + 38.0);
  // 4 documents of 512 in a 2048-token window: a quarter of 2048^2.
  std::vector<std::int32_t> four(2048);
  for (std::size_t t = 0; t < four.size(); ++t) four[t] = static_cast<std::int32_t>(t / 512);
  EXPECT_EQ(document_attention_pairs(ids({1, 2048}, four)), 4.0 * 512 * 512);
  EXPECT_EQ(document_attention_pairs(ids({1, 2048}, four)), 2048.0 * 2048 / 4);
}

TEST(AttentionFlops, StepCountsOnlyTheAttendedPairs) {
  const CountingModel model;
  // 2 windows of 8: planned 2 * (8000 + 640) = 17280. Attending the 22 + 38
  // pairs of rows 0 and 2 above: 16000 matmul FLOPs + 600 = 16600.
  const double planned = 2 * model.training_flops_per_sample(8);
  EXPECT_EQ(planned, 17280.0);
  EXPECT_EQ(masked_step_flops(model, planned, 2, 8, 22.0 + 38.0), 16600.0);
  // Whole windows attended: the plan's count unchanged.
  EXPECT_EQ(masked_step_flops(model, planned, 2, 8, 2 * 64.0), planned);
}

TEST(AttentionFlops, RefusesWhatIsNotHostIds) {
  EXPECT_THROW(document_attention_pairs(Tensor::empty({2, 4}, DType::f32)), Error);
  EXPECT_THROW(document_attention_pairs(Tensor::empty({8}, DType::i32)), Error);
}
