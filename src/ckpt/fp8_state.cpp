// FP8 state datasets; see fp8_state.hpp.
#include "ckpt/fp8_state.hpp"

#include <algorithm>

#include "ckpt/hdf5_util.hpp"
#include "base/error.hpp"
#include "fp8/recipe.hpp"
#include "kernels/math/fp8.hpp"
#include "runtime/allocator.hpp"

namespace ftrain::ckpt {

std::vector<Fp8StateArray> fp8_state_arrays(const std::vector<Fp8StateRef>& refs) {
  std::vector<Fp8StateArray> out;
  for (const auto& ref : refs) {
    FT_CHECK(ref.state != nullptr && ref.state->defined()) << "FP8 state of " << ref.name << " is not created";
    for (Fp8StateArray a : {Fp8StateArray{ref.name + ".fp8.amax_history", &ref.state->amax_history},
                            Fp8StateArray{ref.name + ".fp8.scale", &ref.state->scale}}) {
      FT_CHECK(a.tensor->dtype() == DType::f32)
          << "checkpoint FP8 state " << a.name << " " << a.tensor->describe() << " is not f32";
      out.push_back(std::move(a));
    }
  }
  return out;
}

namespace {

// dst (f32, any device) = host (f32, same size).
void copy_from_host_f32(const Tensor& host, Tensor& dst) {
  if (dst.device() == Device::host)
    std::copy_n(host.data_as<float>(), host.numel(), dst.data_as<float>());
  else
    find_allocator(dst.device())->copy_from_host(dst.data(), host.data(), host.nbytes());
}

// Reads dataset `name` into `dst` through host memory; returns the host copy.
Tensor read_into(hid_t group, const std::string& name, Tensor& dst, const std::string& where) {
  Tensor staging = Tensor::empty(dst.shape(), DType::f32, Device::host, name);
  h5::read_f32_range(group, name.c_str(), 0, dst.numel(), staging.data_as<float>(), where);
  copy_from_host_f32(staging, dst);
  return staging;
}

}  // namespace

void read_fp8_state_arrays(hid_t group, const std::vector<Fp8StateRef>& refs, const std::string& where) {
  const std::vector<Fp8StateArray> arrays = fp8_state_arrays(refs);  // amax_history, scale per layer
  for (std::size_t layer = 0; layer < refs.size(); ++layer) {
    fp8::LinearState& state = *refs[layer].state;
    read_into(group, arrays[2 * layer].name, *arrays[2 * layer].tensor, where);
    const Tensor scale = read_into(group, arrays[2 * layer + 1].name, *arrays[2 * layer + 1].tensor, where);
    FT_CHECK(state.scale_inv.defined() && state.scale_inv.dtype() == DType::f32 &&
             state.scale_inv.numel() == scale.numel())
        << "FP8 state of " << refs[layer].name << ": scale_inv " << state.scale_inv.describe()
        << " does not match its scale " << scale.describe();
    Tensor scale_inv = Tensor::empty(scale.shape(), DType::f32, Device::host, refs[layer].name + ".fp8.scale_inv");
    for (std::int64_t i = 0; i < scale.numel(); ++i)
      scale_inv.data_as<float>()[i] = math::fp8_scale_inv(scale.data_as<float>()[i]);
    // Derived, not saved: 1 / scale, as every cast and scale update writes
    // it. A rank of the FP8 all-gather that owns no piece of a weight never
    // casts it, so nothing else would before the first step's GEMMs.
    copy_from_host_f32(scale_inv, state.scale_inv);
  }
}

}  // namespace ftrain::ckpt
