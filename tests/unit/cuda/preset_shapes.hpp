// The shapes the model presets give the CUDA backend, read from the real
// plugins (their declared parameters), so the CUDA plan and launch tests
// follow the presets instead of a copied table.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "plugin/loader.hpp"
#include "plugin/model.hpp"

namespace ftrain::testing {

struct LinearParamShape {
  std::string example;  // one parameter with this shape
  std::int64_t out = 0, in = 0;
  bool bias = false;
  auto key() const { return std::tie(out, in, bias); }
  bool operator<(const LinearParamShape& o) const { return key() < o.key(); }
};

struct PresetShapes {
  std::string model;
  std::vector<LinearParamShape> linears;  // distinct [out, in, bias]
  std::set<std::int64_t> norm_widths;     // 1-D weights of norms (width of their rows)
  std::int64_t largest_linear_out = 0;
  std::int64_t max_positions = 0;
  std::int64_t heads = 0, head_dim = 0;
  std::int64_t vocab = 0;  // columns of the fused cross-entropy head (Llama vocab_size, ViT num_classes)
};

inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Linear layers: 2-D "*.weight" parameters except token embeddings and the
// language head (those go through embedding / the fused cross entropy, not
// linear_forward). Norms: 1-D weights whose name contains "norm".
inline PresetShapes preset_shapes(const std::string& plugin_dir, const std::string& plugin, const std::string& preset) {
  ModelHandle model = PluginLoader({plugin_dir}).create_model(plugin, preset, {});
  PresetShapes s;
  s.model = plugin + " " + preset;
  std::map<std::string, Shape> all;
  for (int u = 0; u < model->num_units(); ++u)
    for (const auto& spec : model->unit(u).params())
      if (spec.tied_to.empty()) all[spec.name] = spec.shape;
  std::set<LinearParamShape> linears;
  for (const auto& [name, shape] : all) {
    if (shape.size() == 2 && ends_with(name, "weight") && name.find("embed_tokens") == std::string::npos &&
        name.find("lm_head") == std::string::npos) {
      const std::string bias_name = name.substr(0, name.size() - 6) + "bias";
      const bool bias = all.count(bias_name) != 0;
      linears.insert({name, shape[0], shape[1], bias});
      s.largest_linear_out = std::max(s.largest_linear_out, shape[0]);
    }
    if (shape.size() == 1 && name.find("norm") != std::string::npos && ends_with(name, "weight"))
      s.norm_widths.insert(shape[0]);
  }
  s.linears.assign(linears.begin(), linears.end());
  const auto config = model->config();
  auto number = [&](const char* key) {
    auto it = config.find(key);
    return it == config.end() ? std::int64_t{0} : std::stoll(it->second);
  };
  s.max_positions = number("max_position_embeddings");
  s.heads = number("num_attention_heads");
  s.head_dim = number("head_dim");
  s.vocab = std::max(number("vocab_size"), number("num_classes"));
  return s;
}

}  // namespace ftrain::testing
