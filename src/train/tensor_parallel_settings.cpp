#include "train/tensor_parallel_settings.hpp"

#include <string>

#include "base/error.hpp"

namespace ftrain {

namespace {

[[noreturn]] void refuse(const RunConfig& c, const DeckLocation& other, const std::string& what) {
  FT_USER_ERROR() << c.parallel.where.str() << ": parallel tensor " << c.parallel.tensor << " with " << what
                  << (other.file.empty() ? std::string() : " (" + other.str() + ")")
                  << " is not supported yet; use parallel tensor 1 for it";
}

}  // namespace

void check_tensor_parallel(const RunConfig& c, const FsdpOptions& fsdp, Device device, Model& model) {
  if (c.parallel.tensor <= 1) return;
  if (c.parallel.context > 1) refuse(c, c.parallel.where, "context " + std::to_string(c.parallel.context));
  if (device != Device::host)
    refuse(c, c.device_where, std::string("device ") + device_name(device) +
                                  " (the vocabulary-parallel embedding and cross entropy have host kernels only)");
  if (fsdp.fp8) refuse(c, DeckLocation{}, "precision fp8");
  if (c.lora.enabled) refuse(c, c.lora.where, "lora");
  if (fsdp.offload != Offload::none) refuse(c, c.fsdp.where, "fsdp offload");
  try {
    model.split_for_tensor_parallel(static_cast<int>(c.parallel.tensor));
  } catch (const UserError& e) {
    FT_USER_ERROR() << c.parallel.where.str() << ": parallel tensor " << c.parallel.tensor << " with the model of "
                    << c.model.where.str() << ": " << e.what();
  }
}

}  // namespace ftrain
