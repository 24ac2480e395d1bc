// What a diverged run's message suggests (train/divergence_advice.hpp, issue
// 35): only what applies to the deck. The probe's run diverged at step 1 of a
// warm-up (lr 0) with clipping on and was told to "lower the learning rate
// or set clip_grad_norm".
#include <gtest/gtest.h>

#include <string>

#include "train/divergence_advice.hpp"

using namespace ftrain;

namespace {

RunConfig deck(double clip) {
  RunConfig c;
  c.optimizer.lr = 1e-3;
  c.schedule.kind = deck::ScheduleKind::cosine;
  c.schedule.warmup_steps = 3;  // step 1 trains with lr 0
  c.clip_grad_norm = clip;
  c.max_steps = 20;
  c.init.kind = deck::InitKind::safetensors;
  c.init.path = "st";
  c.init.where = DeckLocation{"run.in", 7};
  return c;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DivergenceAdvice, AStepWithLearningRateZeroPointsAtTheWeightsAndData) {
  const std::string advice = divergence_advice(deck(1.0), 1);
  EXPECT_TRUE(has(advice, "The learning rate of step 1 is 0")) << advice;
  EXPECT_TRUE(has(advice, "run.in:7: init safetensors st")) << advice;
  EXPECT_FALSE(has(advice, "Lower the learning rate")) << advice;
  EXPECT_FALSE(has(advice, "clip_grad_norm")) << advice;
}

TEST(DivergenceAdvice, ClippingIsSuggestedOnlyWhenOff) {
  const std::string on = divergence_advice(deck(1.0), 5);
  EXPECT_TRUE(has(on, "Lower the learning rate (lr 0.001")) << on;
  EXPECT_TRUE(has(on, "clipping is on (clip_grad_norm 1)")) << on;
  EXPECT_FALSE(has(on, "set clip_grad_norm")) << on;
  const std::string off = divergence_advice(deck(0.0), 5);
  EXPECT_TRUE(has(off, "set clip_grad_norm (it is off)")) << off;
}

}  // namespace
