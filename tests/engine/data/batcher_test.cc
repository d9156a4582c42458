#include "engine/data/batcher.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "engine/data/dataset.h"
#include "gtest/gtest.h"

namespace ampd::engine {
namespace {

// Example i has features {i, i + 0.5} and label i % 3, so a batch tells which
// examples it holds and whether rows stayed intact.
data::Dataset Indexed(int64_t n) {
  data::Dataset data;
  data.num_examples = n;
  data.feature_dim = 2;
  data.num_classes = 3;
  for (int64_t i = 0; i < n; ++i) {
    data.features.push_back(static_cast<float>(i));
    data.features.push_back(static_cast<float>(i) + 0.5f);
    data.labels.push_back(static_cast<int32_t>(i % 3));
  }
  return data;
}

// The example indices in a batch, checking each row against its label.
std::vector<int64_t> Ids(const data::Batch& batch) {
  std::vector<int64_t> ids;
  EXPECT_EQ(batch.features.size(), static_cast<size_t>(batch.size * 2));
  EXPECT_EQ(batch.labels.size(), static_cast<size_t>(batch.size));
  for (int64_t i = 0; i < batch.size; ++i) {
    const int64_t id = static_cast<int64_t>(batch.features[2 * i]);
    EXPECT_EQ(batch.features[2 * i + 1], static_cast<float>(id) + 0.5f);
    EXPECT_EQ(batch.labels[i], id % 3);
    EXPECT_EQ(batch.rows.at(i), id);
    ids.push_back(id);
  }
  return ids;
}

std::vector<std::vector<int64_t>> Take(data::Batcher& batcher, int count) {
  std::vector<std::vector<int64_t>> batches;
  data::Batch batch;
  for (int i = 0; i < count; ++i) {
    batcher.Next(&batch);
    batches.push_back(Ids(batch));
  }
  return batches;
}

std::vector<int64_t> Flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

TEST(BatcherTest, NoShuffleIsSequential) {
  const data::Dataset data = Indexed(10);
  data::Batcher batcher(&data, 4, /*seed=*/123, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(batcher.batches_per_epoch(), 3);
  EXPECT_EQ(Take(batcher, 4),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}, {0, 1, 2, 3}}));
}

TEST(BatcherTest, DropLastSkipsThePartialBatch) {
  const data::Dataset data = Indexed(10);
  data::Batcher batcher(&data, 4, 0, /*shuffle=*/false, /*drop_last=*/true);
  EXPECT_EQ(batcher.batches_per_epoch(), 2);
  EXPECT_EQ(Take(batcher, 3),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 1, 2, 3}}));
  EXPECT_EQ(batcher.position().epoch, 1);
  EXPECT_EQ(batcher.position().index, 4);
}

TEST(BatcherTest, EveryExampleOncePerEpoch) {
  const data::Dataset data = Indexed(103);
  data::Batcher batcher(&data, 10, /*seed=*/9, /*shuffle=*/true, /*drop_last=*/false);
  ASSERT_EQ(batcher.batches_per_epoch(), 11);
  std::vector<int64_t> all(103);
  std::iota(all.begin(), all.end(), 0);
  std::vector<int64_t> previous;
  for (int epoch = 0; epoch < 3; ++epoch) {
    const auto batches = Take(batcher, 11);
    for (int b = 0; b < 10; ++b) EXPECT_EQ(batches[b].size(), 10u);
    EXPECT_EQ(batches[10].size(), 3u);
    std::vector<int64_t> seen = Flatten(batches);
    EXPECT_NE(seen, all) << "epoch " << epoch << " was not shuffled";
    EXPECT_NE(seen, previous) << "epoch " << epoch << " repeats the one before";
    previous = seen;
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, all) << "epoch " << epoch;
    EXPECT_EQ(batcher.position().epoch, epoch + 1);
    EXPECT_EQ(batcher.position().index, 0);
  }
}

TEST(BatcherTest, DropLastShuffledUsesDistinctExamples) {
  const data::Dataset data = Indexed(103);
  data::Batcher batcher(&data, 10, 9, /*shuffle=*/true, /*drop_last=*/true);
  ASSERT_EQ(batcher.batches_per_epoch(), 10);
  std::vector<int64_t> seen = Flatten(Take(batcher, 10));
  ASSERT_EQ(seen.size(), 100u);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
  EXPECT_EQ(batcher.position().epoch, 1);
}

TEST(BatcherTest, OrderDependsOnlyOnSeedAndEpoch) {
  const data::Dataset data = Indexed(50);
  data::Batcher a(&data, 7, 1234), b(&data, 7, 1234), other(&data, 7, 1235);
  const auto run = Take(a, 21);  // three epochs of 7
  EXPECT_EQ(run, Take(b, 21));
  EXPECT_NE(run, Take(other, 21));
  // Epoch 2 straight away: nothing depends on having played epochs 0 and 1.
  data::Batcher jump(&data, 7, 1234);
  jump.Seek({2, 0});
  EXPECT_EQ(Take(jump, 7), std::vector<std::vector<int64_t>>(run.begin() + 14, run.end()));
  // The batch size changes the cut, not the order.
  data::Batcher wide(&data, 50, 1234, true, /*drop_last=*/false);
  data::Batcher narrow(&data, 7, 1234, true, /*drop_last=*/false);
  EXPECT_EQ(Flatten(Take(wide, 1)), Flatten(Take(narrow, 8)));
}

TEST(BatcherTest, SeekRestoresExactly) {
  const data::Dataset data = Indexed(37);
  for (bool drop_last : {false, true}) {
    data::Batcher original(&data, 5, 77, /*shuffle=*/true, drop_last);
    Take(original, 11);  // into the second epoch
    const data::Batcher::Position saved = original.position();
    const auto expected = Take(original, 13);
    data::Batcher restored(&data, 5, 77, /*shuffle=*/true, drop_last);
    restored.Seek(saved);
    EXPECT_EQ(restored.position().epoch, saved.epoch);
    EXPECT_EQ(restored.position().index, saved.index);
    EXPECT_EQ(Take(restored, 13), expected) << "drop_last=" << drop_last;
  }
}

TEST(BatcherTest, SeekNormalizesPositions) {
  const data::Dataset data = Indexed(10);
  data::Batcher batcher(&data, 4, 0, /*shuffle=*/false, /*drop_last=*/true);
  batcher.Seek({3, 8});  // only the dropped tail is left: the next epoch
  EXPECT_EQ(batcher.position().epoch, 4);
  EXPECT_EQ(batcher.position().index, 0);
  batcher.Seek({-1, -5});
  EXPECT_EQ(batcher.position().epoch, 0);
  EXPECT_EQ(batcher.position().index, 0);
  batcher.Seek({0, 2});  // mid-batch positions are honoured
  EXPECT_EQ(Take(batcher, 1), (std::vector<std::vector<int64_t>>{{2, 3, 4, 5}}));
}

TEST(BatcherTest, TooFewExamples) {
  const data::Dataset data = Indexed(3);
  data::Batcher dropping(&data, 4, 0, true, /*drop_last=*/true);
  EXPECT_EQ(dropping.batches_per_epoch(), 0);
  data::Batch batch;
  batch.size = 9;
  dropping.Next(&batch);
  EXPECT_EQ(batch.size, 0);
  EXPECT_TRUE(batch.features.empty());
  EXPECT_TRUE(batch.labels.empty());

  data::Batcher keeping(&data, 4, 0, /*shuffle=*/false, /*drop_last=*/false);
  EXPECT_EQ(keeping.batches_per_epoch(), 1);
  EXPECT_EQ(Take(keeping, 2), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {0, 1, 2}}));

  const data::Dataset empty;
  data::Batcher none(&empty, 4, 0, true, false);
  none.Next(&batch);
  EXPECT_EQ(batch.size, 0);
}

// Without gathering, a batch names the same rows in the same order and
// carries their labels, and no features (a device gathers them).
TEST(BatcherTest, WithoutGatheringTheSameRowsComeWithoutFeatures) {
  const data::Dataset data = Indexed(50);
  data::Batcher gathering(&data, 8, /*seed=*/4), rows_only(&data, 8, /*seed=*/4);
  rows_only.set_gather_features(false);
  data::Batch a, b;
  for (int i = 0; i < 14; ++i) {  // past an epoch boundary
    gathering.Next(&a);
    rows_only.Next(&b);
    EXPECT_TRUE(b.features.empty());
    ASSERT_EQ(b.size, a.size);
    EXPECT_EQ(b.rows, a.rows);
    EXPECT_EQ(b.labels, a.labels);
    for (int64_t j = 0; j < b.size; ++j) EXPECT_EQ(b.labels[j], data.labels[b.rows[j]]);
  }
}

}  // namespace
}  // namespace ampd::engine
