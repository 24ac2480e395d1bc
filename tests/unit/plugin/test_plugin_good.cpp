// A minimal, well-formed plugin for the loader tests: one unit that adds a
// scalar parameter to its input. Its config() echoes the preset and the
// overrides so the tests can see what reached the plugin; the override
// `fail=<message>` makes create_model refuse with that message.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "plugin/ftrain_plugin.h"
#include "plugin/model.hpp"

namespace {

class ShiftUnit final : public ftrain::Unit {
 public:
  std::string name() const override { return "shift"; }
  std::vector<ftrain::ParamSpec> params() const override {
    ftrain::ParamSpec spec;
    spec.name = "shift.bias";
    spec.shape = {1};
    spec.init = ftrain::InitKind::zeros;
    return {spec};
  }
  ftrain::Tensor forward(const ftrain::StepContext&, const std::vector<ftrain::Tensor>&, const ftrain::Batch&,
                         const ftrain::Tensor& x, ftrain::UnitCache&) override {
    return x;
  }
  ftrain::Tensor backward(const ftrain::StepContext&, const std::vector<ftrain::Tensor>&, std::vector<ftrain::Tensor>&,
                          const ftrain::Batch&, const ftrain::Tensor&, const ftrain::Tensor& dy,
                          ftrain::UnitCache&) override {
    return dy;
  }
};

class GoodModel final : public ftrain::Model {
 public:
  explicit GoodModel(std::map<std::string, std::string> config) : config_(std::move(config)) {}
  std::string architecture() const override { return "loader_test_good"; }
  std::map<std::string, std::string> config() const override { return config_; }
  ftrain::DataKind data_kind() const override { return ftrain::DataKind::tokens; }
  int num_units() const override { return 1; }
  ftrain::Unit& unit(int) override { return unit_; }
  double training_flops_per_sample(std::int64_t sequence_length) const override {
    return 6.0 * static_cast<double>(sequence_length);
  }
  std::int64_t output_size() const override { return 1; }

 private:
  std::map<std::string, std::string> config_;
  ShiftUnit unit_;
};

void* create(ftrain_model_args* args) {
  try {
    std::map<std::string, std::string> config{{"preset", args->preset}};
    for (int i = 0; i < args->n_overrides; ++i) {
      const std::string key = args->overrides[i].key;
      const std::string value = args->overrides[i].value;
      if (key == "fail") {
        std::snprintf(args->error, args->error_capacity, "%s", value.c_str());
        return nullptr;
      }
      config[key] = value;
    }
    return static_cast<ftrain::Model*>(new GoodModel(std::move(config)));
  } catch (const std::exception& e) {
    std::snprintf(args->error, args->error_capacity, "%s", e.what());
    return nullptr;
  }
}

void destroy(void* model) { delete static_cast<ftrain::Model*>(model); }

const char* const kPresets[] = {"small", "large", nullptr};
const ftrain_plugin_descriptor kDescriptor = {FTRAIN_PLUGIN_ABI_VERSION,
                                              sizeof(ftrain_plugin_descriptor),
                                              "loader_test_good",
                                              "a loader test plugin",
                                              kPresets,
                                              &create,
                                              &destroy};
}  // namespace

extern "C" FTRAIN_PLUGIN_EXPORT const ftrain_plugin_descriptor* ftrain_plugin_entry(void) { return &kDescriptor; }
