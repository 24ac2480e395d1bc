// Where a buffer lives and where work runs: the host or a CUDA device.
//
// Lives in base/ (below runtime/ and core/) because streams, events and
// allocators are per device and Tensor (core/tensor.hpp) is built on them.
#pragma once

#include <cstdint>

namespace ftrain {

enum class Device : std::uint8_t { host, cuda };

inline constexpr const char* device_name(Device d) { return d == Device::host ? "host" : "cuda"; }

}  // namespace ftrain
