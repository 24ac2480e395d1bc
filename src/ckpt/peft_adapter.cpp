#include "ckpt/peft_adapter.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "ckpt/safetensors.hpp"
#include "base/error.hpp"

namespace ftrain::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;

std::string peft_key(const std::string& adapter_name) { return kPeftKeyPrefix + adapter_name; }

json peft_adapter_config(const lora::Config& c, const std::string& base_model_name_or_path,
                         const std::string& task_type) {
  json j;  // nlohmann's object keeps keys sorted: PEFT writes sort_keys=True
  j["alpha_pattern"] = json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["bias"] = "none";
  j["eva_config"] = nullptr;
  j["exclude_modules"] = nullptr;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  if (c.init == lora::AInit::gaussian) j["init_lora_weights"] = "gaussian";
  else j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = json::object();
  // PEFT's lora_alpha is an int field; a fractional alpha stays a float.
  if (c.alpha == std::floor(c.alpha) && std::abs(c.alpha) < 1e15) j["lora_alpha"] = static_cast<std::int64_t>(c.alpha);
  else j["lora_alpha"] = c.alpha;
  j["lora_bias"] = false;
  j["lora_dropout"] = c.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = c.rank;
  j["rank_pattern"] = json::object();
  j["revision"] = nullptr;
  if (c.all_linear) j["target_modules"] = "all-linear";
  else j["target_modules"] = c.targets;
  if (task_type.empty()) j["task_type"] = nullptr;
  else j["task_type"] = task_type;
  j["use_dora"] = false;
  j["use_rslora"] = c.rslora;
  return j;
}

json check_peft_adapter_config(const std::string& dir, const lora::Config& c) {
  const std::string path = dir + "/" + kPeftConfigName;
  std::ifstream in(path);
  if (!in) FT_USER_ERROR() << "init adapter " << dir << ": " << path << " is missing (not a PEFT adapter directory?)";
  json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    FT_USER_ERROR() << path << ": not valid JSON: " << e.what();
  }
  if (!j.is_object()) FT_USER_ERROR() << path << ": expected a JSON object";
  auto field = [&](const char* name) -> const json& {
    if (!j.contains(name)) FT_USER_ERROR() << path << ": field \"" << name << "\" is missing";
    return j.at(name);
  };
  if (field("peft_type") != "LORA")
    FT_USER_ERROR() << path << ": peft_type " << field("peft_type").dump() << ", ftrain loads LORA adapters only";
  if (!field("r").is_number_integer() || field("r").get<std::int64_t>() != c.rank)
    FT_USER_ERROR() << path << ": r " << field("r").dump() << ", the lora line says rank " << c.rank;
  if (!field("lora_alpha").is_number() || field("lora_alpha").get<double>() != c.alpha)
    FT_USER_ERROR() << path << ": lora_alpha " << field("lora_alpha").dump() << ", the lora line says alpha " << c.alpha;
  const bool rslora = j.value("use_rslora", false);
  if (rslora != c.rslora)
    FT_USER_ERROR() << path << ": use_rslora " << (rslora ? "true" : "false") << ", the deck says rslora "
                    << (c.rslora ? "on" : "off");
  if (j.value("use_dora", false)) FT_USER_ERROR() << path << ": use_dora true: DoRA adapters are not supported";
  if (j.contains("bias") && j["bias"] != "none")
    FT_USER_ERROR() << path << ": bias " << j["bias"].dump() << ": only bias \"none\" adapters are supported";
  if (j.contains("fan_in_fan_out") && j["fan_in_fan_out"] == true)
    FT_USER_ERROR() << path << ": fan_in_fan_out true (Conv1D layers): not supported";
  const json& targets = field("target_modules");
  bool match = false;
  if (targets.is_string()) {
    match = c.all_linear ? targets == "all-linear" : (c.targets.size() == 1 && targets == c.targets[0]);
  } else if (targets.is_array() && !c.all_linear) {
    std::set<std::string> file, deck(c.targets.begin(), c.targets.end());
    for (const auto& t : targets) file.insert(t.is_string() ? t.get<std::string>() : t.dump());
    match = file == deck;
  }
  if (!match)
    FT_USER_ERROR() << path << ": target_modules " << targets.dump() << ", the lora line says targets "
                    << c.targets_text();
  return j;
}

namespace {

// The full tensor of every adapter entry of unit flat `f`, gathered over the
// shard group (collective within it).
std::vector<float> gather_flat(FsdpEngine& engine, FlatParameter& f) {
  Tensor full = Tensor::empty({f.padded_numel()}, DType::f32, f.master.device(), f.unit_name() + ".gathered_f32");
  if (engine.shard_comm_for(f.master).size() == 1) {
    copy_tensor(f.master, full);
  } else {
    engine.shard_comm_for(f.master).all_gather(f.master, full).wait();
  }
  return to_float_vector(host_readable(full));
}

}  // namespace

void save_adapter(FsdpEngine& engine, Communicator& world, const std::string& dir,
                  const std::string& base_model_name_or_path, const std::string& task_type) {
  FT_CHECK(engine.lora()) << "save_adapter without lora";
  engine.execution().synchronize();
  const bool root = world.rank() == 0;
  std::vector<std::vector<float>> kept;  // rank 0: every unit's gathered adapters
  std::vector<SafetensorsWriteEntry> entries;
  for (const auto& f : engine.adapter_units()) {
    if (!f) continue;
    std::vector<float> full = gather_flat(engine, *f);
    if (!root) continue;
    kept.push_back(std::move(full));
    for (const auto& e : f->entries())
      entries.push_back({peft_key(e.name), DType::f32, e.shape, kept.back().data() + e.offset});
  }
  std::string failure;
  if (root) {
    try {
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) FT_USER_ERROR() << "save_adapter " << dir << ": cannot create: " << ec.message();
      // kept's buffers do not move once all are pushed: re-point the entries.
      std::size_t unit = 0, at = 0;
      for (const auto& f : engine.adapter_units()) {
        if (!f) continue;
        for (const auto& e : f->entries()) entries[at++].data = kept[unit].data() + e.offset;
        ++unit;
      }
      write_safetensors(dir + "/" + kPeftWeightsName, entries, {{"format", "pt"}});
      const std::string config_path = dir + "/" + kPeftConfigName;
      std::ofstream out(config_path, std::ios::trunc);
      out << peft_adapter_config(engine.options().lora, base_model_name_or_path, task_type).dump(2);
      out.close();
      if (!out) FT_USER_ERROR() << "save_adapter: writing " << config_path << " failed";
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  // Every rank learns whether rank 0 succeeded (one flag; the message is rank 0's).
  if (world.all_reduce_max(failure.empty() ? 0.0 : 1.0) > 0) {
    if (root) FT_USER_ERROR() << failure;
    FT_USER_ERROR() << "save_adapter " << dir << " failed on rank 0";
  }
}

void load_adapter(FsdpEngine& engine, const std::string& dir) {
  check_peft_adapter_config(dir, engine.options().lora);
  const std::string path = dir + "/" + kPeftWeightsName;
  if (!fs::exists(path)) FT_USER_ERROR() << "init adapter " << dir << ": " << path << " is missing";
  SafetensorsFile file(path);
  std::set<std::string> expected;
  for (const auto& f : engine.adapter_units()) {
    if (!f) continue;
    for (const auto& e : f->entries()) {
      const std::string key = peft_key(e.name);
      expected.insert(key);
      if (!file.contains(key))
        FT_USER_ERROR() << path << ": tensor " << key << " is missing (the deck's lora targets "
                        << engine.options().lora.targets_text() << " adapt that module)";
      const auto& info = file.tensor(key);
      if (info.shape != e.shape)
        FT_USER_ERROR() << path << ": tensor " << key << " has shape " << shape_string(info.shape) << ", expected "
                        << shape_string(e.shape) << " (another base model or rank?)";
    }
  }
  for (const auto& t : file.tensors())
    if ((t.name.find(".lora_A.") != std::string::npos || t.name.find(".lora_B.") != std::string::npos) &&
        expected.count(t.name) == 0)
      FT_USER_ERROR() << path << ": tensor " << t.name << " adapts a module the deck's lora targets do not";
  engine.init_adapters_from([&](const FlatEntry& e, std::int64_t first, std::int64_t count, float* dst) {
    file.read_into(peft_key(e.name), first, count, dst);
  });
}

void merge_adapter(FsdpEngine& engine) {
  FT_CHECK(engine.lora()) << "merge_adapter without lora";
  engine.execution().synchronize();
  const float scale = static_cast<float>(engine.options().lora.scale());
  for (std::size_t u = 0; u < engine.units().size(); ++u) {
    FlatParameter* adapters = engine.adapter_units()[u].get();
    if (!adapters) continue;
    FlatParameter& base = *engine.units()[u];
    const std::vector<float> full = gather_flat(engine, *adapters);  // collective in the shard group
    // Adapter entries come in (A, B) pairs named after their module.
    std::map<std::string, std::pair<const FlatEntry*, const FlatEntry*>> by_module;
    for (std::size_t k = 0; k + 1 < adapters->entries().size(); k += 2) {
      const FlatEntry& a = adapters->entries()[k];
      const FlatEntry& b = adapters->entries()[k + 1];
      const std::string module = a.name.substr(0, a.name.size() - std::string(".lora_A.weight").size());
      by_module[module + ".weight"] = {&a, &b};
    }
    // Merged on the host in f32, then stored back: a bf16 frozen base is
    // rounded to bf16 once more (PEFT's merge_and_unload on a bf16 model).
    Tensor host = master_host_f32(base);
    float* master = host.data_as<float>();
    base.for_each_shard_piece([&](int e, std::int64_t first, std::int64_t count, std::int64_t at) {
      const FlatEntry& w = base.entries()[static_cast<std::size_t>(e)];
      const auto it = by_module.find(w.name);
      if (it == by_module.end()) return;
      const FlatEntry& a = *it->second.first;
      const FlatEntry& b = *it->second.second;
      const std::int64_t in = w.shape[1], r = a.shape[0];
      FT_CHECK(a.shape[1] == in && b.shape[0] == w.shape[0] && b.shape[1] == r)
          << "merge_adapter: " << w.name << " " << shape_string(w.shape) << " vs " << a.name << " "
          << shape_string(a.shape) << ", " << b.name << " " << shape_string(b.shape);
      const float* A = full.data() + a.offset;
      const float* B = full.data() + b.offset;
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t flat = first + i, row = flat / in, col = flat % in;
        double delta = 0;
        for (std::int64_t k = 0; k < r; ++k) delta += static_cast<double>(B[row * r + k]) * A[k * in + col];
        master[at + i] += static_cast<float>(scale * delta);
      }
    });
    engine.store_master(base, host);
  }
}

}  // namespace ftrain::ckpt
