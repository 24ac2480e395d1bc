// The attention visibility rule (kernels/math/attention.hpp), the one the
// host flash attention and the CUDA reference kernels both call, checked
// here on the host against its definition, entry by entry and tile by tile:
//  * attention_key_visible: key j visible to query i iff (not causal or
//    j <= i) and, with document ids, documents[j] == documents[i];
//  * attention_key_tile_visible (the tile-skip rule): never false for a tile
//    holding a visible pair, and false for every tile wholly before or after
//    the query tile's documents (the saving the mask is for);
//  * attention_key_tile_all_visible: true exactly when every pair is visible.
// Windows: one document, single-token documents, four documents of unequal
// lengths; every query/key tile of sizes 1..5 (partial tiles included).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/math/attention.hpp"

using namespace ftrain;

namespace {

struct Window {
  std::string name;
  std::vector<std::int32_t> ids;  // empty: no document mask
};

std::vector<Window> windows() {
  std::vector<Window> w;
  w.push_back({"no documents", {}});
  w.push_back({"one document", std::vector<std::int32_t>(13, 0)});
  std::vector<std::int32_t> singles(13);
  for (std::int32_t t = 0; t < 13; ++t) singles[static_cast<std::size_t>(t)] = t;
  w.push_back({"13 documents of one token", singles});
  w.push_back({"four documents 3, 1, 5, 4", {0, 0, 0, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3}});
  return w;
}

bool defined_visible(bool causal, std::int64_t i, std::int64_t j, const std::vector<std::int32_t>& ids) {
  const bool causal_ok = !causal || j <= i;
  const bool same_document = ids.empty() || ids[static_cast<std::size_t>(j)] == ids[static_cast<std::size_t>(i)];
  return causal_ok && same_document;
}

constexpr std::int64_t kSeq = 13;

}  // namespace

TEST(AttentionVisibility, KeyVisibleIsTheDefinition) {
  for (const Window& w : windows())
    for (bool causal : {true, false}) {
      SCOPED_TRACE(w.name + (causal ? ", causal" : ", full"));
      const std::int32_t* doc = w.ids.empty() ? nullptr : w.ids.data();
      for (std::int64_t i = 0; i < kSeq; ++i)
        for (std::int64_t j = 0; j < kSeq; ++j)
          EXPECT_EQ(math::attention_key_visible(causal, i, j, doc), defined_visible(causal, i, j, w.ids))
              << "query " << i << ", key " << j;
    }
}

TEST(AttentionVisibility, TileRulesAgreeWithEveryEntryOfTheTile) {
  for (const Window& w : windows())
    for (bool causal : {true, false}) {
      SCOPED_TRACE(w.name + (causal ? ", causal" : ", full"));
      const std::int32_t* doc = w.ids.empty() ? nullptr : w.ids.data();
      for (std::int64_t bq = 1; bq <= 5; ++bq)
        for (std::int64_t bk = 1; bk <= 5; ++bk)
          for (std::int64_t i0 = 0; i0 < kSeq; i0 += bq)
            for (std::int64_t j0 = 0; j0 < kSeq; j0 += bk) {
              const std::int64_t nq = std::min(bq, kSeq - i0), nk = std::min(bk, kSeq - j0);
              bool any = false, all = true;
              for (std::int64_t i = i0; i < i0 + nq; ++i)
                for (std::int64_t j = j0; j < j0 + nk; ++j) {
                  const bool v = defined_visible(causal, i, j, w.ids);
                  any = any || v;
                  all = all && v;
                }
              const std::string tile = "queries [" + std::to_string(i0) + ", " + std::to_string(i0 + nq) +
                                       "), keys [" + std::to_string(j0) + ", " + std::to_string(j0 + nk) + ")";
              if (any)
                EXPECT_TRUE(math::attention_key_tile_visible(causal, i0, nq, j0, nk, doc))
                    << tile << " holds a visible pair but would be skipped";
              const bool outside_documents =
                  doc != nullptr && (doc[j0 + nk - 1] < doc[i0] || doc[j0] > doc[i0 + nq - 1]);
              const bool after_queries = causal && j0 > i0 + nq - 1;
              if (outside_documents || after_queries)
                EXPECT_FALSE(math::attention_key_tile_visible(causal, i0, nq, j0, nk, doc))
                    << tile << " lies wholly outside the queries' documents or after them and is not skipped";
              EXPECT_EQ(math::attention_key_tile_all_visible(causal, i0, nq, j0, nk, doc), all) << tile;
            }
    }
}

// With the mask, a 2048-token window of four 512-token documents in 64-wide
// tiles leaves only the tiles on each document's diagonal block: 4 blocks
// of 8 x 9 / 2 causal tiles out of 32 x 33 / 2 (the host's measured saving
// follows this count).
TEST(AttentionVisibility, FourDocumentsLeaveOnlyTheirDiagonalBlocks) {
  constexpr std::int64_t T = 2048, tile = 64;
  std::vector<std::int32_t> ids(T);
  for (std::int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t / 512);
  std::int64_t with_mask = 0, without = 0;
  for (std::int64_t i0 = 0; i0 < T; i0 += tile)
    for (std::int64_t j0 = 0; j0 < T; j0 += tile) {
      with_mask += math::attention_key_tile_visible(true, i0, tile, j0, tile, ids.data()) ? 1 : 0;
      without += math::attention_key_tile_visible(true, i0, tile, j0, tile, nullptr) ? 1 : 0;
    }
  EXPECT_EQ(without, 32 * 33 / 2);
  EXPECT_EQ(with_mask, 4 * (8 * 9 / 2));
}
