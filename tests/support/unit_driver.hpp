// UnitDriver: the engine's role in single-process model tests.
//
// Holds one f32 master and one f32 gradient per parameter (tied slots share
// their owner's), drives the units forward in order and backward in reverse
// exactly as the FSDP engine does (compute-dtype copies of the masters,
// dy = 1 / number of non-ignored targets into the head), and checks the unit
// contract on the way (loss shape and dtype, dx shape and dtype, no input
// gradient from unit 0). Model tests compare its results with their own
// float64 references.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "kernels/ops.hpp"
#include "plugin/model.hpp"
#include "support/op_test_util.hpp"

namespace ftrain::testing {

// Initial value of element `index` of a parameter.
using InitValue = std::function<float(const ParamSpec& spec, std::int64_t index)>;

// The engine's own initialisation: std * N(0,1) from (seed, name, index), ones, zeros.
inline InitValue engine_init(std::uint64_t seed) {
  return [seed](const ParamSpec& spec, std::int64_t i) -> float {
    switch (spec.init) {
      case InitKind::normal:
        return static_cast<float>(spec.init_std * rng::normal(seed, rng::hash_name(spec.name), static_cast<std::uint64_t>(i)));
      case InitKind::ones: return 1.0f;
      case InitKind::zeros: return 0.0f;
    }
    return 0.0f;
  };
}

class UnitDriver {
 public:
  UnitDriver(Model& model, DType compute_dtype, std::int64_t vocab_chunk, const InitValue& init) : model_(model) {
    ctx_.compute_dtype = compute_dtype;
    ctx_.vocab_chunk = vocab_chunk;
    for (int u = 0; u < model.num_units(); ++u) {
      std::vector<std::string> names;
      for (const auto& spec : model.unit(u).params()) {
        if (!spec.tied_to.empty()) {
          EXPECT_EQ(slots_.count(spec.tied_to), 1u) << spec.name << " tied to an unknown parameter";
          EXPECT_EQ(slots_.at(spec.tied_to).param.shape(), spec.shape);
          names.push_back(spec.tied_to);
          continue;
        }
        Tensor p = Tensor::empty(spec.shape, DType::f32, Device::host, spec.name);
        float* data = p.data_as<float>();
        for (std::int64_t i = 0; i < p.numel(); ++i) data[i] = init(spec, i);
        slots_[spec.name] = Slot{p, Tensor::zeros(spec.shape, DType::f32)};
        order_.push_back(spec.name);
        names.push_back(spec.name);
      }
      unit_names_.push_back(names);
    }
  }

  std::map<std::string, std::vector<double>> ref_params() const {
    std::map<std::string, std::vector<double>> out;
    for (const auto& [name, slot] : slots_) out[name] = to_doubles(slot.param);
    return out;
  }
  const std::vector<std::string>& names() const { return order_; }  // own parameters, declaration order
  const Tensor& grad(const std::string& name) const { return slots_.at(name).grad; }
  StepContext& ctx() { return ctx_; }

  // Forward through every unit, then (if backward) backward in reverse with
  // dy = 1 / (non-ignored targets). Returns the head's output: the SUM of losses.
  double run(const Batch& batch, bool backward) {
    const int units = model_.num_units();
    std::vector<std::vector<Tensor>> params(units), grads(units);
    for (int u = 0; u < units; ++u) {
      for (const auto& name : unit_names_[u]) {
        const Slot& s = slots_.at(name);
        if (ctx_.compute_dtype == DType::f32) {
          params[u].push_back(s.param);
        } else {  // what the engine gathers: a compute-dtype copy of the master
          Tensor p = Tensor::empty(s.param.shape(), ctx_.compute_dtype);
          ops::cast(ctx_.execution(), s.param, p);
          params[u].push_back(p);
        }
        grads[u].push_back(s.grad);
      }
    }
    std::vector<Tensor> inputs(units + 1);
    std::vector<UnitCache> caches(units);
    for (int u = 0; u < units; ++u) inputs[u + 1] = model_.unit(u).forward(ctx_, params[u], batch, inputs[u], caches[u]);
    const Tensor& loss = inputs[units];
    EXPECT_EQ(loss.shape(), (Shape{1}));
    EXPECT_EQ(loss.dtype(), DType::f32);
    const double total = to_float_vector(loss)[0];
    if (backward) {
      int targets = 0;
      for (float t : to_float_vector(batch.targets)) targets += t != kIgnoreIndex;
      Tensor dy = from_floats({1}, {1.0f / static_cast<float>(targets)});
      for (int u = units - 1; u >= 0; --u) {
        dy = model_.unit(u).backward(ctx_, params[u], grads[u], batch, inputs[u], dy, caches[u]);
        if (u > 0) {
          EXPECT_EQ(dy.shape(), inputs[u].shape()) << "unit " << u;
          EXPECT_EQ(dy.dtype(), ctx_.compute_dtype) << "unit " << u;
        }
      }
      EXPECT_FALSE(dy.defined()) << "unit 0 returns no input gradient";
    }
    return total;
  }

 private:
  struct Slot {
    Tensor param;  // f32 master
    Tensor grad;   // f32
  };
  Model& model_;
  StepContext ctx_;
  std::map<std::string, Slot> slots_;
  std::vector<std::string> order_;
  std::vector<std::vector<std::string>> unit_names_;
};

// Checks the driver's gradients (after run(batch, true)) against central
// differences of a float64 reference loss, along one random direction per
// parameter tensor (each tensor checked on its own) and one through all of
// them. `reference_sum_loss` must return the same quantity the gradients are
// of (sum of losses / target count). A direction that happens to cancel
// (|numeric| << ||g||) is judged against ||g||, since f32 gradients are
// accurate relative to ||g||, not to 0; a vanishing ||g|| fails the test, as
// the check would be vacuous.
inline void expect_gradients_match_reference(
    const UnitDriver& driver, const std::function<double(const std::map<std::string, std::vector<double>>&)>& reference_loss,
    std::uint64_t direction_seed, double min_gradient_norm, const std::string& label) {
  using RefParams = std::map<std::string, std::vector<double>>;
  const RefParams base = driver.ref_params();
  std::vector<std::vector<std::string>> groups;
  for (const auto& name : driver.names()) groups.push_back({name});
  groups.push_back(driver.names());
  for (const auto& group : groups) {
    RefParams plus = base, minus = base;
    double analytic = 0, gradient_norm_sq = 0;
    const double h = 1e-5;
    for (const auto& name : group) {
      const auto u = random_vector(base.at(name).size(), ++direction_seed);
      const auto g = to_doubles(driver.grad(name));
      analytic += dot(g, u);
      gradient_norm_sq += dot(g, g);
      for (std::size_t i = 0; i < u.size(); ++i) {
        plus[name][i] += h * u[i];
        minus[name][i] -= h * u[i];
      }
    }
    const double numeric = (reference_loss(plus) - reference_loss(minus)) / (2 * h);
    const std::string what = label + ": " + (group.size() == 1 ? group[0] : "all parameters");
    const double gradient_norm = std::sqrt(gradient_norm_sq);
    EXPECT_GT(gradient_norm, min_gradient_norm) << what << ": vanishing gradient, the check would be vacuous";
    EXPECT_NEAR(analytic, numeric, 1e-4 * std::max(std::abs(numeric), gradient_norm)) << what;
  }
}

}  // namespace ftrain::testing
