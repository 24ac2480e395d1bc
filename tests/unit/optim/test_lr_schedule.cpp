// Learning-rate schedules against values computed by hand from Hugging Face
// transformers' lr_lambda formulas (optimization.py) and
// TrainingArguments.get_warmup_steps.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.hpp"
#include "optim/lr_schedule.hpp"

using namespace ftrain;
using ftrain::optim::learning_rate;
using ftrain::optim::warmup_steps;

namespace {
optim::Schedule make(const std::string& kind, std::int64_t warmup, double min_lr = 0.0) {
  optim::Schedule s;
  s.kind = kind == "constant" ? optim::ScheduleKind::constant
           : kind == "linear" ? optim::ScheduleKind::linear
                              : optim::ScheduleKind::cosine;
  s.warmup_steps = warmup;
  s.min_lr = min_lr;
  return s;
}
constexpr double kTol = 1e-15;
}  // namespace

TEST(LrSchedule, ConstantWithWarmup) {
  const auto s = make("constant", 4);
  const double want[] = {0.0, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0};
  for (int step = 0; step < 7; ++step) EXPECT_NEAR(learning_rate(s, 1.0, step, 6), want[step], kTol) << step;
  // No warmup: the very first update uses the full rate.
  EXPECT_EQ(learning_rate(make("constant", 0), 3e-4, 0, 10), 3e-4);
}

TEST(LrSchedule, LinearMatchesHuggingFace) {
  // get_linear_schedule_with_warmup(num_warmup_steps=10, num_training_steps=110)
  const auto s = make("linear", 10);
  const double base = 1e-3;
  EXPECT_EQ(learning_rate(s, base, 0, 110), 0.0);  // HF's first update has lr 0
  EXPECT_NEAR(learning_rate(s, base, 1, 110), 1e-4, kTol);
  EXPECT_NEAR(learning_rate(s, base, 5, 110), 5e-4, kTol);
  EXPECT_NEAR(learning_rate(s, base, 10, 110), 1e-3, kTol);  // (110-10)/100
  EXPECT_NEAR(learning_rate(s, base, 35, 110), 7.5e-4, kTol);
  EXPECT_NEAR(learning_rate(s, base, 60, 110), 5e-4, kTol);
  EXPECT_NEAR(learning_rate(s, base, 109, 110), 1e-5, kTol);
  EXPECT_EQ(learning_rate(s, base, 110, 110), 0.0);
  EXPECT_EQ(learning_rate(s, base, 500, 110), 0.0);  // max(0, ...)
  // With a floor the decay ends at min_lr: 1e-4 + 9e-4 * 0.5 at the midpoint.
  const auto floored = make("linear", 10, 1e-4);
  EXPECT_NEAR(learning_rate(floored, base, 60, 110), 5.5e-4, kTol);
  EXPECT_NEAR(learning_rate(floored, base, 110, 110), 1e-4, kTol);
  EXPECT_NEAR(learning_rate(floored, base, 5, 110), 5e-4, kTol);  // warmup ignores min_lr
}

TEST(LrSchedule, CosineMatchesHuggingFace) {
  // get_cosine_schedule_with_warmup(10, 110): 0.5 * (1 + cos(pi * progress)).
  const auto s = make("cosine", 10);
  const double base = 1e-3;
  EXPECT_EQ(learning_rate(s, base, 0, 110), 0.0);
  EXPECT_NEAR(learning_rate(s, base, 3, 110), 3e-4, kTol);
  EXPECT_NEAR(learning_rate(s, base, 10, 110), 1e-3, kTol);
  EXPECT_NEAR(learning_rate(s, base, 35, 110), 8.535533905932737e-4, 1e-18);  // 0.5*(1+cos(pi/4))
  EXPECT_NEAR(learning_rate(s, base, 60, 110), 5e-4, 1e-18);
  EXPECT_NEAR(learning_rate(s, base, 85, 110), 1.4644660940672627e-4, 1e-18);  // 0.5*(1-cos(pi/4))
  EXPECT_NEAR(learning_rate(s, base, 110, 110), 0.0, 1e-18);
  // get_cosine_with_min_lr_schedule_with_warmup(min_lr=1e-4) i.e. min_lr_rate 0.1.
  const auto floored = make("cosine", 10, 1e-4);
  EXPECT_NEAR(learning_rate(floored, base, 35, 110), 8.681980515339464e-4, 1e-18);
  EXPECT_NEAR(learning_rate(floored, base, 60, 110), 5.5e-4, 1e-18);
  EXPECT_NEAR(learning_rate(floored, base, 110, 110), 1e-4, 1e-18);
  EXPECT_NEAR(learning_rate(floored, base, 300, 110), 1e-4, 1e-18);  // stays at the floor past the end
  // No warmup: step 0 has the full rate; warmup == max_steps divides by max(1, 0).
  EXPECT_EQ(learning_rate(make("cosine", 0), base, 0, 100), base);
  EXPECT_NEAR(learning_rate(make("cosine", 0), base, 50, 100), 5e-4, 1e-18);
  EXPECT_NEAR(learning_rate(make("cosine", 8), base, 4, 8), 5e-4, kTol);
  EXPECT_EQ(learning_rate(make("cosine", 8), base, 8, 8), base);
}

TEST(LrSchedule, WarmupRatioRoundsUpLikeTrainingArguments) {
  optim::Schedule s = make("linear", 99);  // the ratio wins over a step count
  s.warmup_ratio = 0.1;
  EXPECT_EQ(warmup_steps(s, 30), 3);
  s.warmup_ratio = 0.05;
  EXPECT_EQ(warmup_steps(s, 10), 1);  // ceil(0.5)
  s.warmup_ratio = 0.07;
  EXPECT_EQ(warmup_steps(s, 100), 8);  // 0.07 * 100 = 7.000000000000001 in doubles, as in Python
  s.warmup_ratio = 0.0;
  EXPECT_EQ(warmup_steps(s, 100), 0);
  s.warmup_ratio = 0.1;
  EXPECT_NEAR(learning_rate(s, 1.0, 1, 30), 1.0 / 3.0, kTol);
  EXPECT_EQ(warmup_steps(make("linear", 12), 30), 12);
}

TEST(LrSchedule, BadSchedulesAreUserErrors) {
  EXPECT_THROW(learning_rate(make("cosine", 0, 2e-3), 1e-3, 0, 10), UserError);
  EXPECT_THROW(learning_rate(make("cosine", -1), 1e-3, 0, 10), UserError);
  EXPECT_THROW(learning_rate(make("cosine", 0), 1e-3, 0, 0), UserError);
  optim::Schedule s = make("linear", 0);
  s.warmup_ratio = 1.5;
  EXPECT_THROW(learning_rate(s, 1e-3, 0, 10), UserError);
}
