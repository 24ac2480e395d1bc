#include "kernels/backend_registry.hpp"

#include <array>
#include <atomic>

#include "base/error.hpp"
#include "runtime/backend_library.hpp"

namespace ftrain {

namespace {
// Lock-free lookups: every op reads its table.
std::array<std::atomic<const OpTable*>, 2>& tables() {
  static std::array<std::atomic<const OpTable*>, 2> t{&host_op_table(), nullptr};
  return t;
}
std::size_t index_of(Device d) { return d == Device::host ? 0 : 1; }
}  // namespace

void register_backend(const OpTable& table) {
  const char* name = table.name != nullptr ? table.name : "<unnamed>";
  FT_CHECK(table.version == kOpTableVersion)
      << "ops backend '" << name << "' was built for op table version " << table.version
      << ", but this ftrain has version " << kOpTableVersion << "; rebuild the backend against this ftrain";
#define FTRAIN_CHECK_ENTRY(R, NAME, PARAMS, ARGS, DEVICE_TENSOR) \
  FT_CHECK(table.NAME != nullptr) << "ops backend '" << name << "' has no entry for op " #NAME;
  FTRAIN_OP_LIST(FTRAIN_CHECK_ENTRY)
#undef FTRAIN_CHECK_ENTRY
  tables()[index_of(table.device)].store(&table, std::memory_order_release);
}

void unregister_backend(Device device) {
  FT_CHECK(device != Device::host) << "the host backend cannot be unregistered";
  tables()[index_of(device)].store(nullptr, std::memory_order_release);
}

const OpTable* find_backend(Device device) {
  const OpTable* t = tables()[index_of(device)].load(std::memory_order_acquire);
  if (t != nullptr) return t;
  load_optional_backend_libraries();  // once; registers through register_backend
  return tables()[index_of(device)].load(std::memory_order_acquire);
}

std::vector<const OpTable*> registered_backends() {
  std::vector<const OpTable*> out;
  for (auto& slot : tables())
    if (const OpTable* t = slot.load(std::memory_order_acquire)) out.push_back(t);
  return out;
}

}  // namespace ftrain
