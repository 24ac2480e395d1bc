// FP8 state datasets; see fp8_state.hpp.
#include "ckpt/fp8_state.hpp"

#include "ckpt/hdf5_util.hpp"
#include "core/error.hpp"
#include "fp8/recipe.hpp"
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

void read_fp8_state_arrays(hid_t group, const std::vector<Fp8StateRef>& refs, const std::string& where) {
  for (const Fp8StateArray& a : fp8_state_arrays(refs)) {
    Tensor& dst = *a.tensor;
    if (dst.device() == Device::host) {
      h5::read_f32_range(group, a.name.c_str(), 0, dst.numel(), dst.data_as<float>(), where);
      continue;
    }
    Tensor staging = Tensor::empty(dst.shape(), DType::f32, Device::host, a.name);
    h5::read_f32_range(group, a.name.c_str(), 0, dst.numel(), staging.data_as<float>(), where);
    find_allocator(dst.device())->copy_from_host(dst.data(), staging.data(), staging.nbytes());
  }
}

}  // namespace ftrain::ckpt
