#include "train/tensor_parallel_settings.hpp"

#include <string>

#include "base/error.hpp"

namespace ftrain {

namespace {

// "parallel tensor 2" / "parallel context 4": the part of the line refused.
[[noreturn]] void refuse(const RunConfig& c, const std::string& degree, const DeckLocation& other,
                         const std::string& what) {
  FT_USER_ERROR() << c.parallel.where.str() << ": parallel " << degree << " with " << what
                  << (other.file.empty() ? std::string() : " (" + other.str() + ")") << " is not supported yet; use "
                  << "parallel " << degree.substr(0, degree.find(' ')) << " 1 for it";
}

// What the engine's model-parallel groups do not train with yet.
void refuse_engine_options(const RunConfig& c, const std::string& degree, const FsdpOptions& fsdp) {
  if (fsdp.fp8) refuse(c, degree, DeckLocation{}, "precision fp8");
  if (c.lora.enabled) refuse(c, degree, c.lora.where, "lora");
  if (fsdp.offload != Offload::none) refuse(c, degree, c.fsdp.where, "fsdp offload");
}

}  // namespace

void check_tensor_parallel(const RunConfig& c, const FsdpOptions& fsdp, Model& model) {
  if (c.parallel.tensor <= 1) return;
  refuse_engine_options(c, "tensor " + std::to_string(c.parallel.tensor), fsdp);
  try {
    model.split_for_tensor_parallel(static_cast<int>(c.parallel.tensor));
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.parallel.where.str() << ": parallel tensor " << c.parallel.tensor << " with the model of "
                    << c.model.where.str() << ": " << e.what();
  }
}

void check_context_parallel(const RunConfig& c, const FsdpOptions& fsdp, Model& model) {
  if (c.parallel.context <= 1) return;
  refuse_engine_options(c, "context " + std::to_string(c.parallel.context), fsdp);
  try {
    model.use_context_parallel(static_cast<int>(c.parallel.context));
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.parallel.where.str() << ": parallel context " << c.parallel.context << " with the model of "
                    << c.model.where.str() << ": " << e.what();
  }
}

void refuse_model_parallel_options(const RunConfig& c, const FsdpOptions& fsdp) {
  if (c.parallel.tensor > 1) refuse_engine_options(c, "tensor " + std::to_string(c.parallel.tensor), fsdp);
  if (c.parallel.context > 1) refuse_engine_options(c, "context " + std::to_string(c.parallel.context), fsdp);
}

}  // namespace ftrain
